"""Ship the adapter of one round of `sparse-react rounds` as its rhythm's packaged agent.

Copies round K's adapter (default: the last round) into `sparse_react/adapters/<rhythm>/`, where
`--policy hf` finds it, with a card: the commands that made it (round 0's own, when round 0 was a
copied seed model, then the `rounds` command that resumes the folder), where its training data came
from, the training it continued, and the results of the round's evaluations and of any evaluation
run of it made apart (`--eval RUN --command "sparse-react eval ..."`); and a README. Commands that
made the rounds' inputs (`--before "sparse-react games generate ..."`) go before the `rounds` command.

    python benchmarks/ship_round.py runs/rounds-bootstrap [--round 1] [--before CMD]... [--eval RUN --command CMD]...
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sparse_react.ablation import ship_adapter
from sparse_react.bundled import ADAPTERS_DIR
from sparse_react.cards import MODEL_CARD
from sparse_react.rounds import eval_run, read_settings, rounds_command


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=Path, help="the folder `sparse-react rounds --out` wrote")
    parser.add_argument("--round", type=int, default=None, help="the round whose adapter ships (default: the last)")
    parser.add_argument("--eval", type=Path, action="append", default=[], metavar="RUN",
                        help="an evaluation run of that adapter made apart from the rounds (repeatable)")
    parser.add_argument("--command", action="append", default=[],
                        help="the command that made such a run, for the card (repeatable)")
    parser.add_argument("--before", action="append", default=[], metavar="CMD",
                        help="a command that made an input of the rounds, e.g. their train games (repeatable)")
    args = parser.parse_args()
    settings = read_settings(args.rounds)
    folder = args.rounds / f"round-{settings.rounds if args.round is None else args.round}"
    seed = json.loads((args.rounds / "round-0" / "model" / MODEL_CARD).read_text()).get("commands", [])
    replaced = bool(settings.seed_model) and Path(settings.seed_model).resolve() == (ADAPTERS_DIR / settings.rhythm).resolve()
    commands = [*([f"# round 0 of {args.rounds} was made and measured by these commands:", *seed, "# then, from it:"]
                  if seed else []),
                *([f"# (--seed-model {settings.seed_model} held that adapter then; this one replaced it there)"] if replaced else []),
                *args.before, rounds_command(settings, args.rounds), *args.command]
    runs = [*(eval_run(folder, games) for games in settings.eval_sets), *args.eval]
    print(f"shipped: {ship_adapter(folder / 'model', commands, runs)}")


if __name__ == "__main__":
    main()
