"""Options, each declared once: one frozen dataclass per concern (which model plays, how to relabel,
how to train), whose fields carry their command-line help. The command line builds its options from
them (`sparse_react.cli_options`), the Python API and the pipelines pass them whole, and a pipeline
writes them back as the `sparse-react` command that does the same (`command_line`), for its cards.

A field's command-line name is `--field-name` unless `option(flag=...)` says otherwise; an options
dataclass inside another (`group`) spreads into the outer one's options, some of them renamed where
the outer command already uses the name."""

from __future__ import annotations

import shlex
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from typing import Any, ClassVar, Iterator, Mapping, Sequence

from sparse_react.errors import UserError

DEFAULT_LORA_RANK = 8  # `finetune --lora` without a rank


class OptionsError(UserError, ValueError):
    """Options that do not go together, or settings this version does not know."""


def option(default: Any = MISSING, help: str = "", *, flag: str | None = None, always: bool = False,
           min: int | None = None, show_default: bool = True) -> Any:
    """A field of an options dataclass: its default and `--help` text. `flag` is its command-line
    name (`--on/--off` for a switch that can be turned off); `always` writes it into command lines
    even at its default; `min` bounds a number."""
    return field(default=default, metadata={"help": help, "flag": flag, "always": always, "min": min,
                                            "show_default": show_default})


def group(default: Any, *, panel: str, rename: Mapping[str, str] | None = None) -> Any:
    """A field holding an options dataclass, spread into the command's options under the `--help`
    heading `panel`; `rename` gives some of its fields other names (`{"max_steps": "train_steps"}`)."""
    return field(default=default, metadata={"group": True, "panel": panel, "rename": dict(rename or {})})


@dataclass(frozen=True)
class Leaf:
    """One command-line option of an options dataclass, nested ones spread."""

    name: str  # the flat name: the field's, or its new name in the group that holds it
    path: tuple[str, ...]  # the fields leading to it from the outer dataclass
    type: Any
    default: Any
    help: str
    panel: str | None
    metadata: Mapping[str, Any]

    @property
    def flags(self) -> tuple[str, str | None]:
        """Its flag and, for a switch that can be turned off, the flag that turns it off."""
        on, _, off = (self.metadata.get("flag") or "--" + self.name.replace("_", "-")).partition("/")
        return on, off or None


def leaves(cls: type) -> list[Leaf]:
    """Every option of an options dataclass, in declaration order, nested dataclasses spread."""
    return list(_walk(cls, cls(), {}, None, ()))


def _walk(cls: type, default: Any, rename: Mapping[str, str], panel: str | None, path: tuple[str, ...]) -> Iterator[Leaf]:
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        value = getattr(default, f.name)
        if f.metadata.get("group"):
            yield from _walk(hints[f.name], value, f.metadata["rename"], f.metadata["panel"], (*path, f.name))
        else:
            yield Leaf(rename.get(f.name, f.name), (*path, f.name), hints[f.name], value, f.metadata.get("help", ""),
                       panel or getattr(cls, "PANEL", None), f.metadata)


def to_flat(options: Any) -> dict[str, Any]:
    """An options dataclass as {option name: value}, nested ones spread (the command line's vocabulary)."""
    values = {}
    for leaf in leaves(type(options)):
        value = options
        for name in leaf.path:
            value = getattr(value, name)
        values[leaf.name] = value
    return values


def from_flat(cls: type, values: Mapping[str, Any]) -> Any:
    """The options dataclass `cls` from {option name: value} (`to_flat`'s form); a name left out keeps
    its default. OptionsError names any option `cls` does not have."""
    unknown = set(values) - {leaf.name for leaf in leaves(cls)}
    if unknown:
        raise OptionsError(f"unknown options for {cls.__name__}: {', '.join(sorted(unknown))}")
    return _build(cls, cls(), {}, values)


