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

from sparse_react.bundled import bundled_dir
from sparse_react.errors import UserError
from sparse_react.lines import THINK, THOUGHT_REPLY
from sparse_react.rhythms import Rhythm
from sparse_react.tasks import TaskType

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


@lru_cache(maxsize=None)
def load_examples(task_type: TaskType, folder: Path | None = None) -> tuple[Example, ...]:
    """The three examples of a task type."""
    path = (folder or prompts_dir()) / f"{task_type.value}.yaml"
    try:
        data = yaml.safe_load(path.read_text())
        examples = tuple(
            Example(
                game=str(ex["game"]),
                observation=str(ex["observation"]).strip(),
                turns=tuple(
                    Turn(str(t["action"]), str(t["observation"]), {k: str(v) for k, v in (t.get("thoughts") or {}).items()})
                    for t in ex["turns"]
                ),
            )
            for ex in data["examples"]
        )
    except FileNotFoundError:
        raise PromptError(f"prompt file not found: {path}") from None
    except (yaml.YAMLError, KeyError, TypeError) as exc:
        raise PromptError(f"{path} is not a prompt file: {exc}") from None
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
