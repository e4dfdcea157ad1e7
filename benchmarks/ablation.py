"""The rhythm ablation with fine-tuned models: one model per rhythm, trained on the same searching-
expert trajectories differing only in their thoughts, with the same budget, then evaluated.

For each rhythm: `search-expert` plays the same train games (ALFWorld's train split, or its first
`--train-games`, plus the bundled train set) in that rhythm → `sparse-react export` → `sparse-react
finetune` (same seed, optimizer steps, batch, learning rate) → `sparse-react eval` on the bundled
valid_unseen set and ALFWorld's valid_seen split. Finally `sparse-react report` over every evaluation
run in the folder (earlier rhythms' too) and `ablation.md`, the rhythms side by side per evaluation
set (`sparse_react.ablation`). Every step is one CLI command, printed before it runs; a rerun skips
finished steps and resumes unfinished ones.

    ALFWORLD_DATA=../shared/alfworld HF_HUB_OFFLINE=1 python benchmarks/ablation.py \
        [--rhythms sparse,dense,im,act] [--max-steps 100] [--out runs/ablation]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

from sparse_react.ablation import eval_runs, write_ablation_report

CLI = [sys.executable, "-m", "sparse_react.cli"]


def step(args: list[str], done: bool = False) -> None:
    print("$ sparse-react " + shlex.join(args) + ("   # done, skipped" if done else ""), flush=True)
    if not done:
        started = time.perf_counter()
        subprocess.run(CLI + args, check=True)
        print(f"  ({time.perf_counter() - started:.0f} s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rhythms", default="sparse,dense,im,act")
    parser.add_argument("--train-games", type=int, default=0, help="first N games of alfworld:train (0: all)")
    parser.add_argument("--max-steps", default="100", help="optimizer steps of 8 examples per model")
    parser.add_argument("--learning-rate", default="2e-4")
    parser.add_argument("--batch", default="16", help="episodes played at once by each evaluation")
    parser.add_argument("--eval-sets", default="valid_unseen,alfworld:valid_seen")
    parser.add_argument("--out", type=Path, default=Path("runs/ablation"))
    args = parser.parse_args()
    out = args.out
    for rhythm in args.rhythms.split(","):
        experts = [out / f"expert-{rhythm}-alfworld", out / f"expert-{rhythm}-bundled"]
        limit = ["--limit", str(args.train_games)] if args.train_games else []
        step(["eval", "--games", "alfworld:train", *limit, "--policy", "search-expert", "--workers", "2",
              "--rhythms", rhythm, "--out", str(experts[0])])
        step(["eval", "--games", "train", "--policy", "search-expert", "--rhythms", rhythm, "--out", str(experts[1])])
        data, model = out / f"data-{rhythm}.jsonl", out / f"model-{rhythm}"
        step(["export", *map(str, experts), "--rhythm", rhythm, "--out", str(data)], done=data.is_file())
        step(["finetune", "--data", str(data), "--out", str(model), "--max-steps", args.max_steps,
              "--batch-size", "4", "--grad-accum", "2", "--learning-rate", args.learning_rate, "--save-steps", "20"],
             done=(model / "sparse_react.json").is_file())
        card = json.loads((model / "sparse_react.json").read_text())
        print(f"  {rhythm}: {card['examples']} examples, {card['steps']} steps, loss {card['first_loss']:.3f} → "
              f"{card['last_loss']:.3f}", flush=True)
        for games in args.eval_sets.split(","):
            run = out / f"eval-{rhythm}-{games.replace(':', '-')}"
            step(["eval", "--games", games, "--model", str(model), "--rhythms", rhythm, "--batch", args.batch,
                  "--out", str(run)])
    step(["report", *map(str, eval_runs(out)), "--out", str(out / "report")])
    path = write_ablation_report(out)
    print(f"\n{path}:\n\n{path.read_text()}", flush=True)


if __name__ == "__main__":
    main()
