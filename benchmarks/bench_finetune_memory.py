"""Resident memory and step time of training on variable-length batches: every weight or a LoRA
adapter (rank 8 on every linear layer, as `sparse-react finetune --lora`), each with glibc's default
(dynamic) mmap threshold and with the fixed one `sparse-react finetune` sets by default
(`--no-low-memory` turns it off). Each arm runs in its own process (the setting is process-wide) on
the same batches in the same order, one after the other.

    HF_HUB_OFFLINE=1 python benchmarks/bench_finetune_memory.py DATA.jsonl [--steps 24] [--batch 2]
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


ARMS = {"full, default": (False, False), "full, fixed": (False, True),
        "LoRA, default": (True, False), "LoRA, fixed": (True, True)}  # (LoRA, fixed mmap threshold)


def child(data: Path, steps: int, batch: int, lora: bool, fixed: bool) -> dict:
    import random

    import torch

    from sparse_react.finetune import _Collator, return_large_blocks_to_the_os, agent_line_loss
    from sparse_react.finetune import read_examples, tokenize_example
    from sparse_react.policies.hf import cpu_has_native_bf16, load_model, plain_model

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
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cpu_has_native_bf16()):
            total, count = agent_line_loss(model, collate(rows))
        (total / count).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seconds.append(time.perf_counter() - started)
        rss.append(resident_mb())
    return {"rss": rss, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="an export (sparse-react export)")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--batch", type=int, default=2)
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
    base = results["full, default"]
    print(f"{args.steps} optimizer steps of {args.batch} examples each (same batches, same order)\n")
    print(f"| weights trained, mmap threshold | RSS after {quarter} steps (MB) | RSS at end (MB) | peak RSS (MB) | "
          f"s/step | peak vs full, default | time vs full, default |")
    print("|---|---|---|---|---|---|---|")
    for arm, r in results.items():
        print(f"| {arm} | {r['rss'][quarter - 1]:.0f} | {r['rss'][-1]:.0f} | {max(r['rss']):.0f} | "
              f"{sum(r['seconds']) / len(r['seconds']):.2f} | {max(r['rss']) / max(base['rss']):.2f}x | "
              f"{sum(r['seconds']) / sum(base['seconds']):.2f}x |")


if __name__ == "__main__":
    main()