def _build(cls: type, default: Any, rename: Mapping[str, str], values: Mapping[str, Any]) -> Any:
    hints, changed = typing.get_type_hints(cls), {}
    for f in fields(cls):
        if f.metadata.get("group"):
            changed[f.name] = _build(hints[f.name], getattr(default, f.name), f.metadata["rename"], values)
        elif (name := rename.get(f.name, f.name)) in values:
            value = values[name]
            changed[f.name] = tuple(value) if typing.get_origin(hints[f.name]) is tuple else value
    return replace(default, **changed)


def flags(options: Any) -> list[str]:
    """The command-line options that set `options`: those not at their default (and those `always` written)."""
    out: list[str] = []
    for leaf, value in zip(leaves(type(options)), to_flat(options).values()):
        if value != leaf.default or leaf.metadata.get("always"):
            out += _flag(leaf.flags, value)
    return out


def _flag(names: tuple[str, str | None], value: Any) -> list[str]:
    on, off = names
    if isinstance(value, bool):
        if value or off:
            return [on if value else off]
        raise ValueError(f"{on} cannot be turned off on the command line")
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [on, ",".join(map(str, value))]
    return [on, str(value)]


def command_line(command: str, arguments: Sequence[Any] = (), options: Mapping[str, Any] | None = None) -> str:
    """The `sparse-react` command line of a library call: `arguments` in order (a list: each of its
    items), then each option as `--name value`, an options dataclass as its own options (`flags`),
    True as a bare `--name` (False as `--no-name`), a sequence comma-separated, None left out."""
    args = [command]
    for argument in arguments:
        args += map(str, argument) if isinstance(argument, (list, tuple)) else [str(argument)]
    for name, value in (options or {}).items():
        flag = "--" + name.replace("_", "-")
        args += flags(value) if is_dataclass(value) else _flag((flag, "--no-" + flag[2:]), value)
    return "sparse-react " + shlex.join(args)


POLICY_HELP = ("hf (the shipped trained agent of each rhythm: a LoRA adapter on the embedded SmolLM2-135M), "
               "expert, search-expert, relabel-expert, random or scripted:FILE.")
MODEL_HELP = ("base (the untuned embedded SmolLM2-135M-Instruct), or a local model folder, adapter folder or .gguf "
              "file (implies --policy hf); with --endpoint, the name the server serves its model under.")


@dataclass(frozen=True)
class ModelOptions:
    """Which policy plays, and how a model runs: what `sparse-react run` and `eval` take, and what
    `api.load_policy_from` loads."""

    PANEL: ClassVar[str] = "Model"

    policy: str = option("hf", POLICY_HELP)
    model: str | None = option(None, MODEL_HELP)
    action_mode: str | None = option(None, "Model actions: scored (rank every admissible command), constrained "
                                     "(write one token by token within the admissible ones) or free (generate); "
                                     "default: the model card's, else scored.")
    shots: int | None = option(None, "Model prompt examples: 2 or 0 (default: 2, or 0 for a model fine-tuned here).")
    window: int = option(0, "Model context: only the last N turns (0: the whole episode).", min=0)
    device: str = option("auto", "Model device: auto, cpu, cuda, ...")
    dtype: str | None = option(None, "Model weights: float32 or bfloat16 (default: bfloat16 on a GPU or a CPU with "
                               "AMX, else float32).")
    endpoint: str | None = option(None, "Base URL of an OpenAI-compatible server (vLLM, SGLang, llama.cpp, Ollama, "
                                  "transformers serve) whose model --model names plays; its key, if any, from "
                                  "$OPENAI_API_KEY.")
    api: str = option("completions", "With --endpoint: completions (this package's rendering; scored or free) or "
                      "chat (the server's chat template; free only).")
    tokenizer: str | None = option(None, "With --endpoint and the completions API: a local model folder, .gguf file "
                                   "or base whose chat template frames the prompt's head (default: none, plain text).")
    seed: int = option(0, "Seed of the random policy / model sampling.")

    @property
    def label(self) -> str:
        """What a run folder calls the policy: `served:NAME`, `hf:MODEL` or the policy's name."""
        return f"served:{self.model}" if self.endpoint else f"hf:{self.model}" if self.model else self.policy

    @property
    def loads_model(self) -> bool:
        """Whether playing loads a model into this machine's memory."""
        return not self.endpoint and (self.model is not None or self.policy.startswith("hf"))


