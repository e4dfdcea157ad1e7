"""Resident memory and step time of training on variable-length batches, with glibc's default
(dynamic) mmap threshold versus the fixed one `sparse-react finetune --low-memory` sets. Each arm
runs in its own process (the setting is process-wide) on the same batches in the same order, one
after the other.

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


def child(data: Path, steps: int, batch: int, fixed: bool) -> dict:
    import random

    import torch

    from sparse_react.finetune import _Collator, _plain, return_large_blocks_to_the_os, agent_line_loss
    from sparse_react.finetune import read_examples, tokenize_example
    from sparse_react.policies.hf import cpu_has_native_bf16, load_model

    if fixed:
        return_large_blocks_to_the_os()
    torch.manual_seed(0)
    loaded = load_model(None, "cpu", dtype=torch.float32)
    model = _plain(loaded.model, loaded.source).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
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
    parser.add_argument("--child", choices=["default", "fixed"])
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.data, args.steps, args.batch, args.child == "fixed")))
        return
    results = {}
    for arm in ("default", "fixed"):
        out = subprocess.run([sys.executable, __file__, str(args.data), "--steps", str(args.steps), "--batch",
                              str(args.batch), "--child", arm], check=True, capture_output=True, text=True)
        results[arm] = json.loads(out.stdout.strip().splitlines()[-1])
    quarter = max(1, args.steps // 4)
    print(f"{args.steps} optimizer steps of {args.batch} examples each (same batches, same order)")
    print(f"{'mmap threshold':>15} | RSS after {quarter:>2} | RSS at end | peak RSS | s/step")
    for arm, r in results.items():
        print(f"{arm:>15} | {r['rss'][quarter - 1]:8.0f} MB | {r['rss'][-1]:7.0f} MB | {max(r['rss']):5.0f} MB | "
              f"{sum(r['seconds']) / len(r['seconds']):.2f}")
    d, f = results["default"], results["fixed"]
    print(f"fixed / default: peak RSS {max(f['rss']) / max(d['rss']):.2f}x, "
          f"time {sum(f['seconds']) / sum(d['seconds']):.2f}x")


if __name__ == "__main__":
    main()
