"""Grouped-query attention that reads the key/value cache as it is.

SmolLM2-135M has 9 query heads sharing 3 key/value heads. Whenever a mask is given, transformers'
SDPA attention first copies each key/value head once per query head it serves, since CUDA's fused
kernels cannot take a mask and grouped heads together. The local engine always passes a mask
(candidate trees, padded batches), so on a CPU every pass copied the whole cache three times;
PyTorch's CPU kernel takes the mask and the groups together (`enable_gqa`): same numbers, less time
(`benchmarks/bench_action_modes.py --arms scored:stock,scored`).

A batch of episodes is padded: each row's cache is left-padded to the longest row's, and each
row's new tokens to the widest row's. Inside `ragged_rows`, each row attends on its own, with its
real queries over its own columns only (from its first unmasked one): the padding the mask hides
is never read or computed (a short pass with 16 long rows spends most of its attention time reading
the cache). Padding queries get zeros; their keys and values sit in columns every mask hides.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator, Sequence

import torch

GROUPED_SDPA = "sparse_react_grouped_sdpa"

_ROWS: ContextVar[tuple[Sequence[int], Sequence[tuple[int, int]]] | None] = ContextVar("ragged_rows", default=None)


@contextmanager
def ragged_rows(first_columns: Sequence[int], queries: Sequence[tuple[int, int]]) -> Iterator[None]:
    """Within: a batch's row i attends with its queries `queries[i]` (start, end) over the key columns
    from `first_columns[i]` on; the mask must hide every column before it from that row."""
    token = _ROWS.set((first_columns, queries))
    try:
        yield
    finally:
        _ROWS.reset(token)


def grouped_sdpa(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                 **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, except masked grouped-query attention on a CPU (see the module)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if (query.device.type != "cpu" or attention_mask is None or query.shape[1] == key.shape[1]
            or kwargs.get("position_bias") is not None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    rows = _ROWS.get()
    if rows is None or len(rows[0]) != query.shape[0]:
        out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                               dropout_p=dropout, scale=scaling, enable_gqa=True)
        return out.transpose(1, 2).contiguous(), None
    out = query.new_zeros(query.shape[0], query.shape[2], query.shape[1], query.shape[3])
    for row, (first, (start, end)) in enumerate(zip(*rows)):
        if end > start:
            at = slice(row, row + 1)
            out[at, start:end] = torch.nn.functional.scaled_dot_product_attention(
                query[at, :, start:end], key[at, :, first:], value[at, :, first:],
                attn_mask=attention_mask[at, :, start:end, first:], dropout_p=dropout, scale=scaling,
                enable_gqa=True).transpose(1, 2)
    return out, None


def use_grouped_sdpa(model: Any) -> bool:
    """Switch a model that attends with SDPA to `grouped_sdpa`; False (unchanged) if it uses another kind."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa)
    AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)
    model.set_attn_implementation(GROUPED_SDPA)
    return True
