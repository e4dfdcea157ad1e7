"""Streams and batches of the local engine: what it keeps per stream, and several streams' caches
stacked into one left-padded batch for the forward passes of a turn, each pass packed (no padding
position computed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from sparse_react.models.attention import Segment, packed_rows
from sparse_react.models.kv_cache import PackedCache, cache_argument, logits_argument, new_cache
from sparse_react.models.layers import layer_plan


@dataclass
class Runner:
    """The model a batch runs and how: on `device`, its passes and tokens counted in `stats`, its
    layers' attention masked as `plan` says (`sparse_react.models.layers`)."""

    model: Any
    device: torch.device
    stats: dict

    def __post_init__(self) -> None:
        self.cache_argument = cache_argument(self.model)
        self.logits_argument = logits_argument(self.model)
        self.plan = layer_plan(self.model)

    def new_cache(self) -> Any:
        """An empty cache for this model."""
        return new_cache(self.model.config)


@dataclass
class Stream:
    """What the engine keeps for one stream (a live episode): the text it was last brought up to,
    its token ids, their KV cache, the next-token log-probabilities after them, and the tokens
    computed for it so far."""

    cache: Any
    text: str = ""
    ids: list[int] = field(default_factory=list)
    logprobs: torch.Tensor | None = None
    tokens: int = 0


