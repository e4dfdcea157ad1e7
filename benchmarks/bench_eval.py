"""Batch evaluation throughput: episodes per minute with 1 and 2 worker processes.

The same episodes (bundled valid_unseen, expert and random-admissible, act rhythm) are played with
one process and with two; a warm-up pass fills the disk cache first so both sides start equal.

    python benchmarks/bench_eval.py [--games valid_unseen] [--limit 60]
"""

from __future__ import annotations

import argparse
import time

from sparse_react.evaluation import evaluate
from sparse_react.household.catalog import find_games
from sparse_react.policies.expert import ExpertPolicy
from sparse_react.policies.random_admissible import RandomPolicy


def rate(games, policy, workers: int) -> tuple[float, int]:
    start = time.perf_counter()
    episodes = evaluate(games, policy, "act", progress=False, workers=workers)
    return len(episodes) / (time.perf_counter() - start) * 60, sum(e.won for e in episodes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", default="valid_unseen")
    parser.add_argument("--limit", type=int, default=60)
    args = parser.parse_args()
    games = find_games(args.games)[: args.limit]
    evaluate(games, ExpertPolicy(), "act", progress=False)  # warm the disk cache of translations
    print(f"{len(games)} games of {args.games}, act rhythm\n")
    print("| policy | 1 worker (episodes/min) | 2 workers (episodes/min) | ratio | goal |")
    print("|---|---|---|---|---|")
    for name, make in [("expert", ExpertPolicy), ("random", lambda: RandomPolicy(0))]:
        (one, won1), (two, won2) = rate(games, make(), 1), rate(games, make(), 2)
        assert won1 == won2, "workers must not change results"
        print(f"| {name} | {one:.0f} | {two:.0f} | {two / one:.2f} | {'≥ 1.7' if name == 'expert' else ''} |")


if __name__ == "__main__":
    main()
