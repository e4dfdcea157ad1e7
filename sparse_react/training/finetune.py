"""Fine-tune a local causal LM on exported episodes (`sparse_react.training.export`), with transformers' Trainer.

Each example is rendered exactly as the model policy renders a live episode for a zero-shot model (the
prefix as one user message under the chat template, then `> line` / observation lines as raw
text), tokenised whole, and labelled only on the agent's lines (each line's tokens and its
newline); observations and the prefix carry no loss.

Examples go through the model one at a time by default (`batch_size=1`, gradients accumulated over
`grad_accum` of them): a padded batch needs an attention mask, which sends PyTorch's CPU attention
to the kernel that materialises every head's score matrix, so memory grows with the square of the
longest example (a 4-example LoRA step of ~1,500-token examples: 10 GB resident, 2.5x the time).

The relabelled states of one episode are packed into one row by default (`sparse_react.training.packing`):
the record goes through the model once and each label trains on exactly what it would see alone.

Full fine-tuning writes a standard Hugging Face model folder (safetensors, config, tokenizer);
`lora_rank > 0` trains a LoRA adapter (peft) instead and writes only the adapter (a few MB, in
bfloat16), which `load_model` merges into its base at load. Either folder holds `sparse_react.json`,
which tells `HFPolicy` to play it zero-shot in the rhythm it learned and, for an adapter, which base
file (by content hash) it was trained on. Checkpoints go to `OUT/checkpoints`; running the same
command again resumes from the newest.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import random
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import torch

from sparse_react.errors import UserError
from sparse_react.lines import is_thought
from sparse_react.models.loading import (
    base_identity,
    cpu_has_native_bf16,
    import_peft,
    load_model,
    plain_model,
    weights_sha256,
)
from sparse_react.options import TrainOptions
from sparse_react.training.cards import DEFAULT_ACTION_MODE, MODEL_CARD, MODEL_FORMAT, ModelError, model_card
from sparse_react.training.packing import IGNORE, pack_mask, pack_rows
from sparse_react.transcript import render, render_head

THOUGHT_MARGIN = 16  # tokens a fine-tuned model may write beyond its longest training thought


class FinetuneError(UserError, ValueError):
    """Unusable training data, base model or output folder; the message says which and why."""


def read_examples(path: Path) -> list[dict]:
    """The exported examples of one rhythm. Raises FinetuneError naming the file when it is
    missing, empty, not an export, or mixes rhythms."""
    try:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
    except OSError as exc:
        raise FinetuneError(f"cannot read training data {path}: {exc.strerror or exc}") from None
    examples = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
            usable = bool(record["messages"]) and record["messages"][0]["role"] == "user"
        except (json.JSONDecodeError, KeyError, TypeError, IndexError):
            usable = False
        if not usable:
            raise FinetuneError(f"{path}:{number} is not an exported example (see `sparse-react export`)")
        examples.append(record)
    if not examples:
        raise FinetuneError(f"{path} holds no examples: export won episodes first (`sparse-react export`)")
    rhythms = sorted({e.get("rhythm") for e in examples}, key=str)
    if len(rhythms) > 1:
        raise FinetuneError(f"{path} mixes rhythms {', '.join(map(str, rhythms))}: train one model per rhythm "
                            f"(`sparse-react export --rhythm R`)")
    return examples


def example_turns(messages: Sequence[dict]) -> list[tuple[str, str]]:
    """An exported example's (agent line, game answer) turns, after its first (prefix) message; a
    last agent line without an answer (a relabelled state's label) gets an empty one."""
    rest = messages[1:]
    answers = [answer["content"] for answer in rest[1::2]]
    return [(line["content"], answers[i] if i < len(answers) else "") for i, line in enumerate(rest[::2])]


def tokenize_example(tokenizer: Any, messages: Sequence[dict], chat: bool, max_length: int) -> dict[str, list[int]]:
    """input_ids and labels (-100 where there is no loss) for one example, rendered as the model
    policy renders an episode (`sparse_react.transcript`), with the loss on the agent's lines (those
    not marked `"train": false`)."""
    transcript = render(render_head(tokenizer, messages[0]["content"] + "\n", chat), example_turns(messages), ask=False)
    encoded = tokenizer(transcript.text, add_special_tokens=not chat, return_offsets_mapping=True)
    ids, labels = encoded["input_ids"], []
    # a relabelled example's own agent lines are context only: `"train": false`
    trained = [line.get("train", True) for line in messages[1::2]]
    spans = iter([span for span, train in zip(transcript.agent_spans, trained) if train])
    span = next(spans, None)
    for token, (start, end) in zip(ids, encoded["offset_mapping"]):
        while span and start >= span[1]:
            span = next(spans, None)
        labels.append(token if span and start >= span[0] and end > start else -100)
    return {"input_ids": ids[:max_length], "labels": labels[:max_length]}


def finetune(data: str | Path, out: Path, options: TrainOptions = TrainOptions(), init_adapter: str | Path | None = None,
             progress: bool = True, callbacks: Sequence[Any] = ()) -> dict:
    """Train on the examples in `data` (from `export` or `relabel`) as `options` say, save the model
    folder to `out`, and return what its card `sparse_react.json` records. With `init_adapter`, go on
    training that LoRA adapter (trained on the same base) instead of a new one.

    Resumes from the newest checkpoint under `out/checkpoints` when there is one.
    """
    from transformers import Trainer, TrainingArguments, set_seed

    lora = bool(options.lora_rank or init_adapter)
    examples = read_examples(Path(data))
    set_seed(options.seed)
    if options.low_memory:
        return_large_blocks_to_the_os()
    try:
        loaded = load_model(options.base, options.device, dtype=torch.float32)
        model = plain_model(loaded.model, loaded.source)
    except ModelError as exc:
        raise FinetuneError(f"base model: {exc}") from None
    tokenizer = loaded.tokenizer
    if init_adapter:
        model = _continued_lora(model, loaded.source, Path(init_adapter))
    elif options.lora_rank:
        model = _with_lora(model, options, data)
    chat = bool(getattr(tokenizer, "chat_template", None))
    rows = [tokenize_example(tokenizer, e["messages"], chat, options.max_length) for e in examples]
    if options.pack:
        rows = pack_rows(examples, rows, options.max_length)
    random.Random(options.seed).shuffle(rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    model.train()
    on_gpu = loaded.device.type == "cuda"
    args = TrainingArguments(
        output_dir=str(out / "checkpoints"), per_device_train_batch_size=options.batch_size,
        gradient_accumulation_steps=options.grad_accum, learning_rate=options.learning_rate,
        num_train_epochs=options.epochs, max_steps=options.max_steps or -1, warmup_steps=0.05,
        lr_scheduler_type="cosine", weight_decay=0.0, logging_steps=max(1, min(10, options.save_steps)),
        save_steps=options.save_steps, save_total_limit=2, seed=options.seed, data_seed=options.seed,
        bf16=on_gpu or (loaded.device.type == "cpu" and cpu_has_native_bf16()), use_cpu=not on_gpu,
        report_to="none", disable_tqdm=not progress, train_sampling_strategy="group_by_length",
        remove_unused_columns=False, dataloader_num_workers=0)
    trainer = _agent_line_trainer(Trainer)(model=model, args=args, train_dataset=rows, data_collator=_Collator(pad),
                                           callbacks=list(callbacks))
    checkpoints = sorted((out / "checkpoints").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    earlier = _elapsed_at(checkpoints[-1]) if checkpoints else 0.0
    started = time.perf_counter()
    trainer.add_callback(_elapsed_recorder(earlier, started))
    try:
        result = trainer.train(resume_from_checkpoint=str(checkpoints[-1]) if checkpoints else None)
        if lora:
            model.to(torch.bfloat16).save_pretrained(str(out))  # half the bytes; merged in float32 at load
        else:
            trainer.save_model(str(out))
            tokenizer.save_pretrained(str(out))
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise FinetuneError(f"the disk is full while writing to {out}; free space and run the same command "
                                f"to resume from the last checkpoint") from None
        raise
    losses = [[h["step"], round(h["loss"], 4)] for h in trainer.state.log_history if "loss" in h]
    trained_on = Path(data).read_bytes()
    card = {"format": MODEL_FORMAT, "rhythm": examples[0].get("rhythm"), "shots": 0, "action_mode": DEFAULT_ACTION_MODE,
            "kind": "lora" if lora else "full", "base": loaded.source,
            **({"base_identity": base_identity(loaded.source, options.base)} if lora else {}),
            "data": str(data), "data_sha256": hashlib.sha256(trained_on).hexdigest(), "data_bytes": len(trained_on),
            "examples": len(examples), "rows": len(rows),
            "settings": {"data": str(data), **asdict(options),
                         "init_adapter": str(init_adapter) if init_adapter else None},
            "steps": trainer.state.global_step,
            "resumed_from": checkpoints[-1].name if checkpoints else None,
            "first_loss": losses[0][1] if losses else None, "last_loss": losses[-1][1] if losses else None,
            "losses": losses,
            "train_loss": result.training_loss, "seconds_this_run": round(time.perf_counter() - started, 1),
            "seconds": None if earlier is None else round(earlier + time.perf_counter() - started, 1),
            "peak_rss_mb_this_run": peak_rss_mb(),
            "max_thought_tokens": longest_thought(tokenizer, examples) + THOUGHT_MARGIN,
            "train_games": sorted({e.get("game_sha256") or e.get("game") for e in examples})}
    (out / MODEL_CARD).write_text(json.dumps(card, indent=1) + "\n")
    return card


ELAPSED = "sparse_react_elapsed.json"


def _elapsed_at(checkpoint: Path) -> float | None:
    """Training seconds up to `checkpoint`, summed over the sittings before it (None: not recorded)."""
    try:
        return float(json.loads((checkpoint / ELAPSED).read_text())["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _elapsed_recorder(earlier: float | None, started: float) -> Any:
    """A callback that writes the training time so far into each checkpoint, so that a resumed run's card can
    give the whole training's time: the Trainer's own checkpoints hold no wall time."""
    from transformers import TrainerCallback

    class RecordElapsed(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if earlier is not None and folder.is_dir():
                seconds = round(earlier + time.perf_counter() - started, 1)
                (folder / ELAPSED).write_text(json.dumps({"seconds": seconds}) + "\n")

    return RecordElapsed()


def peak_rss_mb() -> int:
    """The most resident memory this process has held so far, in MB (0 where the OS does not say)."""
    try:
        import resource
    except ImportError:  # not Unix
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024  # KB on Linux


def return_large_blocks_to_the_os(threshold: int = 1 << 20) -> None:
    """Fix glibc's mmap threshold so every freed activation over `threshold` bytes goes back to the OS.

    By default glibc raises the threshold after each large free, so variable-length batches end up
    carved from a heap that fragments and keeps growing (13.6 GB resident by step 93 of one run).
    The price is page faults on every large allocation (benchmarks/bench_finetune_memory.py).
    """
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").mallopt(-3, threshold)  # M_MMAP_THRESHOLD
        except (OSError, AttributeError):
            pass  # not glibc (musl): nothing to tune


def longest_thought(tokenizer: Any, examples: Sequence[dict]) -> int:
    """Tokens in the longest thought line of the data: how long a thought the model learned to write."""
    thoughts = [line for e in examples for line, _ in example_turns(e["messages"]) if is_thought(line)]
    return max((len(tokenizer(" " + t + "\n", add_special_tokens=False)["input_ids"]) for t in thoughts), default=0)


def _with_lora(model: Any, options: TrainOptions, data: str | Path) -> Any:
    """The model wrapped with trainable LoRA adapters; every other weight frozen."""
    peft = import_peft(f"training data {data} with --lora")
    targets = options.lora_targets if options.lora_targets == "all-linear" else \
        [t.strip() for t in options.lora_targets.split(",") if t.strip()]
    config = peft.LoraConfig(r=options.lora_rank, lora_alpha=options.lora_alpha or 2 * options.lora_rank,
                             lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM")
    try:
        return peft.get_peft_model(model, config)
    except ValueError as exc:  # a target module name the model does not have
        raise FinetuneError(f"--lora-targets {options.lora_targets!r}: {exc}") from None


def _continued_lora(model: Any, source: str, path: Path) -> Any:
    """The adapter at `path` on the model, trainable: training goes on from its weights. It must
    have been trained on this very base (its card's hash)."""
    peft = import_peft(f"--init-adapter {path}")
    try:
        identity = model_card(path).get("base_identity") or {}
    except ModelError as exc:
        raise FinetuneError(f"--init-adapter: {exc}") from None
    if identity.get("sha256") != weights_sha256(source):
        raise FinetuneError(f"--init-adapter {path} was not trained on {source} (its card names "
                            f"{identity.get('file', 'no base')}): pass the --base it was trained on")
    try:
        return peft.PeftModel.from_pretrained(model, str(path), is_trainable=True)
    except Exception as exc:  # peft and safetensors raise many kinds; name the folder
        raise FinetuneError(f"--init-adapter {path} cannot be loaded ({type(exc).__name__}: {exc})") from None


def agent_line_loss(model: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed cross-entropy over the labelled tokens, and their count.

    Runs the output layer only where a label is: the agent's lines are about a third of the tokens,
    and vocabulary logits for every position are the largest tensors of a training step.
    """
    hidden = model.get_decoder()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                 position_ids=batch.get("position_ids")).last_hidden_state
    targets = batch["labels"][:, 1:]
    keep = targets != IGNORE
    logits = model.get_output_embeddings()(hidden[:, :-1][keep]).float()
    return torch.nn.functional.cross_entropy(logits, targets[keep], reduction="sum"), keep.sum()


def _agent_line_trainer(trainer_class: type) -> type:
    class AgentLineTrainer(trainer_class):
        loss_is_scaled_for_ga = True

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            total, count = agent_line_loss(model, inputs)
            # Trainer passes the labelled-token count of the whole accumulated batch when it knows it.
            items = num_items_in_batch if num_items_in_batch is not None else count * self.current_gradient_accumulation_steps
            loss = total / torch.as_tensor(items).clamp(min=1)
            return (loss, None) if return_outputs else loss

    return AgentLineTrainer


class _Collator:
    """Pads a batch on the right: pad tokens for inputs, -100 for labels, and a 0/1 attention mask;
    a batch with a packed row (`sparse_react.training.packing`) gets position ids and a 4D mask instead."""

    def __init__(self, pad: int) -> None:
        self.pad = pad

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((len(rows), width), self.pad, dtype=torch.long)
        labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            n = len(row["input_ids"])
            ids[i, :n], labels[i, :n], mask[i, :n] = torch.tensor(row["input_ids"]), torch.tensor(row["labels"]), 1
        if not any("segments" in row for row in rows):
            return {"input_ids": ids, "labels": labels, "attention_mask": mask}
        positions = torch.zeros(len(rows), width, dtype=torch.long)
        segments = torch.full((len(rows), width), -1, dtype=torch.long)
        reach = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            n = len(row["input_ids"])
            positions[i, :n] = torch.tensor(row.get("position_ids", range(n)))
            segments[i, :n] = torch.tensor(row.get("segments", [0] * n))
            reach[i, :n] = torch.tensor(row.get("reach", [0] * n))
        return {"input_ids": ids, "labels": labels, "attention_mask": pack_mask(segments, reach), "position_ids": positions}