class Batch:
    """Several streams' KV caches as one left-padded batch for the forward passes of one turn.

    A single stream is used in place (no copy). Every forward appends columns (`depth`-positioned,
    masked per row: causal for text, tree-shaped for candidates, padding masked out); `keep`
    writes a synced row's new columns back to its own stream, and `rewind` drops scratch columns.
    """

    def __init__(self, runner: Runner, streams: list[Stream]) -> None:
        self.runner, self.streams = runner, streams
        lengths = [s.cache.get_seq_length() for s in streams]
        self.pos = list(lengths)
        if len(streams) == 1:
            self.cache = streams[0].cache
            self.valid = torch.ones(1, lengths[0], dtype=torch.bool)
            self.where = torch.arange(lengths[0])[None]
        else:
            longest = max(lengths)
            self.cache = runner.new_cache()
            self.valid = torch.zeros(len(streams), longest, dtype=torch.bool)
            self.where = torch.zeros(len(streams), longest, dtype=torch.long)  # each column's position
            for row, n in enumerate(lengths):
                self.valid[row, longest - n:] = True
                self.where[row, longest - n:] = torch.arange(n)
            for layer, target in enumerate(self.cache.layers):
                keys, values = (self._stack([getattr(s.cache.layers[layer], part) for s in streams], longest)
                                for part in ("keys", "values"))
                target.adopt(keys, values, longest)

    TURN_ROOM = 512  # positions a turn's forward passes usually append (new text, candidates, a thought)

    @classmethod
    def _stack(cls, parts: list[torch.Tensor], longest: int) -> torch.Tensor:
        # uninitialised: a row's left padding is never read (attention starts at its first visible column)
        out = parts[0].new_empty(len(parts), parts[0].shape[1], longest + cls.TURN_ROOM, parts[0].shape[3])
        for row, part in enumerate(parts):
            if part.shape[2]:
                out[row, :, longest - part.shape[2]:longest] = part[0]
        return out

    def mark(self) -> tuple[int, torch.Tensor, list[int]]:
        return self.cache.get_seq_length(), self.valid.clone(), list(self.pos)

    def rewind(self, mark: tuple[int, torch.Tensor, list[int]]) -> None:
        length, self.valid, self.pos = mark[0], mark[1], list(mark[2])
        self.where = self.where[:, :length]
        if self.cache.get_seq_length() > length:
            self.cache.crop(length - self.cache.get_seq_length())

    def forward(self, rows: dict[int, list[int]], parents: dict[int, list[int]] | None = None,
                count: bool = True, depths: dict[int, list[int]] | None = None,
                sees: dict[int, list[list[int]]] | None = None, last_only: bool = False) -> dict[int, torch.Tensor]:
        """Append each row's tokens (rows not named get padding columns) and return each named row's
        logits [its tokens, V].

        `parents` gives, per row, each token's parent index in that row (-1: the cached prefix
        only), for tree-shaped candidates; without it each row's tokens are causal text. `depths`
        (with `sees`: per token, the cache columns it may read besides the row's text) places
        tokens whose ancestors were fed in earlier passes. With `last_only`, each row's text ends
        at the last column (padding before it) and logits come for its last token only ([1, V]):
        the LM head is a fifth of a token's cost.

        The rows' tokens run packed, as one sequence with each token's own position: the model
        computes no padding position, and each row attends over its own cache row alone
        (`sparse_react.models.attention.packed_rows`).
        """
        runner, batch = self.runner, len(self.streams)
        width = max(len(t) for t in rows.values())
        length = self.cache.get_seq_length()
        allow = torch.eye(width, dtype=torch.bool).repeat(batch, 1, 1)
        real = torch.zeros(batch, width, dtype=torch.bool)
        ids: list[int] = []
        positions: list[int] = []
        spans: list[tuple[int, int, int, int]] = []  # (row, packed start, packed end, first new column)
        for row, tokens in sorted(rows.items()):
            n = len(tokens)
            at = slice(width - n, width) if last_only else slice(0, n)
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
            spans.append((row, len(ids), len(ids) + n, at.start))
            ids += tokens
            positions += [d + self.pos[row] for d in depth]
        cached = self.valid[:, None, :].expand(batch, width, length) & real[:, :, None]
        if sees:
            cached = cached.clone()
            for row, columns in sees.items():
                for i, visible in enumerate(columns):
                    cached[row, i, visible] = True
        seen = torch.cat([cached, allow], dim=2)
        placed = torch.tensor(self.pos)[:, None].repeat(1, width)  # new columns' positions (padding: the row's next)
        for row, start, end, column in spans:
            placed[row, column:column + end - start] = torch.tensor(positions[start:end])
        where = torch.cat([self.where, placed], dim=1)
        runner.stats["forward_calls"] += 1
        logits = self._run(ids, positions, spans, width, seen, where, last_only)
        self.valid, self.where = torch.cat([self.valid, real], dim=1), where
        if parents is None and depths is None:
            for row, tokens in rows.items():
                self.pos[row] += len(tokens)
        if count:  # generated tokens fed back are counted as generated, once
            for row, tokens in rows.items():
                self.streams[row].tokens += len(tokens)
            runner.stats["tokens_encoded"] += len(ids)
        if last_only:
            return {row: logits[i:i + 1] for i, (row, *_) in enumerate(spans)}
        return {row: logits[start:end] for row, start, end, _ in spans}

    def _run(self, ids: list[int], positions: list[int], spans: list[tuple[int, int, int, int]], width: int,
             seen: torch.Tensor, where: torch.Tensor, last_only: bool) -> torch.Tensor:
        """The packed pass: the logits [tokens, V] (with `last_only`, [rows, V]: each span's last token's).
        `where` holds each column's position, from which the sliding layers' windows are masked."""
        runner, device, dtype = self.runner, self.runner.device, self.runner.model.dtype
        queries = torch.tensor(positions)
        segments = []
        for row, start, end, column in spans:
            visible = seen[row, column:column + end - start]
            first = int(visible.any(dim=0).nonzero()[0])  # each token sees itself at least
            mask = runner.plan.masks(visible[None, :, first:], queries[None, start:end], where[row:row + 1, first:],
                                     dtype, device)
            segments.append(Segment(start, end, row, first, mask))
        ends = torch.tensor([end - 1 for _, _, end, _ in spans], device=device)
        keep = {runner.logits_argument: ends} if last_only and runner.logits_argument else {}
        with packed_rows(segments):
            out = runner.model(input_ids=torch.tensor([ids], device=device),
                               position_ids=torch.tensor([positions], device=device),
                               attention_mask=self.PLACEHOLDER.to(device), use_cache=True,
                               **{runner.cache_argument: PackedCache(self.cache, spans, width)}, **keep)
        logits = out.logits[0]
        return logits[ends] if last_only and not keep else logits

    # transformers passes a 4D mask on as it is; the segments hold the real masks
    PLACEHOLDER = torch.zeros(1, 1, 1, 1, dtype=torch.bool)

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
