"""Training on relabelled states one at a time against packed (`sparse_react.training.packing`): the same
states of the same episodes, one forward and backward pass each over the embedded SmolLM2-135M with
a LoRA adapter (as `sparse-react finetune --lora`), in bfloat16 where the CPU has it. Each arm runs
in its own process for its peak memory; both print the summed loss, which must agree.

    HF_HUB_OFFLINE=1 python benchmarks/bench_packing.py RELABELLED.jsonl [--episodes 3]
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


def child(data: Path, episodes: int, packed: bool, max_length: int) -> dict:
    import peft
    import torch

    from sparse_react.models.loading import cpu_has_native_bf16, load_model, plain_model
    from sparse_react.training.finetune import _Collator, agent_line_loss, peak_rss_mb, read_examples, tokenize_example
    from sparse_react.training.packing import pack_rows

    torch.manual_seed(0)
    loaded = load_model(None, "cpu", dtype=torch.float32)
    model = peft.get_peft_model(plain_model(loaded.model, loaded.source).train(),
                                peft.LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"))
    examples = [e for e in read_examples(data) if "state_step" in e]
    games = list(dict.fromkeys(e["game"] for e in examples))[:episodes]
    examples = [e for e in examples if e["game"] in games]
    rows = [tokenize_example(loaded.tokenizer, e["messages"], True, max_length) for e in examples]
    if packed:
        rows = pack_rows(examples, rows, max_length)
    collate = _Collator(loaded.tokenizer.pad_token_id or 0)
    started, loss, labelled = time.perf_counter(), 0.0, 0
    for row in rows:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cpu_has_native_bf16()):
            total, count = agent_line_loss(model, collate([row]))
        total.backward()
        loss, labelled = loss + total.item(), labelled + int(count)
    return {"states": len(examples), "rows": len(rows), "tokens": sum(len(r["input_ids"]) for r in rows),
            "labelled": labelled, "loss": loss, "seconds": time.perf_counter() - started, "peak": peak_rss_mb()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="relabelled states (sparse-react relabel)")
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=2048)
    parser.add_argument("--child", choices=["alone", "packed"])
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.data, args.episodes, args.child == "packed", args.max_length)))
        return
    results = {}
    for arm in ("alone", "packed"):
        out = subprocess.run([sys.executable, __file__, str(args.data), "--episodes", str(args.episodes),
                              "--max-length", str(args.max_length), "--child", arm],
                             check=True, capture_output=True, text=True)
        results[arm] = json.loads(out.stdout.strip().splitlines()[-1])
    alone, packed = results["alone"], results["packed"]
    print(f"{alone['states']} relabelled states of {args.episodes} episodes, {alone['labelled']} label tokens; "
          f"summed loss alone {alone['loss']:.2f}, packed {packed['loss']:.2f}\n")
    print("| arm | rows | tokens through the model | seconds | peak RSS (MB) |")
    print("|---|---|---|---|---|")
    for arm, r in results.items():
        print(f"| {arm} | {r['rows']} | {r['tokens']} | {r['seconds']:.1f} | {r['peak']} |")
    print(f"\npacked vs alone: {packed['tokens'] / alone['tokens']:.2f}x the tokens, "
          f"{packed['seconds'] / alone['seconds']:.2f}x the time, {packed['peak'] / alone['peak']:.2f}x the peak memory")


if __name__ == "__main__":
    main()
