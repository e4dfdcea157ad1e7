"""Resident memory and time of training steps on the same examples in the same order: every weight
or a LoRA adapter (rank 8 on every linear layer, as `sparse-react finetune --lora`); the examples of
a step as one padded batch (the old default, `--batch-size 4`) or one at a time with the gradients
accumulated (the default, `--batch-size 1`); and, for the last arm, the fixed mmap threshold of
`--low-memory`. Each arm runs in its own process (the allocator setting is process-wide), one after
the other.

    HF_HUB_OFFLINE=1 python benchmarks/bench_finetune_memory.py DATA.jsonl [--steps 6] [--batch 4]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def resident_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


ARMS = {  # (LoRA, one example at a time, fixed mmap threshold)
    "full, padded batch": (False, False, False), "full, one at a time": (False, True, False),
    "LoRA, padded batch": (True, False, False), "LoRA, one at a time": (True, True, False),
    "LoRA, one at a time, --low-memory": (True, True, True)}


def child(data: Path, steps: int, batch: int, lora: bool, single: bool, fixed: bool) -> dict:
    import random

    import torch

    from sparse_react.models.loading import cpu_has_native_bf16, load_model, plain_model
    from sparse_react.training.finetune import (
        _Collator,
        agent_line_loss,
        peak_rss_mb,
        read_examples,
        return_large_blocks_to_the_os,
        tokenize_example,
    )

    if fixed:
        return_large_blocks_to_the_os()
    torch.manual_seed(0)
    loaded = load_model(None, "cpu", dtype=torch.float32)
    model = plain_model(loaded.model, loaded.source).train()
    if lora:
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(r=8, lora_alpha=16, target_modules="all-linear",
                                                           task_type="CAUSAL_LM"))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    examples = read_examples(data)
    random.Random(0).shuffle(examples)
    collate = _Collator(loaded.tokenizer.pad_token_id or 0)
    rss, seconds = [], []
    for i in range(steps):
        rows = [tokenize_example(loaded.tokenizer, e["messages"], True, 2048)
                for e in examples[i * batch:(i + 1) * batch]]
        started = time.perf_counter()
        labelled = sum(sum(label != -100 for label in row["labels"][1:]) for row in rows)
        for part in ([[row] for row in rows] if single else [rows]):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cpu_has_native_bf16()):
                total, _ = agent_line_loss(model, collate(part))
            (total / labelled).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seconds.append(time.perf_counter() - started)
        rss.append(resident_mb())
    return {"rss": rss, "seconds": seconds, "peak": peak_rss_mb()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="an export (sparse-react export)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--child", choices=list(ARMS))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.data, args.steps, args.batch, *ARMS[args.child])))
        return
    results = {}
    for arm in ARMS:
        out = subprocess.run([sys.executable, __file__, str(args.data), "--steps", str(args.steps), "--batch",
                              str(args.batch), "--child", arm], check=True, capture_output=True, text=True)
        results[arm] = json.loads(out.stdout.strip().splitlines()[-1])
    quarter = max(1, args.steps // 4)
    base = results["full, padded batch"]
    print(f"{args.steps} optimizer steps of {args.batch} examples each (same batches, same order)\n")
    print(f"| weights trained, batches | RSS after {quarter} steps (MB) | RSS at end (MB) | peak RSS (MB) | "
          f"s/step | peak vs full, padded | time vs full, padded |")
    print("|---|---|---|---|---|---|---|")
    for arm, r in results.items():
        print(f"| {arm} | {r['rss'][quarter - 1]:.0f} | {r['rss'][-1]:.0f} | {r['peak']:.0f} | "
              f"{sum(r['seconds']) / len(r['seconds']):.2f} | {r['peak'] / base['peak']:.2f}x | "
              f"{sum(r['seconds']) / sum(base['seconds']):.2f}x |")


if __name__ == "__main__":
    main()
