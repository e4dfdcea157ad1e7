"""Few-shot examples from `prompts/<task_type>.yaml`, rendered for a rhythm.

Each file holds three solved trajectories whose actions and observations are shared by every
rhythm; only the thoughts differ (and `act` has none), so a rhythm comparison is a controlled
ablation. A prompt uses two of the three examples: six ordered variants, chosen by index.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import ConfigDict, TypeAdapter, ValidationError, with_config
from typing_extensions import NotRequired, TypedDict  # pydantic reads typing.TypedDict only from Python 3.12

from sparse_react.bundled import bundled_dir
from sparse_react.errors import UserError
from sparse_react.household.tasks import TaskType
from sparse_react.lines import THINK, THOUGHT_REPLY
from sparse_react.rhythms import Rhythm
from sparse_react.schema import first_error

VARIANTS: tuple[tuple[int, int], ...] = tuple(itertools.permutations(range(3), 2))


class PromptError(UserError, ValueError):
    """A missing or malformed prompt file, or a variant out of range; the message names it."""


@dataclass(frozen=True)
class Turn:
    action: str
    observation: str
    thoughts: dict[str, str]


@dataclass(frozen=True)
class Example:
    """One solved trajectory: where it came from, its first observation, and its turns."""

    game: str
    observation: str
    turns: tuple[Turn, ...]

    def lines(self, rhythm: Rhythm) -> list[tuple[str, str]]:
        """(line, reply) pairs in this rhythm: `think: ...`/`OK.` where it thinks, then the action."""
        out = []
        for turn in self.turns:
            thought = turn.thoughts.get(rhythm.name) if rhythm.thinks else None
            if thought:
                out.append((THINK + thought, THOUGHT_REPLY))
            out.append((turn.action, turn.observation))
        return out


def prompts_dir() -> Path:
    """The prompt folder: SPARSE_REACT_PROMPTS when set, else the project's `prompts/`."""
    override = os.environ.get("SPARSE_REACT_PROMPTS")
    return Path(override) if override else bundled_dir("prompts")


@with_config(ConfigDict(strict=True))
class TurnFile(TypedDict):
    action: str
    observation: str
    thoughts: NotRequired[dict[str, str] | None]  # rhythm name: the thought before the action


@with_config(ConfigDict(strict=True))
class ExampleFile(TypedDict):
    game: str
    observation: str
    turns: list[TurnFile]


@with_config(ConfigDict(strict=True))
class PromptFile(TypedDict):
    """A prompt file: the solved examples of one task type."""

    examples: list[ExampleFile]


PROMPT_SCHEMA = TypeAdapter(PromptFile)


@lru_cache(maxsize=None)
def load_examples(task_type: TaskType, folder: Path | None = None) -> tuple[Example, ...]:
    """The three examples of a task type; PromptError naming the file (and the field) when it is not a prompt file."""
    path = (folder or prompts_dir()) / f"{task_type.value}.yaml"
    try:
        data = PROMPT_SCHEMA.validate_python(yaml.safe_load(path.read_bytes()))
    except FileNotFoundError:
        raise PromptError(f"prompt file not found: {path}") from None
    except (OSError, yaml.YAMLError, RecursionError) as exc:
        raise PromptError(f"{path} is not a prompt file: {exc}") from None
    except ValidationError as exc:
        field, message = first_error(exc)
        raise PromptError(f"{path} is not a prompt file: {field + ': ' if field else ''}{message}") from None
    examples = tuple(Example(ex["game"], ex["observation"].strip(),
                             tuple(Turn(t["action"], t["observation"], t.get("thoughts") or {}) for t in ex["turns"]))
                     for ex in data["examples"])
    if len(examples) != 3:
        raise PromptError(f"{path} must hold 3 examples, found {len(examples)}")
    return examples


def check_variant(variant: object) -> int:
    """`variant` as a prompt variant number; TypeError for a non-int, PromptError out of range."""
    if isinstance(variant, bool) or not isinstance(variant, int):
        raise TypeError(f"variant must be a prompt variant number (an int), not {type(variant).__name__}")
    if not 0 <= variant < len(VARIANTS):
        raise PromptError(f"prompt variant {variant} is out of range 0..{len(VARIANTS) - 1}")
    return variant


def variant_examples(task_type: TaskType, variant: int, folder: Path | None = None) -> tuple[Example, Example]:
    """The two examples (in order) of prompt variant 0..5."""
    check_variant(variant)
    examples = load_examples(task_type, folder)
    first, second = VARIANTS[variant]
    return examples[first], examples[second]
