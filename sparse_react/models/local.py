"""A Hugging Face causal LM run in this process as a `Backend`: KV caches kept per stream, candidates
scored as token tries, several streams decided together in batched forward passes.

How a prompt is fed: each stream's text only grows, so its KV cache is kept across calls and only
the new tokens are encoded (`prefill`; a text that does not extend the last one is re-encoded from
scratch, and counted). A prompt is tokenised whole, with special tokens only when no chat template
frames it. A continuation (a candidate, a forced start, a committed line) is tokenised as it
follows the transcript's `>`: the space after `>` belongs to the line (` go to desk 1`), which is
how byte-level BPE tokenisers split `"> go to desk 1"`.

- `score`: each request's candidates form a token trie over the cached prompt, fed with a tree
  attention mask; where only the best matters (`best_only`) and `prune` is on, the trie is
  searched best-first over a few passes and branches that cannot win are never fed
  (`sparse_react.models.trie`).
- `choose`: the model writes a candidate token by token, each token chosen among those that
  continue a candidate still left, until one is left (`sparse_react.models.writing`).
- `generate`: greedy or sampled to the end of the line, several tokens a pass where a draft from the
  engine's earlier lines holds (`sparse_react.models.writing`).

A turn's calls share one batch: `prefill` stacks the streams' caches, and `score`, `choose` and
`generate` on those streams run on it until `commit`, which keeps the tokens of the chosen line
that were fed while scoring or writing it (so the next turn does not encode them again).
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

import torch

from sparse_react.models.attention import use_grouped_sdpa
from sparse_react.models.backend import Choice, ChooseRequest, GenerateRequest, Generation, Prompt, ScoreRequest, Scores
from sparse_react.models.batch import Batch, Runner, Stream
from sparse_react.models.loading import LoadedModel, weights_sha256
from sparse_react.models.trie import TrieSearch, trie_nodes
from sparse_react.models.writing import Writer
from sparse_react.training.cards import model_card
from sparse_react.transcript import PROMPT, render_head

KeptLine = tuple[list[int], list[tuple[torch.Tensor, torch.Tensor]]]  # a line's tokens fed, and their keys and values


@dataclass
class _Turn:
    """The batch a turn's calls share, and the stream keys of its rows."""

    keys: tuple[Hashable, ...]
    batch: Batch


