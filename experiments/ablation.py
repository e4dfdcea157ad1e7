"""The rhythm ablation with fine-tuned models: one model per rhythm, trained on the same searching-
expert trajectories differing only in their thoughts, with the same budget, then evaluated.

For each rhythm: `search-expert` plays the same train games (ALFWorld's train split, its first
`--train-games`, or its first `--train-per-type` games of each task type; plus the bundled train
set) in that rhythm → `export` → `finetune` (same seed, optimizer steps, batch, learning rate) →
`eval` on the bundled valid_unseen set and ALFWorld's valid_seen split. Finally `report` over every
evaluation run in the folder (earlier rhythms' too) and `ablation.md`, the rhythms side by side per
evaluation set (`ablation_tables.py`, beside this script). Every stage is a library call, printed
before it runs as the `sparse-react` command that does the same (the commands a shipped card
lists); a rerun skips finished stages and resumes unfinished ones.

`--lora-rank R` trains LoRA adapters instead of full models; `--ship` then copies each adapter, its
card (with the commands that made it and the results measured with it) and a README into
`sparse_react/adapters/<rhythm>/`, where `--policy hf` finds it.

    ALFWORLD_DATA=../shared/alfworld HF_HUB_OFFLINE=1 python experiments/ablation.py \
        [--rhythms sparse,dense,im,act] [--max-steps 100] [--out runs/ablation] [--lora-rank 8 --ship]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from ablation_tables import (  # experiments/, the script's folder
    eval_runs,
    ship_adapter,
    shipped_line,
    write_ablation_report,
)

from sparse_react.api import Results, evaluate_with, report_runs
from sparse_react.household.tasks import TaskType
from sparse_react.options import ModelOptions, TrainOptions
from sparse_react.training.cards import MODEL_CARD
from sparse_react.training.export import ExportSummary, export
from sparse_react.training.finetune import finetune
from sparse_react.training.stages import Pipeline, Stage

SEARCHER = ModelOptions(policy="search-expert")


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rhythms", default="sparse,dense,im,act")
    parser.add_argument("--train-games", type=int, default=0, help="first N games of alfworld:train (0: all)")
    parser.add_argument("--train-per-type", type=int, default=0,
                        help="instead, the first N alfworld:train games of each task type")
    parser.add_argument("--max-steps", type=int, default=100, help="optimizer steps of 8 examples per model")
    parser.add_argument("--learning-rate", type=float, default=2e-4)
    parser.add_argument("--batch", type=int, default=16, help="episodes played at once by each evaluation")
    parser.add_argument("--eval-sets", default="valid_unseen,alfworld:valid_seen")
    parser.add_argument("--lora-rank", type=int, default=0, help="train LoRA adapters of this rank (0: full models)")
    parser.add_argument("--ship", action="store_true", help="copy each adapter and its card into the package")
    parser.add_argument("--out", type=Path, default=Path("runs/ablation"))
    return parser


@dataclass(frozen=True)
class RhythmStages:
    """One rhythm's stages: the searching expert's play, its export, the training, the evaluations."""

    experts: list[Stage]
    export: Stage
    finetune: Stage
    evals: list[Stage]


def rhythm_stages(args: argparse.Namespace, rhythm: str) -> RhythmStages:
    out = args.out
    experts = []
    if args.train_per_type:
        for task in TaskType:
            experts.append(Stage("eval", evaluate_with, options={
                "games": "alfworld:train", "task_types": task.value, "limit": args.train_per_type, "model": SEARCHER,
                "workers": 2, "rhythms": rhythm, "out": out / f"expert-{rhythm}-alfworld-{task.value}"}))
    else:
        limit = {"limit": args.train_games} if args.train_games else {}
        experts.append(Stage("eval", evaluate_with, options={
            "games": "alfworld:train", **limit, "model": SEARCHER, "workers": 2, "rhythms": rhythm,
            "out": out / f"expert-{rhythm}-alfworld"}))
    experts.append(Stage("eval", evaluate_with, options={
        "games": "train", "model": SEARCHER, "rhythms": rhythm, "out": out / f"expert-{rhythm}-bundled"}))
    data, model = out / f"data-{rhythm}.jsonl", out / f"model-{rhythm}"
    training = TrainOptions(max_steps=args.max_steps, batch_size=1, grad_accum=8, learning_rate=args.learning_rate,
                            save_steps=20, lora_rank=args.lora_rank)
    evals = [Stage("eval", evaluate_with, options={
        "games": games, "model": ModelOptions(model=str(model)), "rhythms": rhythm, "batch": args.batch,
        "out": out / f"eval-{rhythm}-{games.replace(':', '-')}"}, isolated=True, summary=Results.table)
        for games in args.eval_sets.split(",")]
    return RhythmStages(
        experts,
        Stage("export", export, ([stage.options["out"] for stage in experts],), {"rhythm": rhythm, "out": data},
              summary=ExportSummary.describe),
        Stage("finetune", finetune, options={"data": data, "out": model, "options": training}, isolated=True),
        evals)


def report_stage(out: Path) -> Stage:
    """The report over every evaluation run in the folder, earlier rhythms' too."""
    return Stage("report", report_runs, (eval_runs(out),), {"out": out / "report"})


def main() -> None:
    parser = arguments()
    args = parser.parse_args()
    out = args.out
    if args.ship and not args.lora_rank:
        parser.error("--ship needs --lora-rank: only adapters ship inside the package")
    for rhythm in args.rhythms.split(","):
        pipeline = Pipeline()  # this rhythm's commands, for its shipped card
        stages = rhythm_stages(args, rhythm)
        for stage in stages.experts:
            pipeline.run(stage)
        data, model = stages.export.options["out"], stages.finetune.options["out"]
        pipeline.run(stages.export, done=data.is_file())
        pipeline.run(stages.finetune, done=(model / MODEL_CARD).is_file())
        card = json.loads((model / MODEL_CARD).read_text())
        print(f"  {rhythm}: {card['examples']} examples, {card['steps']} steps, loss {card['first_loss']:.3f} → "
              f"{card['last_loss']:.3f}", flush=True)
        for stage in stages.evals:
            pipeline.run(stage)
        if args.ship:
            runs = [stage.options["out"] for stage in stages.evals]
            print("  " + shipped_line(ship_adapter(model, pipeline.commands, runs)), flush=True)
    Pipeline().run(report_stage(out))
    path = write_ablation_report(out)
    print(f"\n{path}:\n\n{path.read_text()}", flush=True)


if __name__ == "__main__":
    main()
