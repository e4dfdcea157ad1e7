"""The main job before and after packed batches (issue 54 §7): the shipped sparse adapter plays the
first `--limit` bundled valid_unseen games as `sparse-react eval` does (50-step budget, loop
detection, 16 episodes decided together), once with the engine of `--before` (padded passes: every
row computed to the widest row's width) and once with this checkout's (packed passes: no padding
position computed), in float32 and in bfloat16.

Each arm runs in its own process on the package as it stood at its commit (`git archive`), one
after the other on this machine. Turns per second are given by wall time and by the process's CPU
time (fairer where other jobs share the cores); `positions` is what the model computed per token
encoded. Every episode's lines (text and observation) and outcome must match between the arms.

    HF_HUB_OFFLINE=1 python benchmarks/bench_packed_batches.py [--limit 32] [--before 99b4daa]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
BEFORE = "99b4daa"  # the last commit whose batches ran padded


def child(limit: int, dtype: str, batch: int, threads: int) -> dict:
    """Play the games with this process's package; turns, times and each episode's lines."""
    import torch

    torch.set_num_threads(threads)

    from sparse_react.agent import LoopRules
    from sparse_react.api import find_games, load_policy_from  # where both arms' packages have them
    from sparse_react.evaluation import evaluate
    from sparse_react.options import ModelOptions

    policy = load_policy_from(ModelOptions(device="cpu", dtype=dtype), ["sparse"])
    model = policy.policy("sparse").backend.model
    positions = [0]  # token positions the model computes, padding included: its input ids, every pass

    def count(module: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        positions[0] += inputs[0].numel()

    model.get_input_embeddings().register_forward_pre_hook(count)
    games = find_games("valid_unseen")[:limit]
    wall, cpu = time.perf_counter(), time.process_time()
    episodes = evaluate(games, policy, "sparse", rules=LoopRules(), progress=False, batch=batch)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert all(e.error is None for e in episodes), [e.error for e in episodes if e.error]
    stats = policy.policy("sparse").backend.stats
    return {"wall": wall, "cpu": cpu, "turns": sum(len(e.entries) for e in episodes),
            "won": sum(e.won for e in episodes),
            "positions": positions[0] / max(1, stats["tokens_encoded"] + stats["tokens_generated"]),
            "episodes": [[e.won, [(x.kind.value, x.text, x.observation) for x in e.entries]] for e in episodes]}


def arm(source: Path, args: argparse.Namespace, dtype: str) -> dict:
    """One arm in its own process, on the package found in `source`."""
    env = {**os.environ, "PYTHONPATH": str(source)}
    command = [sys.executable, __file__, "--child", "--limit", str(args.limit), "--batch", str(args.batch),
               "--threads", str(args.threads), "--dtypes", dtype]
    out = subprocess.run(command, env=env, cwd=source, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=32)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--before", default=BEFORE, help="commit of the engine before packing")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch threads of each arm")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.limit, args.dtypes, args.batch, args.threads)))
        return

    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.before, "sparse_react", "games", "prompts"],
                                 capture_output=True, check=True).stdout
        tarfile.open(fileobj=BytesIO(archive)).extractall(folder, filter="data")
        print(f"first {args.limit} bundled valid_unseen games, shipped sparse adapter, 50-step budget, loop "
              f"detection, batch {args.batch}; {args.threads} torch threads on {os.cpu_count()} cores\n")
        print("| weights | engine | turns | won | positions / token | turns/s (wall) | turns/s (CPU) |")
        print("|---|---|---|---|---|---|---|")
        for dtype in args.dtypes.split(","):
            runs = {}
            for name, source in ((f"padded ({args.before})", Path(folder)), ("packed (this checkout)", REPO)):
                runs[name] = run = arm(source, args, dtype)
                print(f"| {dtype} | {name} | {run['turns']} | {run['won']}/{args.limit} | {run['positions']:.2f} | "
                      f"{run['turns'] / run['wall']:.2f} | {run['turns'] / run['cpu']:.2f} |", flush=True)
            before, after = runs.values()
            same = sum(a == b for a, b in zip(before["episodes"], after["episodes"]))
            wall, cpu = (after["turns"] / after[t] / (before["turns"] / before[t]) for t in ("wall", "cpu"))
            print(f"| {dtype} | packed / padded | | | | {wall:.2f}× | {cpu:.2f}× |")
            print(f"| {dtype} | same episodes (lines, observations, won) | {same}/{args.limit} | | | | |", flush=True)


if __name__ == "__main__":
    main()
