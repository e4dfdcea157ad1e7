"""What kind of attention each layer of a model does, whether the local engine can keep its caches,
and the attention masks the engine passes for the kinds it can.

The engine keeps every layer's keys and values for the whole text and builds its own 4D masks
(left padding, candidate trees). Full-attention layers read that mask as it is. A sliding-window
layer (Gemma 2/3, Mistral, Phi-3, ...) may only see the keys less than `window` positions before
each query (transformers' `sliding_window_overlay`); transformers skips its own mask building when
given a 4D mask, so the engine masks the keys outside the window itself, from the positions it
placed each key and query at. A model with a mix of both kinds takes one mask per kind (a
`{layer_type: mask}` mapping, which models with mixed layers accept). Any other kind (chunked or
linear attention, convolutions, layers sharing another's cache, a cache of the model's own) cannot
be kept this way: `LayerPlan.unsupported` says why, and the engine takes its slow path
(`sparse_react.models.recompute`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

FULL, SLIDING = "full_attention", "sliding_attention"


@dataclass(frozen=True)
class LayerPlan:
    """The attention kind of each layer, the window of the sliding ones (None: no sliding layer),
    and why the engine cannot keep this model's caches (None: it can)."""

    kinds: tuple[str, ...]
    window: int | None
    unsupported: str | None = None

    def masks(self, seen: torch.Tensor, queries: torch.Tensor, keys: torch.Tensor,
              dtype: torch.dtype, device: torch.device) -> torch.Tensor | dict[str, torch.Tensor]:
        """Additive attention masks [B, 1, q, k] from what each query may see (`seen`, [B, q, k]) and
        the positions of the queries ([B, q]) and keys ([B, k]), on `device`: one tensor when every
        layer is of one kind, else one per kind."""
        masks = {}
        for kind in dict.fromkeys(self.kinds):
            allowed = seen
            if kind == SLIDING:
                allowed = seen & (queries[:, :, None] - keys[:, None, :] < self.window)
            mask = torch.zeros(allowed.shape[0], 1, *allowed.shape[1:], dtype=dtype)
            masks[kind] = mask.masked_fill_(~allowed[:, None], torch.finfo(dtype).min).to(device)
        return next(iter(masks.values())) if len(masks) == 1 else masks


def layer_plan(model: Any) -> LayerPlan:
    """The layers of `model` (a causal LM, or a peft model around one) as the engine sees them."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config.get_text_config(decoder=True)
    try:
        kinds, settings = _layer_kinds(config)
    except (AttributeError, TypeError, ValueError) as exc:  # a config without the usual per-layer fields
        return LayerPlan((), None, f"its layer kinds cannot be read from its config ({type(exc).__name__})")
    kinds = tuple(kinds)
    if not kinds:
        return LayerPlan(kinds, None, "its config names no layers")
    windows = {s["sliding_window"] for k, s in zip(kinds, settings) if k == SLIDING}
    window = min(windows) if windows else None
    other = sorted(set(kinds) - {FULL, SLIDING})
    if hasattr(base, "_supports_default_dynamic_cache") and not base._supports_default_dynamic_cache():
        return LayerPlan(kinds, window, f"{type(base).__name__} keeps a cache of its own kind")
    if other:
        return LayerPlan(kinds, window, f"it has {', '.join(other)} layers")
    if len(windows) > 1:
        return LayerPlan(kinds, window, f"its sliding layers have different windows ({sorted(windows)})")
    if len(set(kinds)) > 1 and not _takes_mask_per_kind(base):
        return LayerPlan(kinds, window, "it mixes layer kinds but takes one attention mask for all of them")
    return LayerPlan(kinds, window)


def _layer_kinds(config: Any) -> tuple[list[str], list[dict]]:
    """Each layer's kind and cache settings, as transformers' DynamicCache reads them from a config."""
    try:
        from transformers.cache_utils import get_layer_types_and_kwargs
    except ImportError:  # transformers before 5.x's per-layer configs: the fields it read then
        window = getattr(config, "sliding_window", None)
        kinds = list(getattr(config, "layer_types", None) or [SLIDING if window else FULL] * config.num_hidden_layers)
        return kinds, [{"sliding_window": window} for _ in kinds]
    return get_layer_types_and_kwargs(config)


def _takes_mask_per_kind(model: Any) -> bool:
    """Whether the model's decoder accepts `{layer_type: mask}` as its attention mask."""
    try:
        source = inspect.getsource(type(model.get_decoder()).forward)
    except Exception:  # no decoder to find (transformers raises for exotic models), or no source to read
        return False
    return "attention_mask, dict)" in source
