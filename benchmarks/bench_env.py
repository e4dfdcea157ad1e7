"""Engine speed: sparse_react's HouseholdEnv versus alfworld's own AlfredTWEnv path.

The alfworld path is textworld.gym with alfworld's wrappers (AlfredDemangler, AlfredInfos), the
way alfworld's AlfredTWEnv builds its environments: textworld's plain PDDL engine. Both play the
same games with the same random admissible commands (fixed seeds). Each run is its own fresh
process, one after the other, so timings and peak memory do not mix; the first game of each
process only warms it up. sparse_react runs twice: with the disk cache off (a game never seen
before), and in a new process after another process has filled an empty disk cache.

    python benchmarks/bench_env.py [--games alfworld:valid_seen] [--count 20] [--steps 10]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import resource
import statistics
import tempfile
import time
from pathlib import Path


def pick_games(source: str, count: int) -> list[str]:
    from sparse_react.household.catalog import find_games

    refs = find_games(source)
    stride = max(1, len(refs) // (count + 1))
    return [str(r.path) for r in refs[::stride][: count + 1]]  # +1: the warm-up game


def commands(seed: int, admissible: list[str]) -> str:
    return random.Random(seed).choice(admissible)


def run_ours(files: list[str], steps: int, out: mp.Queue) -> None:
    from sparse_react.household.catalog import game_ref
    from sparse_react.household.env import HouseholdEnv

    refs = [game_ref(Path(f)) for f in files]
    env = HouseholdEnv(refs)
    cold, again, step_times = [], [], []
    for i, ref in enumerate(refs):
        t0 = time.perf_counter()
        _, info = env.reset(options={"game": ref})
        t1 = time.perf_counter()
        env.reset(options={"game": ref})
        t2 = time.perf_counter()
        _, info = env.reset(options={"game": ref})
        for k in range(steps):
            t = time.perf_counter()
            _, _, terminated, truncated, info = env.step(commands(i * 1000 + k, info["admissible_commands"]))
            if i:
                step_times.append(time.perf_counter() - t)
            if terminated or truncated:
                break
        if i:
            cold.append(t1 - t0)
            again.append(t2 - t1)
    out.put(summary(cold, again, step_times))


def run_alfworld(files: list[str], steps: int, out: mp.Queue) -> None:
    import textworld
    import textworld.gym
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    cold, again, step_times = [], [], []
    for i, path in enumerate(files):
        env_id = textworld.gym.register_games([path], infos, batch_size=1, asynchronous=False,
                                              max_episode_steps=50, wrappers=[AlfredDemangler(), AlfredInfos],
                                              name=f"bench{i}")
        t0 = time.perf_counter()
        env = textworld.gym.make(env_id)
        _, info = env.reset()
        t1 = time.perf_counter()
        env.reset()
        t2 = time.perf_counter()
        _, info = env.reset()
        for k in range(steps):
            t = time.perf_counter()
            _, _, dones, info = env.step([commands(i * 1000 + k, info["admissible_commands"][0])])
            if i:
                step_times.append(time.perf_counter() - t)
            if dones[0]:
                break
        env.close()
        if i:
            cold.append(t1 - t0)
            again.append(t2 - t1)
    out.put(summary(cold, again, step_times))


def summary(cold: list[float], again: list[float], step_times: list[float]) -> dict:
    return {
        "cold": statistics.mean(cold),
        "reset": statistics.mean(again),
        "step": statistics.mean(step_times) if step_times else float("nan"),
        "steps": len(step_times),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def measure(target, files: list[str], steps: int, **environ: str) -> dict:
    os.environ.update(environ)  # spawned children copy the environment at start
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=target, args=(files, steps, out))
    proc.start()
    result = out.get()
    proc.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", default="alfworld:valid_seen")
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    files = pick_games(args.games, args.count)
    alf = measure(run_alfworld, files, args.steps)
    ours = measure(run_ours, files, args.steps, SPARSE_REACT_DISK_CACHE="0")
    with tempfile.TemporaryDirectory() as cache:
        measure(run_ours, files, 0, SPARSE_REACT_DISK_CACHE="1", SPARSE_REACT_CACHE_DIR=cache)  # fills it
        warm = measure(run_ours, files, args.steps, SPARSE_REACT_DISK_CACHE="1", SPARSE_REACT_CACHE_DIR=cache)
    print(f"{len(files) - 1} games of {args.games} (+1 warm-up), up to {args.steps} random admissible steps each\n")
    print("| measure | alfworld AlfredTWEnv path | sparse_react | ratio (ours/alfworld) | goal |")
    print("|---|---|---|---|---|")
    rows = [("new game: load + reset (s)", alf["cold"], ours["cold"], "≤ 0.5"),
            ("new game, new process, disk cache warm (s)", alf["cold"], warm["cold"], "≤ 0.2"),
            ("reset of a loaded game (s)", alf["reset"], ours["reset"], "≤ 0.1"),
            ("step (s)", alf["step"], ours["step"], "≤ 0.25"),
            ("peak memory (MB)", alf["peak_mb"], ours["peak_mb"], "")]
    for label, theirs, mine, goal in rows:
        digits = 0 if "MB" in label else 3
        print(f"| {label} | {theirs:.{digits}f} | {mine:.{digits}f} | {mine / theirs:.2f} | {goal} |")
    print(f"\nsparse_react: repeated reset / cold load = {ours['reset'] / ours['cold']:.2f} (goal ≤ 0.2, i.e. 5× faster)")


if __name__ == "__main__":
    main()
