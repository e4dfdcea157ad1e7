"""Ship the adapter of one round of `sparse-react rounds` as its rhythm's packaged agent.

Copies round K's adapter (default: the last round) into `sparse_react/adapters/<rhythm>/`, where
`--policy hf` finds it, with a card: the commands that made it (round 0's own, when round 0 was a
copied seed model: its card's, those of the rounds folder it was a round of, or those of the shipped
adapter with its very weights; then the `rounds` command that resumes the folder), where its
training data came from, the training it continued, and the results of the round's evaluations and
of any evaluation run of it made apart (`--eval RUN --command "sparse-react eval ..."`); and a
README. Commands that made the rounds' inputs (`--before "sparse-react games generate ..."`) go
before the `rounds` command.

    python experiments/ship_round.py runs/rounds-bootstrap [--round 1] [--before CMD]... [--eval RUN --command CMD]...
"""

from __future__ import annotations

import argparse
import filecmp
import json
from pathlib import Path
from typing import Sequence

from ablation_tables import ship_adapter, shipped_line  # experiments/, the script's folder

from sparse_react.bundled import ADAPTERS_DIR
from sparse_react.training.cards import ADAPTER_WEIGHTS, MODEL_CARD
from sparse_react.training.rounds import eval_run, read_settings, rounds_command, seed_rounds


def seed_commands(round0: Path, rhythm: str) -> list[str]:
    """The commands that made round 0's model: its card's, or, when it was copied from a training run
    whose card has none, those of the shipped adapter that holds the same weights byte for byte."""
    commands = json.loads((round0 / MODEL_CARD).read_text()).get("commands", [])
    shipped = ADAPTERS_DIR / rhythm
    if not commands and (shipped / ADAPTER_WEIGHTS).is_file() and filecmp.cmp(
            shipped / ADAPTER_WEIGHTS, round0 / ADAPTER_WEIGHTS, shallow=False):
        commands = json.loads((shipped / MODEL_CARD).read_text()).get("commands", [])
    return commands


def made_by(rounds: Path, before: Sequence[str] = ()) -> list[str]:
    """The commands that made a rounds folder's models: round 0's (followed into the rounds folder
    its seed model came from, if it is one of those), the `before` commands, the `rounds` command."""
    settings = read_settings(rounds)
    origin = seed_rounds(settings)
    seed = made_by(origin) if origin else seed_commands(rounds / "round-0" / "model", settings.rhythm)
    replaced = bool(settings.seed_model) and Path(settings.seed_model).resolve() == (ADAPTERS_DIR / settings.rhythm).resolve()
    return [*([f"# round 0 of {rounds} was made and measured by these commands:", *seed, "# then, from it:"] if seed else []),
            *([f"# (--seed-model {settings.seed_model} held that adapter then; this one replaced it there)"] if replaced else []),
            *before, rounds_command(settings, rounds)]


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
    commands = [*made_by(args.rounds, args.before), *args.command]
    runs = [*(eval_run(folder, games) for games in settings.eval_sets), *args.eval]
    print(shipped_line(ship_adapter(folder / "model", commands, runs)))


if __name__ == "__main__":
    main()
