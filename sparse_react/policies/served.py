"""A model behind an OpenAI-compatible server (vLLM, SGLang, llama.cpp, Ollama, `transformers serve`)
as the ReAct policy: the same loop, records, rhythms, reports and decision rule as the local model.

`ServedPolicy` connects to the server (`sparse_react.models.served`) and plays it by the one rule
of `sparse_react.policies.react`. At start it checks whether the server can score (returns the
log-probabilities of a prompt's tokens, each at its own place): the `scored` mode needs it, and in
`free` mode it decides whether the scores or the model's own line choose between thinking and
acting.
"""

from __future__ import annotations

from typing import Any

from sparse_react.agent import PolicyError
from sparse_react.lines import MAX_THOUGHT_TOKENS
from sparse_react.models.served import APIS, KEY_VARIABLE, Retry, ServedBackend, ServerError
from sparse_react.policies.react import ReActPolicy, check_choices

SERVED_ACTION_MODES = ("scored", "free")

__all__ = ["SERVED_ACTION_MODES", "Retry", "ServedPolicy", "ServerError"]


class ServedPolicy(ReActPolicy):
    """A model on an OpenAI-compatible server.

    `endpoint` is the server's base URL (with or without `/v1`), `model` the name it serves the
    model under; the API key, if any, is read from the environment variable `key_variable` and
    never recorded. `api` is `completions` (the local rendering; `tokenizer`, a local model folder,
    `.gguf` file or `base`, supplies the chat template of the head) or `chat` (the server's
    template; free mode only). `shots` (2 or 0) and `window` as for the local model. `backend`
    plays on a backend given instead of connecting to `endpoint`.
    """

    name = "served"

    def __init__(self, endpoint: str, model: str, action_mode: str | None = None, api: str = "completions",
                 tokenizer: str | None = None, shots: int | None = None, window: int = 0,
                 max_thought_tokens: int | None = None, temperature: float = 0.0, seed: int = 0,
                 key_variable: str = KEY_VARIABLE, retry: Retry = Retry(), max_requests: int = 64,
                 backend: Any = None) -> None:
        action_mode = action_mode or "scored"
        if action_mode not in SERVED_ACTION_MODES:
            raise PolicyError(f"action mode {action_mode!r} cannot be played on a server; one of "
                              f"{', '.join(SERVED_ACTION_MODES)}")
        if api not in APIS:
            raise PolicyError(f"unknown API {api!r}; one of {', '.join(APIS)}")
        if api == "chat" and action_mode == "scored":
            raise PolicyError("the chat API returns no log-probabilities of a prompt: score with --api completions, "
                              "or play --action-mode free")
        shots = 2 if shots is None else shots
        check_choices(action_mode, shots, SERVED_ACTION_MODES)
        if backend is None:
            backend = ServedBackend(endpoint, model, api, tokenizer, seed, key_variable, retry, max_requests)
            problem = backend.check_scoring()
            if problem and action_mode == "scored":
                raise PolicyError(f"{problem}: play --action-mode free instead")
        max_thought_tokens = max_thought_tokens or MAX_THOUGHT_TOKENS
        identity = backend.identity()
        spec = {"kind": self.name, **{k: v for k, v in identity.items() if k != "tokenizer"},
                "action_mode": action_mode, "tokenizer": identity.get("tokenizer"), "shots": shots, "window": window,
                "temperature": temperature, "seed": seed, "max_thought_tokens": max_thought_tokens}
        super().__init__(backend, action_mode, shots, window, temperature, seed, max_thought_tokens, spec=spec)
