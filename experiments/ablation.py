"""The rhythm ablation with fine-tuned models: one model per rhythm, trained on the same searching-
expert trajectories differing only in their thoughts, with the same budget, then evaluated.

For each rhythm: `search-expert` plays the same train games (ALFWorld's train split, its first
`--train-games`, or its first `--train-per-type` games of each task type; plus the bundled train
set) in that rhythm → `sparse-react export` → `sparse-react
finetune` (same seed, optimizer steps, batch, learning rate) → `sparse-react eval` on the bundled
valid_unseen set and ALFWorld's valid_seen split. Finally `sparse-react report` over every evaluation
run in the folder (earlier rhythms' too) and `ablation.md`, the rhythms side by side per evaluation
set (`ablation_tables.py`, beside this script). Every step is one CLI command, printed before it
runs; a rerun skips finished steps and resumes unfinished ones.

`--lora-rank R` trains LoRA adapters instead of full models; `--ship` then copies each adapter, its
card (with the commands that made it and the results measured with it) and a README into
`sparse_react/adapters/<rhythm>/`, where `--policy hf` finds it.

    ALFWORLD_DATA=../shared/alfworld HF_HUB_OFFLINE=1 python experiments/ablation.py \
        [--rhythms sparse,dense,im,act] [--max-steps 100] [--out runs/ablation] [--lora-rank 8 --ship]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sparse_react.cards import MODEL_CARD
from sparse_react.steps import Steps
from sparse_react.tasks import TaskType

from ablation_tables import (  # experiments/, the script's folder
    eval_runs, ship_adapter, shipped_line, write_ablation_report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rhythms", default="sparse,dense,im,act")
    parser.add_argument("--train-games", type=int, default=0, help="first N games of alfworld:train (0: all)")
    parser.add_argument("--train-per-type", type=int, default=0,
                        help="instead, the first N alfworld:train games of each task type")
    parser.add_argument("--max-steps", default="100", help="optimizer steps of 8 examples per model")
    parser.add_argument("--learning-rate", default="2e-4")
    parser.add_argument("--batch", default="16", help="episodes played at once by each evaluation")
    parser.add_argument("--eval-sets", default="valid_unseen,alfworld:valid_seen")
    parser.add_argument("--lora-rank", type=int, default=0, help="train LoRA adapters of this rank (0: full models)")
    parser.add_argument("--ship", action="store_true", help="copy each adapter and its card into the package")
    parser.add_argument("--out", type=Path, default=Path("runs/ablation"))
    args = parser.parse_args()
    out = args.out
    if args.ship and not args.lora_rank:
        parser.error("--ship needs --lora-rank: only adapters ship inside the package")
    lora = ["--lora", "--lora-rank", str(args.lora_rank)] if args.lora_rank else []
    for rhythm in args.rhythms.split(","):
        steps = Steps()  # this rhythm's commands, for its shipped card
        step = steps.run
        experts = []
        if args.train_per_type:
            for task in TaskType:
                experts.append(out / f"expert-{rhythm}-alfworld-{task.value}")
                step(["eval", "--games", "alfworld:train", "--task-types", task.value, "--limit",
                      str(args.train_per_type), "--policy", "search-expert", "--workers", "2", "--rhythms", rhythm,
                      "--out", str(experts[-1])])
        else:
            experts.append(out / f"expert-{rhythm}-alfworld")
            limit = ["--limit", str(args.train_games)] if args.train_games else []
            step(["eval", "--games", "alfworld:train", *limit, "--policy", "search-expert", "--workers", "2",
                  "--rhythms", rhythm, "--out", str(experts[-1])])
        experts.append(out / f"expert-{rhythm}-bundled")
        step(["eval", "--games", "train", "--policy", "search-expert", "--rhythms", rhythm, "--out", str(experts[-1])])
        data, model = out / f"data-{rhythm}.jsonl", out / f"model-{rhythm}"
        step(["export", *map(str, experts), "--rhythm", rhythm, "--out", str(data)], done=data.is_file())
        step(["finetune", "--data", str(data), "--out", str(model), "--max-steps", args.max_steps,
              "--batch-size", "1", "--grad-accum", "8", "--learning-rate", args.learning_rate, "--save-steps", "20",
              *lora],
             done=(model / MODEL_CARD).is_file())
        card = json.loads((model / MODEL_CARD).read_text())
        print(f"  {rhythm}: {card['examples']} examples, {card['steps']} steps, loss {card['first_loss']:.3f} → "
              f"{card['last_loss']:.3f}", flush=True)
        runs = []
        for games in args.eval_sets.split(","):
            runs.append(out / f"eval-{rhythm}-{games.replace(':', '-')}")
            step(["eval", "--games", games, "--model", str(model), "--rhythms", rhythm, "--batch", args.batch,
                  "--out", str(runs[-1])])
        if args.ship:
            print("  " + shipped_line(ship_adapter(model, steps.commands, runs)), flush=True)
    Steps().run(["report", *map(str, eval_runs(out)), "--out", str(out / "report")])
    path = write_ablation_report(out)
    print(f"\n{path}:\n\n{path.read_text()}", flush=True)


if __name__ == "__main__":
    main()
