"""Engine speed: sparse_react's HouseholdEnv versus alfworld's own AlfredTWEnv path.

The alfworld path is textworld.gym with alfworld's wrappers (AlfredDemangler, AlfredInfos), the
way alfworld's AlfredTWEnv builds its environments. Both play the same games with the same
random admissible commands; each runs in its own fresh process, one after the other, so their
timings and peak memory do not mix. The first game of each process only warms it up.

    python benchmarks/bench_env.py [--games alfworld:valid_seen] [--count 20] [--steps 10]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import resource
import statistics
import time


def pick_games(source: str, count: int) -> list[str]:
    from sparse_react.games.catalog import find_games

    refs = find_games(source)
    stride = max(1, len(refs) // (count + 1))
    return [str(r.path) for r in refs[::stride][: count + 1]]  # +1: the warm-up game


def commands(seed: int, admissible: list[str]) -> str:
    return random.Random(seed).choice(admissible)


def run_ours(files: list[str], steps: int, out: mp.Queue) -> None:
    from sparse_react.env import HouseholdEnv
    from sparse_react.games.catalog import game_ref

    refs = [game_ref(__import__("pathlib").Path(f)) for f in files]
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
            step_times.append(time.perf_counter() - t) if i else None
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
            step_times.append(time.perf_counter() - t) if i else None
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
        "step": statistics.mean(step_times),
        "steps": len(step_times),
        "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def measure(target, files: list[str], steps: int) -> dict:
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
    ours = measure(run_ours, files, args.steps)
    print(f"{len(files) - 1} games of {args.games} (+1 warm-up), up to {args.steps} random admissible steps each\n")
    print("| measure | alfworld AlfredTWEnv path | sparse_react | ratio (ours/alfworld) | goal |")
    print("|---|---|---|---|---|")
    for key, label, goal in [("cold", "new game: load + reset (s)", "≤ 0.5"), ("reset", "reset of a loaded game (s)", ""),
                             ("step", "step (s)", "≤ 1.0")]:
        print(f"| {label} | {alf[key]:.3f} | {ours[key]:.3f} | {ours[key] / alf[key]:.2f} | {goal} |")
    print(f"| peak memory (MB) | {alf['peak_mb']:.0f} | {ours['peak_mb']:.0f} | {ours['peak_mb'] / alf['peak_mb']:.2f} | |")
    print(f"\nsparse_react: repeated reset / cold load = {ours['reset'] / ours['cold']:.2f} (goal ≤ 0.2, i.e. 5× faster)")


if __name__ == "__main__":
    main()
