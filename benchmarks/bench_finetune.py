"""One training step of the default model: the loss over every position's vocabulary logits (what
a causal LM computes by default) versus the loss on the agent's lines only (`agent_line_loss`,
what `sparse-react finetune` uses). Same batch, same dtype, measured in this one run.

    HF_HUB_OFFLINE=1 python benchmarks/bench_finetune.py DATA.jsonl [--batch 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main() -> None:
    import torch

    from sparse_react.models.loading import cpu_has_native_bf16, load_model, plain_model
    from sparse_react.training.finetune import _Collator, agent_line_loss, read_examples, tokenize_example

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="an export (sparse-react export)")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    loaded = load_model(None, "cpu", dtype=torch.float32)
    model = plain_model(loaded.model, loaded.source).train()
    rows = [tokenize_example(loaded.tokenizer, e["messages"], True, 2048) for e in read_examples(args.data)[: args.batch]]
    batch = _Collator(loaded.tokenizer.pad_token_id or 0)(rows)
    labelled = int((batch["labels"] != -100).sum())
    print(f"batch: {args.batch} examples, {int(batch['attention_mask'].sum())} tokens, {labelled} labelled "
          f"({labelled / batch['attention_mask'].sum():.0%}); bf16 autocast: {cpu_has_native_bf16()}")

    def full():
        return model(**batch).loss

    def agent_lines():
        total, count = agent_line_loss(model, batch)
        return total / count

    times = {}
    for name, loss_fn in (("every position", full), ("agent lines only", agent_lines)) * 2:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cpu_has_native_bf16()):
            started = time.perf_counter()
            for _ in range(args.repeats):
                loss_fn().backward()
                model.zero_grad(set_to_none=True)
        times[name] = (time.perf_counter() - started) / args.repeats  # the second round, warm, is kept
    base = times["every position"]
    for name, seconds in times.items():
        print(f"{name:>18}: {seconds:6.2f} s per forward+backward  ({base / seconds:.2f}x)")


if __name__ == "__main__":
    main()