class LocalBackend:
    """A loaded model (`sparse_react.models.loading.load_model`) as a backend (see the module docstring).

    `chat` (None: whether the tokenizer has a chat template) frames a prompt's head under the
    template; a model without one gets the plain template (the prompt as text), said once as a warning
    and in `identity()["template"]`. `stats` counts tokens_encoded, tokens_generated, full_reencodes, forward_calls and
    draft_tokens_accepted. `reuse_cache=False` recomputes everything each turn (the naive loop, for
    comparison). `drafts` (greedy only) lets a pass check several tokens of a line at once, guessed
    from how the engine went on the last time it wrote the same three tokens: the same text in
    fewer passes. `prune` (for `best_only` scoring) searches the candidates best-first and skips
    branches that cannot win: the same choice for fewer tokens in more passes (False: the whole
    trie in one pass; None, the default: on in float32, off in bfloat16, where
    `benchmarks/bench_action_modes.py` measured fewer tokens not to pay for the extra passes).
    `card` is the model's card ({} for a model not fine-tuned here).
    `keep_lines` keeps the keys and values of a committed line's tokens fed while choosing or
    writing it. `seed` seeds sampling.
    """

    can_score = True
    wants_messages = False
    SOLO_SYNC = 256  # a stream with more new tokens than this (a new episode) is encoded on its own
    PRUNE_WIDTH = 8  # candidate-trie nodes a row feeds per pass in the best-first search

    def __init__(self, loaded: LoadedModel, seed: int = 0, chat: bool | None = None, reuse_cache: bool = True,
                 drafts: bool = True, prune: bool | None = None, keep_lines: bool = True) -> None:
        self.loaded = loaded
        self.tokenizer, self.model, self.device = loaded.tokenizer, loaded.model, loaded.device
        use_grouped_sdpa(self.model)
        self.reuse_cache, self.keep_lines = reuse_cache, keep_lines
        self.prune = self.model.dtype == torch.float32 if prune is None else prune
        self.chat = bool(getattr(self.tokenizer, "chat_template", None)) if chat is None else chat
        plain = chat is None and not self.chat
        if plain:
            warnings.warn(f"{loaded.source} has no chat template: its prompts are plain text (the plain template)",
                          stacklevel=3)
        self.stats = {"tokens_encoded": 0, "tokens_generated": 0, "full_reencodes": 0, "forward_calls": 0,
                      "draft_tokens_accepted": 0}
        self.runner = Runner(self.model, self.device, self.stats)
        self._anchor = self.tokenizer("\n" + PROMPT, add_special_tokens=False)["input_ids"]
        self.writer = Writer(self.tokenizer, self.runner, self._stop_ids(), seed, drafts)
        self._streams: dict[Hashable, Stream] = {}
        self._turn: _Turn | None = None
        self._kept: dict[int, KeptLine] = {}  # per stream (by id): the line tokens fed this turn, see `commit`
        self.frame = functools.lru_cache(maxsize=256)(self._frame)
        self.card = model_card(loaded.source)
        self._identity = {
            "model": loaded.source, "weights_sha256": weights_sha256(loaded.source),
            **({"base_sha256": self.card["base_identity"]["sha256"]} if "base_identity" in self.card else {}),
            "dtype": str(self.model.dtype).removeprefix("torch."), "device": str(self.device), "chat": self.chat,
            **({"template": "plain: the model has no chat template"} if plain else {})}

    def sample(self, scores: list[float], temperature: float) -> int:
        """An index drawn from the softmax of `scores` at `temperature`, from the generator the engine
        samples tokens with (so a seeded run draws from one stream)."""
        return self.writer.pick(scores, temperature)

    def identity(self) -> dict:
        """The model (path, weights' hash, the base's for an adapter), dtype and device as resolved, and
        whether prompts are framed by its chat template."""
        return dict(self._identity)

    # --- the Backend primitives ------------------------------------------------------------------

    def _frame(self, prefix: str) -> str:
        """An episode's fixed head: one user message under the chat template, or the plain prefix."""
        return render_head(self.tokenizer, prefix, self.chat)

    def prefill(self, prompts: Sequence[Prompt]) -> list[int | None]:
        """Bring each stream's cache up to its prompt (new episodes and long catch-ups encoded alone,
        the rest in one pass) and stack them as the turn's batch; the tokens encoded for each."""
        counted = self._tokens_since(prompts)
        self._begin_turn(prompts)
        return counted()

    def score(self, requests: Sequence[ScoreRequest]) -> list[Scores | Exception]:
        """Mean log-probability of each candidate after its prompt (see the module docstring)."""
        if not requests:
            return []
        prompts = [r.prompt for r in requests]
        counted = self._tokens_since(prompts)
        batch, rows = self._rows(prompts)
        candidates = {row: [self.continuation(c) for c in r.candidates] for row, r in zip(rows, requests)}
        best = self.prune and all(r.best_only for r in requests)
        with torch.inference_mode():
            scores = self._score_best(batch, candidates) if best else self._score(batch, candidates)
        return [Scores(scores[row], tokens) for row, tokens in zip(rows, counted())]

    def choose(self, requests: Sequence[ChooseRequest]) -> list[Choice | Exception]:
        """The candidate the model writes for each request, token by token within the candidates."""
        if not requests:
            return []
        prompts = [r.prompt for r in requests]
        counted = self._tokens_since(prompts)
        batch, rows = self._rows(prompts)
        candidates = {row: [self.continuation(c) for c in r.candidates] for row, r in zip(rows, requests)}
        with torch.inference_mode():
            chosen = self.writer.walk(batch, candidates, {row: r.temperature for row, r in zip(rows, requests)})
        return [Choice(chosen[row], tokens) for row, tokens in zip(rows, counted())]

    def generate(self, requests: Sequence[GenerateRequest]) -> list[Generation | Exception]:
        """Each request's line, written after its prompt and forced start to a newline, EOS or its cap."""
        if not requests:
            return []
        prompts = [r.prompt for r in requests]
        counted = self._tokens_since(prompts)
        batch, rows = self._rows(prompts)
        with torch.inference_mode():
            texts = self.writer.write(
                batch, {row: self.continuation(r.forced) if r.forced else [] for row, r in zip(rows, requests)},
                {row: r.max_tokens for row, r in zip(rows, requests)},
                {row: r.temperature for row, r in zip(rows, requests)}, self._keep)
        return [Generation(texts[row], tokens) for row, tokens in zip(rows, counted())]

    def commit(self, key: Hashable, continuation: str) -> None:
        """The stream goes on with `continuation`: the tokens of it fed this turn (a searched candidate,
        a line as written) sit where the text will put them, seeing what it shows before them; keep
        their keys and values, as far as they are the continuation's own tokens (its newline aside),
        so that the next turn does not encode them again."""
        self._turn = None
        stream = self._streams.get(key)
        fed, kv = self._kept.pop(id(stream), ([], [])) if stream is not None else ([], [])
        if not fed:
            return
        written = self.continuation(continuation)[:-1]  # the newline may merge with what follows it
        keep = next((k for k, (a, b) in enumerate(zip(fed, written)) if a != b), min(len(fed), len(written)))
        if not keep:
            return
        with torch.inference_mode():
            for layer, (keys, values) in enumerate(kv):
                stream.cache.update(keys[:, :, :keep], values[:, :, :keep], layer)
        stream.ids = stream.ids + fed[:keep]
        stream.logprobs = None

    def release(self, key: Hashable) -> None:
        """Free the stream's cache."""
        self._streams.pop(key, None)
        if self._turn is not None and key in self._turn.keys:
            self._turn = None

    # --- tokens ----------------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """The token ids of a prompt's text, as the engine feeds them."""
        return self.tokenizer(text, add_special_tokens=not self.chat)["input_ids"]

    def continuation(self, text: str) -> list[int]:
        """The token ids of `text` as it follows a prompt's last `>` (tokenised in place, then split off)."""
        both = self.tokenizer("\n" + PROMPT + text, add_special_tokens=False)["input_ids"]
        if both[:len(self._anchor)] == self._anchor and len(both) > len(self._anchor):
            return both[len(self._anchor):]
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _stop_ids(self) -> list[int]:
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>") if self.chat else None
        return [end] if isinstance(end, int) and end != self.tokenizer.unk_token_id else []

    # --- streams and the turn's batch --------------------------------------------------------------

    def _stream(self, key: Hashable) -> Stream:
        if key not in self._streams:
            self._streams[key] = Stream(self.runner.new_cache())
        return self._streams[key]

    def _tokens_since(self, prompts: Sequence[Prompt]) -> Callable[[], list[int]]:
        """A function that gives the tokens computed for each prompt's stream from now until it is called."""
        streams = [self._stream(p.key) for p in prompts]
        before = [s.tokens for s in streams]
        return lambda: [s.tokens - b for s, b in zip(streams, before)]

    def _begin_turn(self, prompts: Sequence[Prompt]) -> None:
        keys = tuple(p.key for p in prompts)
        if len(set(keys)) < len(keys):
            raise RuntimeError("the same episode was asked for twice in one batch")
        self._turn, self._kept = None, {}
        if not keys:
            return
        streams = [self._stream(key) for key in keys]
        with torch.inference_mode():
            pending = self._sync(streams, [p.text for p in prompts])
            batch = Batch(self.runner, streams)
            if pending:
                self._catch_up(batch, pending)
        for stream, prompt in zip(streams, prompts):
            stream.text = prompt.text
        self._turn = _Turn(keys, batch)

    def _rows(self, prompts: Sequence[Prompt]) -> tuple[Batch, list[int]]:
        """The turn's batch and the prompts' rows in it, when it holds every prompt's stream up to date;
        else a new turn of these prompts."""
        turn = self._turn
        if turn is not None:
            where = {key: row for row, key in enumerate(turn.keys)}
            if all(p.key in where and turn.batch.streams[where[p.key]] is self._streams.get(p.key)
                   and turn.batch.streams[where[p.key]].text == p.text
                   and turn.batch.streams[where[p.key]].logprobs is not None for p in prompts):
                return turn.batch, [where[p.key] for p in prompts]
        self._begin_turn(prompts)
        return self._turn.batch, list(range(len(prompts)))  # type: ignore[union-attr]

    def _sync(self, streams: list[Stream], texts: list[str]) -> dict[int, list[int]]:
        """Each stream's new tokens (when its old ones are a prefix of its text, else all of them,
        from an empty cache). A new episode's prompt and other long catch-ups are encoded here, each
        alone; the short ones are returned, to go through the turn's batch together."""
        pending: dict[int, list[int]] = {}
        for row, (stream, text) in enumerate(zip(streams, texts)):
            ids = self.encode(text)
            if self.reuse_cache and ids == stream.ids and stream.logprobs is not None:
                continue
            if not self.reuse_cache or ids[:len(stream.ids)] != stream.ids:
                if stream.ids and self.reuse_cache:
                    self.stats["full_reencodes"] += 1
                stream.cache, stream.ids = self.runner.new_cache(), []
            if (not stream.ids or len(ids) - len(stream.ids) > self.SOLO_SYNC) and len(streams) > 1:
                self._catch_up(Batch(self.runner, [stream]), {0: ids})
            else:
                pending[row] = ids
        return pending

    def _catch_up(self, batch: Batch, targets: dict[int, list[int]]) -> None:
        """Encode each row's tokens beyond its stream's ids, keep them, and note the log-probs after."""
        new = {row: ids[len(batch.streams[row].ids):] for row, ids in targets.items()}
        start = batch.cache.get_seq_length()
        logits = batch.forward(new, last_only=True)
        batch.keep(start, new)
        for row, ids in targets.items():
            stream = batch.streams[row]
            stream.logprobs = torch.log_softmax(logits[row][0].float(), dim=-1)
            stream.ids = ids

    def _keep(self, batch: Batch, row: int, tokens: list[int], columns: list[int]) -> None:
        """Remember a row's line tokens fed this turn and a copy of their keys and values, for `commit`."""
        if tokens and self.keep_lines and self.reuse_cache:
            self._kept[id(batch.streams[row])] = (tokens, batch.columns(row, columns))

    # --- scoring ---------------------------------------------------------------------------------

    def _score(self, batch: Batch, candidates: dict[int, list[list[int]]]) -> dict[int, list[float]]:
        """Mean log-probability of each row's candidates after its cached text, in one forward pass.

        Each row's candidates' proper prefixes form a token trie (`go to` is shared by every
        `go to X`); its nodes are packed into the row with a tree mask, so every shared token is
        encoded once and each node attends to its row's text and its own ancestors only.
        """
        tries = {row: trie_nodes(c) for row, c in candidates.items()}
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
                logprobs = torch.cat([logprobs, torch.log_softmax(logits[row][:len(tokens)].float(), dim=-1)])
            scores[row] = [float(logprobs[[0] + [1 + nodes[tuple(c[:k])] for k in range(1, len(c))], c].mean())
                           for c in cands]
        return scores

    def _score_best(self, batch: Batch, candidates: dict[int, list[list[int]]]) -> dict[int, list[float]]:
        """`_score` where only the best candidate matters (greedy choice): each row's trie is searched
        best-first over a few passes (`TrieSearch`), feeding up to PRUNE_WIDTH nodes a row a pass,
        and subtrees that cannot beat the best complete candidate are never fed. The same choice
        as `_score` (up to float rounding) for far fewer tokens; pruned candidates score -inf."""
        searches = {row: TrieSearch(c, batch.streams[row].logprobs) for row, c in candidates.items()}
        mark = batch.mark()
        while feeds := {row: nodes for row, search in searches.items() if (nodes := search.next(self.PRUNE_WIDTH))}:
            start = batch.cache.get_seq_length()
            logits = batch.forward({row: [searches[row].tokens[n] for n in nodes] for row, nodes in feeds.items()},
                                   depths={row: [searches[row].depth[n] for n in nodes] for row, nodes in feeds.items()},
                                   sees={row: [searches[row].ancestors(n) for n in nodes] for row, nodes in feeds.items()})
            batch.valid[:, start:] = False  # a fed node is read only by the nodes below it
            for row, nodes in feeds.items():
                logprobs = torch.log_softmax(logits[row][:len(nodes)].float(), dim=-1)
                for i, node in enumerate(nodes):
                    searches[row].column[node] = start + i
                    searches[row].fed(node, logprobs[i])
        for row, s in searches.items():
            if s.best_index >= 0:
                self._keep(batch, row, s.candidates[s.best_index][:-1], s.columns(s.best_index))
        batch.rewind(mark)
        return {row: search.scores for row, search in searches.items()}
