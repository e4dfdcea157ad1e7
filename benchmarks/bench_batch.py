"""The default model in batch evaluation: one episode at a time versus several episodes decided
together (one forward pass for all), versus two worker processes each playing one at a time.

The same episodes (the first `--limit` bundled valid_unseen games, one rhythm, loop detection off so
every episode plays its full `--steps`) are played each way in this one run; decisions must match.
Both float32 and bfloat16 weights are measured (bfloat16 is fast on CPUs with AMX/AVX512-BF16).

    HF_HUB_OFFLINE=1 python benchmarks/bench_batch.py [--limit 8] [--steps 12] [--batch 8] [--rhythm sparse]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def play(games, loaded, args, batch: int = 1, workers: int = 1) -> tuple[float, list, int]:
    from sparse_react.agent import LoopRules
    from sparse_react.evaluation import evaluate
    from sparse_react.policies.hf import HFPolicy

    policy = HFPolicy(loaded=loaded, max_thought_tokens=24)
    rules = LoopRules(max_steps=args.steps, loop_repeats=0)
    start = time.perf_counter()
    episodes = evaluate(games, policy, args.rhythm, rules=rules, progress=False, batch=batch, workers=workers)
    elapsed = time.perf_counter() - start
    assert all(e.error is None for e in episodes), [e.error for e in episodes if e.error]
    turns = sum(len(e.entries) for e in episodes)
    return turns / elapsed, [[(x.kind.value, x.text) for x in e.entries] for e in episodes], turns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rhythm", default="sparse")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--workers", action="store_true", help="also two worker processes, one thread each")
    args = parser.parse_args()

    import torch

    from sparse_react.household.catalog import find_games
    from sparse_react.models.loading import load_model

    games = find_games("valid_unseen")[: args.limit]
    print(f"{len(games)} bundled valid_unseen games × {args.steps} turns, {args.rhythm} rhythm, "
          f"{torch.get_num_threads()} torch threads\n")
    print("| weights | one at a time (turns/s) | batch of %d (turns/s) | ratio | same decisions |" % args.batch)
    print("|---|---|---|---|---|")
    rates = {}
    for dtype in args.dtypes.split(","):
        loaded = load_model(None, device="cpu", dtype=dtype)
        one, lines1, _ = play(games, loaded, args)
        many, lines_b, _ = play(games, loaded, args, batch=args.batch)
        rates[dtype] = (one, many)
        same = sum(a == b for a, b in zip(lines1, lines_b))
        print(f"| {dtype} | {one:.2f} | {many:.2f} | {many / one:.2f} | {same}/{len(games)} episodes |", flush=True)
        if args.workers:
            torch.set_num_threads(1)
            two, _, _ = play(games, loaded, args, workers=2)
            torch.set_num_threads(os.cpu_count() or 1)
            print(f"| {dtype}, 2 workers × 1 thread, one at a time each | {two:.2f} | | {two / one:.2f} | |", flush=True)
    if len(rates) == 2:
        (f1, _), (_, bb) = rates.values()
        print(f"\nbatched bfloat16 vs one-at-a-time float32: {bb / f1:.2f}× the turns per second")


if __name__ == "__main__":
    main()
