"""What `sparse-react train` checks and estimates before it writes anything: that the base is a
local causal LM (read from its config, no weights loaded), how many parameters it has, and how many
optimizer steps each training stage gets in a budget of hours.

The estimates are measurements of the shipped sparse adapter's chain on 2 CPU cores (SmolLM2-135M,
LoRA rank 8, 8 packed rows a step; experiments/rounds.md): 25 to 30 seconds a step (120 steps in 52
minutes with AMX, 25 in 12.4 minutes and 180 in 77 without), and 6 to 7 seconds a game played by the
model (120 bundled unseen games in 11 to 15 minutes). Both are scaled by the base's parameter count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from sparse_react.errors import UserError

REFERENCE_PARAMS = 135e6  # SmolLM2-135M, the base the measurements below were made on
SECONDS_PER_STEP = 28.0  # one optimizer step of the reference base on 2 cores
SECONDS_PER_GAME = 6.5  # one game played by the reference base (batched, 50-step budget)
ENGINE_SECONDS_PER_GAME = 0.3  # the game engine's share, whatever the model
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")


class BaseError(UserError, ValueError):
    """A base `sparse-react train` cannot train: missing, not local, or not a causal LM."""


class BudgetError(UserError, ValueError):
    """A budget of hours too small for the recipe's first optimizer step."""


def check_base(base: str | None) -> None:
    """BaseError naming `base` unless it is the embedded model (None), a `.gguf` file or a local
    folder whose config says causal LM. Reads the config only."""
    if base is None:
        return
    path = Path(base).expanduser()
    if not path.exists():
        raise BaseError(f"base {base} not found: give a local model folder or .gguf file (nothing is downloaded)")
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise BaseError(f"base {base} is a file but not a .gguf model: give a model folder or a .gguf file")
        return
    if (path / "adapter_config.json").is_file():
        raise BaseError(f"base {base} is an adapter, not a base model: give the base it was trained on")
    config = path / "config.json"
    if not config.is_file():
        if len(list(path.glob("*.gguf"))) == 1:
            return
        raise BaseError(f"base {base} is not a model folder: it holds no config.json")
    try:
        settings = json.loads(config.read_text())
    except (OSError, ValueError) as exc:
        raise BaseError(f"base {base}: its config.json cannot be read ({exc})") from None
    architectures = settings.get("architectures") or []
    if settings.get("is_encoder_decoder") or not any(a.endswith(CAUSAL_SUFFIXES) for a in architectures):
        kind = ", ".join(architectures) or settings.get("model_type", "no architecture named")
        raise BaseError(f"base {base} is not a causal language model (its config: {kind}); the recipe trains a "
                        f"causal LM such as a Llama, Qwen or SmolLM folder")


def parameter_count(base: str | None) -> float:
    """The base's parameters, estimated from the size of its weight files (the embedded model, or a base
    whose files say nothing: 135M)."""
    path = Path(base).expanduser() if base is not None else None
    if path is None or not path.exists():
        return REFERENCE_PARAMS
    return _from_files(path) or REFERENCE_PARAMS


def _from_files(path: Path) -> float:
    if path.is_file():  # a quantized .gguf: about 4.5 bits a weight
        return path.stat().st_size * 8 / 4.5
    if not (path / "config.json").is_file():
        return sum(p.stat().st_size for p in path.glob("*.gguf")) * 8 / 4.5
    dtype = json.loads((path / "config.json").read_text()).get("torch_dtype") or "float32"
    width = 4 if dtype == "float32" else 2
    weights = [*path.glob("*.safetensors"), *path.glob("*.bin")]
    return sum(p.stat().st_size for p in weights) / width


@dataclass(frozen=True)
class Rates:
    """Seconds a training step and a played game take for one base."""

    step: float
    game: float

    @classmethod
    def estimate(cls, base: str | None) -> "Rates":
        scale = parameter_count(base) / REFERENCE_PARAMS
        return cls(SECONDS_PER_STEP * scale, ENGINE_SECONDS_PER_GAME + SECONDS_PER_GAME * scale)


def scaled_steps(nominal: list[int], games_played: int, hours: float | None, rates: Rates) -> list[int]:
    """Each training stage's optimizer steps: `nominal` as measured without a budget, or scaled so that
    the steps and the `games_played` by the model fit in `hours`. BudgetError when the first stage
    would get no step."""
    if hours is None:
        return list(nominal)
    playing = games_played * rates.game
    training = hours * 3600 - playing
    scale = training / (sum(nominal) * rates.step)
    steps = [int(n * scale) for n in nominal]
    if training <= 0 or steps[0] < 1:
        need = (rates.step * sum(nominal) / nominal[0] + playing) / 3600
        raise BudgetError(f"--hours {hours:g} is too small for one optimizer step (the model's games alone take "
                          f"about {playing / 3600:.2g} h here); give at least --hours {need:.2g}")
    return [max(1, s) for s in steps]


def duration(seconds: float) -> str:
    """`1 h 05 min`, `12 min` or `40 s`."""
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"
