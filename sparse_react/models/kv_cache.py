"""The KV cache the local engine keeps per stream: transformers' DynamicCache whose attention
layers grow in place, and the forward arguments that take a cache and limit the LM head."""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import torch


def cache_argument(model: Any) -> str:
    """The forward argument that takes the KV cache: `cache` in newer transformers, else `past_key_values`."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # an unmerged peft model passes it on
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def logits_argument(model: Any) -> str | None:
    """The forward argument that limits the LM head to the last positions (`logits_to_keep`, earlier
    `num_logits_to_keep`), or None when the model has neither."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = inspect.signature(base.forward).parameters
    return next((name for name in ("logits_to_keep", "num_logits_to_keep") if name in names), None)


def new_cache(config: Any) -> Any:
    """A DynamicCache whose attention layers append in place (see `growing_layer`). Sliding-window
    layers keep every key too: the engine hides the ones outside the window by its masks
    (`sparse_react.models.layers`), where transformers' own sliding layer would drop them."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    cache = DynamicCache(config=config)
    cache.layers = [growing_layer() if type(layer) in (DynamicLayer, DynamicSlidingWindowLayer) else layer
                    for layer in cache.layers]
    return cache


def growing_layer() -> Any:
    """A DynamicLayer that keeps its keys and values in a buffer with spare room: appending a few
    tokens (one decoding step, a scored candidate tree) writes them in place, where DynamicLayer
    copies the whole cache on every forward pass."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        buffers: tuple[torch.Tensor, torch.Tensor] | None = None

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
            n, m = self._reserve(key_states, value_states, key_states.shape[0], key_states.shape[-2])
            self.buffers[0][..., n:n + m, :], self.buffers[1][..., n:n + m, :] = key_states, value_states
            return self._grown(n + m)

        def append_rows(self, key_states: torch.Tensor, value_states: torch.Tensor,
                        spans: Sequence[tuple[int, int, int, int]], width: int) -> tuple[torch.Tensor, torch.Tensor]:
            """Append `width` columns to every row from a packed pass's keys and values [1, heads,
            tokens, dim]: each (row, start, end, column) puts packed tokens [start, end) at that row's
            new column `column`; the columns no token fills are zeros (hidden by every mask)."""
            rows = self.buffers[0].shape[0] if self.buffers is not None else max(span[0] for span in spans) + 1
            n, _ = self._reserve(key_states, value_states, rows, width)
            keys, values = self.buffers[0][..., n:n + width, :], self.buffers[1][..., n:n + width, :]
            if sum(end - start for _, start, end, _ in spans) < rows * width:
                keys.zero_(), values.zero_()
            for row, start, end, column in spans:
                keys[row, :, column:column + end - start] = key_states[0, :, start:end]
                values[row, :, column:column + end - start] = value_states[0, :, start:end]
            return self._grown(n + width)

        def _reserve(self, key_states: torch.Tensor, value_states: torch.Tensor, rows: int, m: int) -> tuple[int, int]:
            """Room for `m` more columns of `rows` rows; the columns filled so far, and m."""
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n = self.get_seq_length()
            if self.buffers is None or n + m > self.buffers[0].shape[-2] or self.buffers[0].shape[0] != rows:
                room = max(256, (n + m) * 3 // 2)
                self.buffers = tuple(new.new_empty(rows, new.shape[1], room, new.shape[-1])
                                     for new in (key_states, value_states))
                if n:
                    self.buffers[0][..., :n, :], self.buffers[1][..., :n, :] = self.keys, self.values
            return n, m

        def _grown(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
            self.keys, self.values = self.buffers[0][..., :length, :], self.buffers[1][..., :length, :]
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


class PackedCache:
    """A batch cache as a packed pass writes it (`sparse_react.models.batch`): each layer's packed
    keys and values go to their rows' new columns (`append_rows`), `width` of them a row."""

    def __init__(self, cache: Any, spans: Sequence[tuple[int, int, int, int]], width: int) -> None:
        self.cache, self.spans, self.width = cache, spans, width

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Append the pass's keys and values to layer `layer_idx`; its keys and values after, all rows."""
        return self.cache.layers[layer_idx].append_rows(key_states, value_states, self.spans, self.width)