@dataclass(frozen=True)
class RelabelOptions:
    """Which states `relabel` turns into training data, and with which thoughts (see `sparse_react.training.relabel`)."""

    PANEL: ClassVar[str] = "Relabelling"

    lost_only: bool = option(False, "Relabel only episodes that were not won.")
    replan_detours: bool = option(False, "Label the state after every detour with a thought re-planning from there "
                                  "(by default only the plan, a surprise, a subgoal done and a false claim get a "
                                  "thought).")
    corrections_only: bool = option(False, "Keep only the states where the label corrects the agent: not a thought "
                                    "in other words, not another unvisited place to search.")
    without_go_to: bool = option(False, "With --corrections-only: leave out the corrections whose label is a `go to` "
                                 "(mostly returns to a searched place).")
    each_once: bool = option(False, "With --corrections-only: each correction only at the first state of an episode "
                             "it corrects, not again at every turn of a loop.")
    each_correction_once: bool = option(False, "With --corrections-only: like --each-once, a correcting thought "
                                        "counted by its first sentence (what it corrects), whatever plan and action "
                                        "follow it.")

    def check(self) -> None:
        """OptionsError if the options leave out corrections without keeping only corrections."""
        if (self.without_go_to or self.each_once or self.each_correction_once) and not self.corrections_only:
            raise OptionsError("without_go_to, each_once and each_correction_once choose among corrections: they "
                               "need corrections_only (give --corrections-only with them)")


@dataclass(frozen=True)
class TrainOptions:
    """How `finetune` trains (not on what): the base, the steps, the optimizer, LoRA, packing."""

    PANEL: ClassVar[str] = "Training"

    base: str | None = option(None, "Base causal LM: a local folder or .gguf (default: the embedded SmolLM2-135M).")
    epochs: float = option(1.0, "Passes over the data (when no optimizer steps are set).")
    max_steps: int = option(0, "Optimizer steps (0: from the epochs).", min=0)
    learning_rate: float = option(5e-5, "Peak learning rate (cosine schedule).")
    batch_size: int = option(1, "Examples per forward pass. Above 1, padding sends attention to a kernel that holds "
                             "every head's full score matrix (2.8x the memory here).", min=1)
    grad_accum: int = option(8, "Batches per optimizer step.", min=1)
    max_length: int = option(2048, "Tokens per example (longer ones are cut).", min=16)
    save_steps: int = option(100, "Checkpoint every N optimizer steps.", min=1)
    seed: int = option(0, "Seed of the data order and of the new weights.")
    device: str = option("auto", "Training device: auto, cpu, cuda, ...")
    low_memory: bool = option(False, "Return freed activations to the OS (Linux): less memory with padded batches, "
                              "at the price of system calls on every large allocation.",
                              flag="--low-memory/--no-low-memory")
    lora_rank: int = option(0, "Train a LoRA adapter (a few MB) of this rank instead of every weight (0: every "
                            f"weight; --lora alone: {DEFAULT_LORA_RANK}).", min=0)
    lora_alpha: int = option(0, "LoRA alpha (0: twice the rank).", min=0)
    lora_targets: str = option("all-linear", "Modules that get LoRA adapters: all-linear, or comma-separated names "
                               "such as q_proj,v_proj.")
    pack: bool = option(True, "Train the relabelled states of one episode in one pass (its record once, each label "
                        "a branch off it; exact, up to the tokens per example in a row).", flag="--pack/--no-pack")
