"""The local engine's slow path, for a model whose cache it cannot keep as its own
(`sparse_react.models.layers.LayerPlan.unsupported`: chunked or linear attention, convolutions,
layers sharing a cache, a cache class of the model's own).

Each stream is run alone by the model's own forward: no attention mask of the engine's, the cache
the model makes for itself, grown only by the text as it is (the way `generate` decodes). Each
candidate, thought or written command is fed on a copy of the stream's cache, one token path at a
time: correct for any cache kind transformers implements, at the cost of batching, candidate tries
and the tokens a turn could have kept. `local_backend` picks it when the fast engine cannot run a
model, and says so once.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, Callable, Hashable, Sequence

import torch

from sparse_react.models.backend import (
    Choice, ChooseRequest, GenerateRequest, Generation, Prompt, Scores, ScoreRequest)
from sparse_react.models.batch import Stream
from sparse_react.models.layers import layer_plan
from sparse_react.models.loading import LoadedModel
from sparse_react.models.local import LocalBackend


def local_backend(loaded: LoadedModel, seed: int = 0, chat: bool | None = None, reuse_cache: bool = True,
                  drafts: bool = True, prune: bool | None = None, keep_lines: bool = True) -> LocalBackend:
    """The local engine for `loaded`: `LocalBackend` (options as there) where it can keep the model's
    caches, else `RecomputeBackend`, with a warning that says why."""
    unsupported = layer_plan(loaded.model).unsupported
    if unsupported is None:
        return LocalBackend(loaded, seed, chat, reuse_cache, drafts, prune, keep_lines)
    warnings.warn(f"{loaded.source}: the local engine cannot keep this model's cache ({unsupported}); it takes "
                  f"its slow path, each episode alone through the model's own forward and cache (correct, slower)",
                  stacklevel=2)
    return RecomputeBackend(loaded, seed, chat, unsupported)


class RecomputeBackend(LocalBackend):
    """`LocalBackend`'s primitives run one stream at a time by the model's own forward and cache
    (see the module docstring); `reason` says why, in `identity()["engine"]`. Same tokens, frames
    and sampling as `LocalBackend`; no drafts, pruning, kept lines or batches."""

    def __init__(self, loaded: LoadedModel, seed: int = 0, chat: bool | None = None, reason: str = "") -> None:
        attention = getattr(loaded.model.config, "_attn_implementation", None)
        super().__init__(loaded, seed, chat, drafts=False, prune=False, keep_lines=False)
        if attention and loaded.model.config._attn_implementation != attention:  # the model's own attention, as it came
            loaded.model.set_attn_implementation(attention)
        self._identity["engine"] = f"recompute ({reason})" if reason else "recompute"
        self._plain: dict[Hashable, Stream] = {}

    def prefill(self, prompts: Sequence[Prompt]) -> list[int | None]:
        """Bring each stream's cache up to its prompt; the tokens encoded for each."""
        counted = []
        with torch.inference_mode():
            for prompt in prompts:
                stream = self._own(prompt.key)
                before = stream.tokens
                self._sync(stream, prompt)
                counted.append(stream.tokens - before)
        return counted

    def score(self, requests: Sequence[ScoreRequest]) -> list[Scores | Exception]:
        """Mean log-probability of each candidate after its prompt, each candidate fed on its own."""
        return self._each(requests, Scores, lambda stream, r: [
            self._mean_logprob(stream, self.continuation(c)) for c in r.candidates])

    def choose(self, requests: Sequence[ChooseRequest]) -> list[Choice | Exception]:
        """The candidate the model writes for each request, token by token within the candidates."""
        return self._each(requests, Choice, lambda stream, r: self._walk(
            stream, [self.continuation(c) for c in r.candidates], r.temperature))

    def generate(self, requests: Sequence[GenerateRequest]) -> list[Generation | Exception]:
        """Each request's line, written after its prompt and forced start to a newline, EOS or its cap."""
        return self._each(requests, Generation, lambda stream, r: self._write(
            stream, self.continuation(r.forced) if r.forced else [], r.max_tokens, r.temperature))

    def _each(self, requests: Sequence, result: Callable[[Any, int], Any],
              answer: Callable[[Stream, Any], Any]) -> list:
        """Each request's `result`: what `answer` gives on its stream brought up to its prompt, and the
        tokens computed for it."""
        results = []
        with torch.inference_mode():
            for request in requests:
                stream = self._own(request.prompt.key)
                before = stream.tokens
                self._sync(stream, request.prompt)
                value = answer(stream, request)
                results.append(result(value, stream.tokens - before))
        return results

    def commit(self, key: Hashable, continuation: str) -> None:
        """Nothing is kept from a turn: the next prompt is fed as text."""

    def release(self, key: Hashable) -> None:
        """Free the stream's cache."""
        self._plain.pop(key, None)

    # --- the model's own forward ---------------------------------------------------------------------

    def _own(self, key: Hashable) -> Stream:
        if key not in self._plain:
            self._plain[key] = Stream(None)
        return self._plain[key]

    def _forward(self, stream: Stream, ids: list[int], cache: Any) -> tuple[torch.Tensor, Any]:
        """Log-probabilities after each of `ids` fed on `cache` (None: a new one), and the cache after."""
        self.stats["forward_calls"] += 1
        self.stats["tokens_encoded"] += len(ids)
        stream.tokens += len(ids)
        given = {self.runner.cache_argument: cache} if cache is not None else {}
        out = self.model(input_ids=torch.tensor([ids], device=self.device), use_cache=True, **given)
        after = getattr(out, "cache", None)
        after = getattr(out, "past_key_values", None) if after is None else after
        return torch.log_softmax(out.logits[0].float(), dim=-1), after

    def _sync(self, stream: Stream, prompt: Prompt) -> None:
        """Feed the prompt's tokens beyond the stream's (all of them when its text does not extend the last)."""
        ids = self.encode(prompt.text)
        if stream.logprobs is not None and ids == stream.ids:
            return
        if stream.logprobs is None or ids[:len(stream.ids)] != stream.ids:
            if stream.ids:
                self.stats["full_reencodes"] += 1
            stream.cache, stream.ids = None, []
        logprobs, stream.cache = self._forward(stream, ids[len(stream.ids):], stream.cache)
        stream.ids, stream.logprobs, stream.text = ids, logprobs[-1], prompt.text

    def _mean_logprob(self, stream: Stream, tokens: list[int]) -> float:
        terms = [stream.logprobs[tokens[0]]]
        if len(tokens) > 1:
            after, _ = self._forward(stream, tokens[:-1], copy.deepcopy(stream.cache))
            terms += [after[i, token] for i, token in enumerate(tokens[1:])]
        return float(torch.stack(terms).mean())

    def _walk(self, stream: Stream, candidates: list[list[int]], temperature: float) -> int:
        """`Writer.walk` for one stream: each token picked among those that continue a candidate left."""
        left, logprobs, cache, depth = list(range(len(candidates))), stream.logprobs, None, 0
        if not left:
            return 0
        while True:
            complete = [i for i in left if len(candidates[i]) <= depth]
            if len(left) == 1 or complete:
                return (complete or left)[0]
            options = sorted({candidates[i][depth] for i in left})
            token = options[self.writer.pick([float(logprobs[t]) for t in options], temperature)]
            left = [i for i in left if candidates[i][depth] == token]
            depth += 1
            if len(left) > 1:
                after, cache = self._forward(stream, [token], copy.deepcopy(stream.cache) if cache is None else cache)
                logprobs = after[-1]

    def _write(self, stream: Stream, forced: list[int], limit: int, temperature: float) -> str:
        """`Writer.write` for one stream, token by token: the line after `forced`, to a newline, a stop or `limit`."""
        logprobs, cache, out = stream.logprobs, copy.deepcopy(stream.cache), []
        if forced:
            after, cache = self._forward(stream, forced, cache)
            logprobs = after[-1]
        while self.writer.extend(out, self.writer.sample(logprobs, temperature), limit):
            after, cache = self._forward(stream, [out[-1]], cache)
            self.stats["tokens_encoded"] -= 1  # a written token fed back is counted once, as generated
            stream.tokens -= 1
            logprobs = after[-1]
        stream.tokens += len(out)
        self.stats["tokens_generated"] += len(out)
        return self.tokenizer.decode(out, skip_special_tokens=True).split("\n")[0]
