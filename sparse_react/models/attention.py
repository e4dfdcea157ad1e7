"""Grouped-query attention that reads the key/value cache as it is, one row of a packed pass at a time.

SmolLM2-135M has 9 query heads sharing 3 key/value heads. Whenever a mask is given, transformers'
SDPA attention first copies each key/value head once per query head it serves, since CUDA's fused
kernels cannot take a mask and grouped heads together. The local engine always passes a mask
(candidate trees, batches), so on a CPU every pass copied the whole cache three times; PyTorch's CPU
kernel takes the mask and the groups together (`enable_gqa`): same numbers, less time
(`benchmarks/bench_action_modes.py --arms scored:stock,scored`).

A batch's forward pass is packed (`sparse_react.models.batch`): the rows' new tokens run as one
sequence, so no padding position is ever computed. Inside `packed_rows`, each row's span of that
sequence attends on its own, over its own row of the batch cache from its first visible column,
with its own mask: the padding of the batch cache is never read either.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import torch

GROUPED_SDPA = "sparse_react_grouped_sdpa"


@dataclass(frozen=True)
class Segment:
    """One row's tokens in a packed pass: their span [start, end) of the packed sequence, the
    batch cache row they read, the first key column they may see, and their additive mask
    [1, 1, end - start, key columns from `first` on], or one per layer kind for a model that mixes
    full and sliding-window layers (`sparse_react.models.layers`)."""

    start: int
    end: int
    row: int
    first: int
    mask: torch.Tensor | dict[str, torch.Tensor]

    def mask_for(self, sliding: bool) -> torch.Tensor:
        """The mask of a sliding-window layer, or of a full-attention one."""
        if isinstance(self.mask, torch.Tensor):
            return self.mask
        return self.mask["sliding_attention" if sliding else "full_attention"]


_SEGMENTS: ContextVar[Sequence[Segment] | None] = ContextVar("packed_rows", default=None)


@contextmanager
def packed_rows(segments: Sequence[Segment]) -> Iterator[None]:
    """Within: attention takes a packed query [1, heads, tokens, dim] and the batch cache's keys and
    values [rows, kv heads, columns, dim], and each segment attends over its own row (see `Segment`)."""
    token = _SEGMENTS.set(segments)
    try:
        yield
    finally:
        _SEGMENTS.reset(token)


def grouped_sdpa(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                 **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, except in a packed pass (`packed_rows`) and for masked
    grouped-query attention on a CPU (see the module)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    segments = _SEGMENTS.get()
    if segments is not None:
        # transformers hands a layer its window as `sliding_window` (None or absent: full attention)
        sliding = bool(kwargs.get("sliding_window", getattr(module, "sliding_window", None)))
        out = query.new_empty(1, query.shape[2], query.shape[1], query.shape[3])
        for s in segments:
            out[:, s.start:s.end] = torch.nn.functional.scaled_dot_product_attention(
                query[:, :, s.start:s.end], key[s.row:s.row + 1, :, s.first:], value[s.row:s.row + 1, :, s.first:],
                attn_mask=s.mask_for(sliding), dropout_p=dropout, scale=scaling, enable_gqa=True).transpose(1, 2)
        return out, None
    if (query.device.type != "cpu" or attention_mask is None or query.shape[1] == key.shape[1]
            or kwargs.get("position_bias") is not None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                           dropout_p=dropout, scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def use_grouped_sdpa(model: Any) -> None:
    """Switch a model's attention to `grouped_sdpa`, which packed passes need (whatever it used before)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa)
    AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)
    model.set_attn_implementation(GROUPED_SDPA)
