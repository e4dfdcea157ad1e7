"""What a model backend does for a policy: a few batched primitives over prompts, in the spirit of
lm-evaluation-harness's `LM` (`loglikelihood`, `generate_until`). Every decision (think or act,
temperature, reading a written line) is the policy's (`sparse_react.policies.react`); a backend
only scores and writes.

- `score`: the mean log-probability of each candidate continuation after a prompt;
- `generate`: a continuation of a prompt (after a forced start), to the end of its line, within a
  token cap;
- `choose` (optional, `ConstrainedBackend`): the candidate the model writes itself, token by token
  within the candidates.

A prompt belongs to a stream (`Prompt.key`, one per episode) whose text only grows from call to
call. A backend may keep what it computed for a stream (a KV cache) until `release(key)`, and
`prefill` brings a turn's streams up to date together, so the calls after it read their caches;
`commit` says which continuation the stream's text goes on with, so that what was computed for it
while scoring or writing can be kept. A backend that keeps nothing (a server) makes these no-ops.

Results come back in request order; a request that failed alone is its exception in its place
(a batch that fails as a whole raises).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class Prompt:
    """The text a model continues, the stream it belongs to, and (for a backend that applies its
    own chat template) the same episode as chat messages."""

    key: Hashable
    text: str
    messages: tuple[dict[str, str], ...] = ()


@dataclass(frozen=True)
class ScoreRequest:
    """Score each candidate continuation of `prompt`. With `best_only`, only the best candidate's
    score must be exact (a greedy choice): a backend may return -inf for candidates that cannot win."""

    prompt: Prompt
    candidates: tuple[str, ...]
    best_only: bool = False


@dataclass(frozen=True)
class Scores:
    """Each candidate's mean token log-probability, and the tokens the backend computed (None: unknown)."""

    values: list[float]
    tokens: int | None = None


@dataclass(frozen=True)
class GenerateRequest:
    """Write after `prompt` and `forced` (a start the continuation is made to have) until the end of
    the line, at most `max_tokens` tokens, sampling at `temperature` (0: greedy)."""

    prompt: Prompt
    max_tokens: int
    forced: str = ""
    temperature: float = 0.0


@dataclass(frozen=True)
class Generation:
    """The line written (after the forced start, without the newline), and the tokens it cost (None: unknown)."""

    text: str
    tokens: int | None = None


@dataclass(frozen=True)
class ChooseRequest:
    """Write one of `candidates` after `prompt`, token by token, each token picked (at `temperature`)
    among those that continue a candidate still left."""

    prompt: Prompt
    candidates: tuple[str, ...]
    temperature: float = 0.0


@dataclass(frozen=True)
class Choice:
    """The index of the candidate written (len(candidates) when there were none), and its tokens."""

    index: int
    tokens: int | None = None


@runtime_checkable
class Backend(Protocol):
    """A model that scores and writes continuations of prompts (see the module docstring).

    `can_score` says whether `score` works (a server may not return prompt log-probabilities);
    `wants_messages` whether prompts must carry chat messages; `stats` counts what the backend did.
    """

    can_score: bool
    wants_messages: bool
    stats: dict

    def frame(self, prefix: str) -> str:
        """An episode's fixed head as this model reads it (under its chat template, or plain)."""

    def prefill(self, prompts: Sequence[Prompt]) -> list[int | None]:
        """Bring the streams up to their prompts' texts together; the tokens computed for each."""

    def score(self, requests: Sequence[ScoreRequest]) -> list[Scores | Exception]:
        """The scores of each request's candidates."""

    def generate(self, requests: Sequence[GenerateRequest]) -> list[Generation | Exception]:
        """The line written for each request."""

    def commit(self, key: Hashable, continuation: str) -> None:
        """The stream `key`'s text goes on with `continuation` (the line chosen)."""

    def release(self, key: Hashable) -> None:
        """Forget the stream `key` (its episode is over, or a new one starts under the key)."""


@runtime_checkable
class ConstrainedBackend(Backend, Protocol):
    """A backend that can also write within candidates (`constrained` action mode)."""

    def choose(self, requests: Sequence[ChooseRequest]) -> list[Choice | Exception]:
        """The candidate each request's model writes."""
