"""How a model picks its command, and what that costs: the same model plays the same bundled games in
each action mode in one run, and the table gives wins, turns a second and tokens encoded per turn.

`scored` ranks every admissible command by its length-normalised log-likelihood (a best-first search
of the tree of candidates over a few passes, feeding only the branches that can still win, by default
in float32 only; an arm `scored:full` feeds the whole tree in one pass, `scored:best` always searches);
`constrained` writes the command token by token, choosing only among tokens
that continue an admissible command (a few one-token passes). An arm `MODE:nodrafts` writes each
thought one token per pass instead of checking drafted tokens (the same text either way); `MODE:nokeep`
encodes each chosen line again the next turn instead of keeping what was fed while choosing or writing
it. Options combine (`scored:full:nokeep`). Packed passes against padded ones:
`benchmarks/bench_packed_batches.py`.
The last column says whether an arm wrote the same lines as the first arm of its mode. Whole
episodes with the 50-step budget, 16 decided together, as `sparse-react eval` plays them.

    HF_HUB_OFFLINE=1 python benchmarks/bench_action_modes.py [--model DIR] [--rhythm sparse] [--limit 24]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model or adapter folder (default: the shipped adapter of --rhythm)")
    parser.add_argument("--rhythm", default="sparse")
    parser.add_argument("--games", default="valid_unseen")
    parser.add_argument("--limit", type=int, default=24, help="games, spread evenly over the set")
    parser.add_argument("--arms", default="scored,constrained:nodrafts,constrained")
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()

    from sparse_react.evaluation import evaluate
    from sparse_react.household.catalog import find_games
    from sparse_react.models.loading import load_model
    from sparse_react.policies.hf import HFPolicy
    from sparse_react.policies.shipped import shipped_adapter

    every = find_games(args.games)
    games = every[:: max(1, len(every) // args.limit)][: args.limit]
    loaded = load_model(args.model or shipped_adapter(args.rhythm), "cpu")
    rows, first_lines = [], {}
    for arm in args.arms.split(","):
        mode, *options = arm.split(":")
        prune = False if "full" in options else True if "best" in options else None
        policy = HFPolicy(loaded=loaded, action_mode=mode, drafts="nodrafts" not in options, prune=prune,
                          keep_lines="nokeep" not in options)
        started = time.perf_counter()
        episodes = evaluate(games, policy, args.rhythm, progress=False, batch=args.batch)
        seconds = time.perf_counter() - started
        turns = sum(len(e.entries) for e in episodes)
        lines = [[(x.kind, x.text) for x in e.entries] for e in episodes]
        same = "yes" if first_lines.setdefault(mode, lines) == lines else "no"
        rows.append((arm, sum(e.won for e in episodes), len(episodes), turns, seconds,
                     policy.stats["tokens_encoded"] / max(1, turns), policy.stats["forward_calls"] / max(1, turns),
                     sum(e.error is not None for e in episodes), same))
    print(f"{loaded.source}, {args.rhythm} rhythm, {len(games)} games of {args.games}, batch {args.batch}\n")
    print("| arm | won | turns | seconds | turns/s | tokens encoded per turn | passes per turn | errors | "
          "time per turn vs first | same lines |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    first = rows[0][4] / max(1, rows[0][3])
    for arm, won, n, turns, seconds, tokens, passes, errors, same in rows:
        print(f"| {arm} | {won}/{n} | {turns} | {seconds:.0f} | {turns / seconds:.2f} | {tokens:.0f} | {passes:.2f} | "
              f"{errors} | {seconds / max(1, turns) / first:.2f}x | {same} |")


if __name__ == "__main__":
    main()
