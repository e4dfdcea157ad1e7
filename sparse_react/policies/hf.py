"""A Hugging Face causal language model run locally as the ReAct policy (nothing is ever downloaded).

`HFPolicy` loads the model (`sparse_react.models.loading`), runs it on the local engine
(`sparse_react.models.local`: KV caches kept across turns, candidates scored as token tries,
episodes batched) and plays it by the one rule of `sparse_react.policies.react`. A model
fine-tuned here carries a card (`sparse_react.json`) whose action mode, shots and thought length
are its defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from sparse_react.lines import MAX_THOUGHT_TOKENS
from sparse_react.models.loading import LoadedModel, load_model
from sparse_react.models.recompute import local_backend
from sparse_react.policies.react import ACTION_MODES, ReActPolicy, check_choices
from sparse_react.training.cards import DEFAULT_ACTION_MODE, ModelError

__all__ = ["ACTION_MODES", "HFPolicy"]


class HFPolicy(ReActPolicy):
    """A local causal LM that writes one line per turn.

    `model` is what `load_model` takes (a folder, a `.gguf` file, an adapter folder, None for the
    embedded SmolLM2-135M-Instruct), or `loaded`, a model loaded already. `action_mode` is
    `scored`, `constrained` or `free` (None: what the model's card asks for, else `scored`).
    `shots=0` drops the prompt's examples (the default for a model fine-tuned here, whose card says
    so); `window > 0` shows only the last `window` turns of a long episode. `chat`, `reuse_cache`,
    `drafts`, `prune` and `keep_lines` are the engine's (`LocalBackend`; a model whose cache it
    cannot keep runs on its slow path, `sparse_react.models.recompute`, and says so); `backend`
    plays on a backend given instead (its `card` then gives the defaults). In free mode,
    `invalid_actions`/`free_actions` give the rate of commands not admissible.
    """

    name = "hf"

    def __init__(self, model: str | Path | None = None, action_mode: str | None = None, device: str = "auto",
                 dtype: str | torch.dtype | None = None, temperature: float = 0.0, seed: int = 0,
                 max_thought_tokens: int | None = None, trust_remote_code: bool = False, reuse_cache: bool = True,
                 chat: bool | None = None, loaded: LoadedModel | None = None, shots: int | None = None,
                 window: int = 0, drafts: bool = True, prune: bool | None = None, keep_lines: bool = True,
                 backend: Any = None) -> None:
        check_choices(action_mode, None, error=ModelError)
        if backend is None:
            backend = local_backend(loaded or load_model(model, device, dtype, trust_remote_code), seed, chat,
                                    reuse_cache, drafts, prune, keep_lines)
        card = backend.card
        action_mode = action_mode or card.get("action_mode", DEFAULT_ACTION_MODE)
        shots = card.get("shots", 2) if shots is None else shots
        check_choices(action_mode, shots, error=ModelError)
        max_thought_tokens = max(1, max_thought_tokens or card.get("max_thought_tokens", MAX_THOUGHT_TOKENS))
        identity = backend.identity()
        spec = {"kind": self.name, **{k: v for k, v in identity.items() if k != "chat"}, "action_mode": action_mode,
                "temperature": temperature, "seed": seed, "shots": shots, "window": window,
                "chat": identity.get("chat"), "max_thought_tokens": max_thought_tokens}
        super().__init__(backend, action_mode, shots, window, temperature, seed, max_thought_tokens,
                         sampler=getattr(backend, "sample", None), spec=spec)

    @property
    def loaded(self) -> LoadedModel:
        """The model played: tokenizer, causal LM, device and where it came from."""
        return self.backend.loaded

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer."""
        return self.backend.tokenizer

    @property
    def chat(self) -> bool:
        """Whether an episode's head is framed by the model's chat template."""
        return self.backend.chat

    @property
    def prune(self) -> bool:
        """Whether greedy scoring searches the candidates best-first (see `LocalBackend`)."""
        return self.backend.prune
