"""Model cards: the `sparse_react.json` that `sparse-react finetune` writes beside a model or an
adapter (how it was trained, on what, and how it wants to be prompted)."""

from __future__ import annotations

import json
from pathlib import Path

from sparse_react.errors import UserError

MODEL_CARD = "sparse_react.json"
MODEL_FORMAT = "sparse_react.model/1"
ADAPTER_CONFIG, ADAPTER_WEIGHTS = "adapter_config.json", "adapter_model.safetensors"  # peft's file names
DEFAULT_ACTION_MODE = "scored"  # how a model plays unless its card names another (benchmarks/bench_action_modes.py)


class ModelError(UserError, ValueError):
    """A model that cannot be loaded: missing, not a model, not local, or an unsupported GGUF."""


def training_seconds(card: dict) -> float | None:
    """A card's training time: summed over sittings where its checkpoints recorded it, else its last sitting's."""
    return card.get("seconds") or card.get("seconds_this_run")


def model_card(source: str | Path) -> dict:
    """The card a fine-tuned model folder carries, or {} for any other model."""
    path = Path(source)
    card = (path if path.is_dir() else path.parent) / MODEL_CARD
    try:
        return json.loads(card.read_text()) if card.is_file() else {}
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelError(f"{card} is not a readable model card: {exc}") from None
