"""What an expert knows of a game before its first line: the task's object and goal receptacle,
the task type, and the receptacles the room description names."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparse_react.agent import Context
from sparse_react.household.catalog import GameRef
from sparse_react.household.tasks import TRANSFORMS, TaskType

# (verb, state, appliance as the game text names it) per state-changing task
TRANSFORM = {task: (t.verb, t.state, t.appliance.lower()) for task, t in TRANSFORMS.items()}
TRANSFORM_VERBS = tuple(t.verb for t in TRANSFORMS.values())
ENTITY = re.compile(r"\b(?:an?|the) ([a-z]+ \d+)")  # `a cabinet 3`, `the apple 1`


class ExpertError(RuntimeError):
    """The expert has no command from this state: the planner finds no way to win, or (for the
    relabelling expert) nothing the history shows leads on."""


def a(noun: str) -> str:
    """`noun` with its indefinite article: `an apple`, `a mug`."""
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


def kind(name: str) -> str:
    """The kind of a numbered thing: `cabinet` for `cabinet 3`."""
    return name.rpartition(" ")[0]


def receptacles_in(observation: str) -> tuple[str, ...]:
    """The receptacles a room description names (`cabinet 3`), in its order."""
    return tuple(dict.fromkeys(ENTITY.findall(observation.partition("Your task is to:")[0])))


@dataclass(frozen=True)
class ExpertTask:
    """One game's task as the expert reads it: object and goal receptacle kinds in the game's
    words (`apple`, `countertop`), the task type, and the room's receptacles."""

    game: GameRef
    obj: str
    target: str
    task_type: TaskType
    receptacles: tuple[str, ...]

    @classmethod
    def of(cls, context: Context) -> "ExpertTask":
        """The task of the episode `context` plays (its game's folder name and first observation)."""
        spec = context.game.spec
        return cls(context.game, spec.obj.lower(), spec.parent.lower(), spec.task_type,
                   receptacles_in(context.first_observation))

    @property
    def transform(self) -> tuple[str, str, str] | None:
        """(verb, state, appliance) for a heat, cool or clean task, else None."""
        return TRANSFORM.get(self.task_type)

    def lowest(self, receptacle_kind: str) -> str | None:
        """The lowest-numbered receptacle of this kind in the room."""
        same = [r for r in self.receptacles if kind(r) == receptacle_kind]
        return min(same, key=lambda r: int(r.rpartition(" ")[2]), default=None)

    def decomposition(self) -> str:
        """The task as subgoals: `find an apple, take it, heat it with the microwave, and put it ...`."""
        o, t = self.obj, self.target
        if self.task_type is TaskType.LOOK:
            return f"find {a(o)}, take it, and look at it under the {t}"
        if self.task_type is TaskType.PICK_TWO:
            return f"find two {o}s and put both in/on the {t}"
        if self.transform:
            verb, _, tool = self.transform
            return f"find {a(o)}, take it, {verb} it with the {tool}, and put it in/on the {t}"
        return f"find {a(o)}, take it, and put it in/on the {t}"
