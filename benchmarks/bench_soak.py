"""Worker memory over a long evaluation: the resident memory (RSS) of each worker process, every
`--every` episodes, while `--episodes` search-expert episodes play in 2 worker processes through the
evaluator's own process pool, cycling through the games (shuffled once with a fixed seed, so that
every stretch of the run mixes the task types and their room sizes).

The games are the bundled splits, and ALFWorld's train split when ALFWORLD_DATA is set (3,553
games, each with object names of its own: what made a worker grow). `--baseline` also plays the
same episodes with textworld's own unbounded memo of propositions (the library before the bound of
`engine_cache.bound_proposition_memo`), and prints both series side by side, episodes per second
and per worker CPU second (the fairer measure on a shared machine), and whether every game played
the same lines and outcome in both. The bounded arm plays first, so if the disk cache of
translations is cold it is the one that pays for filling it.

    ALFWORLD_DATA=../shared/alfworld python benchmarks/bench_soak.py [--episodes 5000] [--every 250]
        [--workers 2] [--games train,valid_seen,valid_unseen,alfworld:train] [--baseline] [--out runs/soak]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import resource
import time
from collections import defaultdict
from pathlib import Path

from sparse_react.agent import LoopRules
from sparse_react.evaluation import _play_in_processes
from sparse_react.household import engine_cache
from sparse_react.household.catalog import find_games
from sparse_react.policies import make_policy

BUNDLED = "train,valid_seen,valid_unseen"


def rss_mb(pid: int) -> float:
    """VmRSS of a process in MB (NaN once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def soak(tasks: list, workers: int, every: int, arm: str, rhythm: str) -> dict:
    """Play `tasks` in `workers` processes; RSS of each worker every `every` episodes."""
    policy = make_policy("search-expert")
    played: dict[str, list] = defaultdict(list)  # game -> (lines and answers, won, failure) of each episode
    series, won, pids = [], 0, []  # pids in order of first sight: worker 1, worker 2, a replacement ...
    start, cpu = time.perf_counter(), _children_cpu()
    print(f"\n{arm}: {len(tasks)} episodes, {workers} workers, RSS (MB) every {every}", flush=True)
    for done, episode in enumerate(_play_in_processes(tasks, policy, LoopRules(), workers), 1):
        played[episode.game_name].append(([(e.text, e.observation) for e in episode.entries], episode.won,
                                           episode.failure and episode.failure.value))
        won += episode.won
        if done % every:
            continue
        live = sorted(p.pid for p in mp.active_children())
        pids += [pid for pid in live if pid not in pids]
        rss = {pid: mb for pid in live if (mb := rss_mb(pid)) == mb}  # NaN: it has just exited
        elapsed = time.perf_counter() - start
        series.append({"episodes": done, "seconds": round(elapsed, 1),
                       "rss_mb": {str(pid): round(mb, 1) for pid, mb in rss.items()}})
        print(f"  {done:>6} episodes  {elapsed / 60:6.1f} min  {done / elapsed:5.2f} episodes/s  "
              + "  ".join(f"worker {pids.index(pid) + 1} {mb:6.0f}" for pid, mb in rss.items()), flush=True)
    seconds = time.perf_counter() - start
    while mp.active_children():  # reap the workers, so that their CPU time counts
        time.sleep(0.1)
    cpu = _children_cpu() - cpu
    return {"arm": arm, "rhythm": rhythm, "episodes": len(tasks), "won": won, "seconds": round(seconds, 1),
            "episodes_per_second": round(len(tasks) / seconds, 3), "worker_cpu_seconds": round(cpu, 1),
            "episodes_per_cpu_second": round(len(tasks) / cpu, 3), "pids": pids, "series": series,
            "played": played}


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (the workers of the arms played so far); on a
    shared machine, episodes per worker CPU second compare arms better than episodes per second."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def growth(result: dict) -> list[str]:
    """Per worker: RSS first → last, and growth per 1,000 episodes over the whole series and its
    second half (once the bounded caches have filled)."""
    lines = []
    for number, pid in enumerate(result["pids"], 1):
        points = [(s["episodes"], s["rss_mb"][str(pid)]) for s in result["series"] if str(pid) in s["rss_mb"]]
        if len(points) < 2:
            continue
        (n0, first), (n1, last) = points[0], points[-1]
        nh, half = points[len(points) // 2]
        per_k = (last - first) / (n1 - n0) * 1000
        per_k_half = (last - half) / (n1 - nh) * 1000 if n1 > nh else float("nan")
        lines.append(f"{result['arm']}, worker {number} (pid {pid}): RSS {first:.0f} → {last:.0f} MB over episodes "
                     f"{n0}–{n1}; growth per 1,000 episodes {per_k:+.1f} MB (second half {per_k_half:+.1f} MB)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=5000)
    parser.add_argument("--every", type=int, default=250, help="print worker RSS every this many episodes")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--games", default=None, help=f"comma-separated game sets (default {BUNDLED}, "
                        "and alfworld:train when ALFWORLD_DATA is set)")
    parser.add_argument("--rhythm", default="sparse")
    parser.add_argument("--baseline", action="store_true",
                        help="also play the same episodes with textworld's unbounded memo, and compare")
    parser.add_argument("--out", type=Path, default=None, help="a folder (under runs/) for the series as JSON")
    args = parser.parse_args()
    sets = args.games or BUNDLED + (",alfworld:train" if os.environ.get("ALFWORLD_DATA") else "")
    games = [game for name in sets.split(",") if name.strip() for game in find_games(name.strip())]
    random.Random(0).shuffle(games)
    tasks = [(games[i % len(games)], args.rhythm, 0) for i in range(args.episodes)]
    print(f"{len(games)} games of {sets}; {args.episodes} search-expert episodes ({args.rhythm}), "
          f"{args.workers} workers, textworld's proposition memo bounded at {engine_cache.PROPOSITION_MEMO_SIZE:,}")

    results = [soak(tasks, args.workers, args.every, "bounded", args.rhythm)]
    if args.baseline:  # the workers are forked from here: they inherit the setting
        engine_cache.PROPOSITION_MEMO_SIZE = 0
        results.insert(0, soak(tasks, args.workers, args.every, "unbounded", args.rhythm))

    print("\n| episodes | " + " | ".join(f"{r['arm']} worker {i + 1} (MB)" for r in results
                                         for i in range(min(2, len(r["pids"])))) + " |")
    print("|---" * (1 + sum(min(2, len(r["pids"])) for r in results)) + "|")
    for row in zip(*(r["series"] for r in results)):
        cells = [f"{point['rss_mb'][str(pid)]:.0f}" if str(pid) in point["rss_mb"] else "–"  # a worker done
                 for result, point in zip(results, row) for pid in result["pids"][:2]]
        print(f"| {row[0]['episodes']} | " + " | ".join(cells) + " |")
    print()
    for result in results:
        print(f"{result['arm']}: {result['episodes_per_second']:.2f} episodes/s, "
              f"{result['episodes_per_cpu_second']:.2f} episodes per worker CPU second, "
              f"{result['won']}/{result['episodes']} won, {result['seconds'] / 60:.1f} min")
        for line in growth(result):
            print(line)
    if args.baseline:
        before, after = results[0]["played"], results[1]["played"]
        same = sum(sorted(before[g]) == sorted(after[g]) for g in set(before) | set(after))
        print(f"episode by episode: {same} of {len(set(before) | set(after))} games played the same lines and "
              f"outcome in both arms ({sum(map(len, after.values()))} episodes)")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        summary = [{k: v for k, v in r.items() if k != "played"} for r in results]
        (args.out / "soak.json").write_text(json.dumps({"games": sets, "results": summary}, indent=1) + "\n")
        print(f"series written to {args.out / 'soak.json'}")


if __name__ == "__main__":
    main()
