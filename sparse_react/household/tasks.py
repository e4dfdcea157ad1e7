"""The six ALFWorld task types and the folder names that encode them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from sparse_react.errors import UserError


class TaskType(str, Enum):
    """An ALFWorld task type; the value is the name used in game folders."""

    PICK = "pick_and_place_simple"
    CLEAN = "pick_clean_then_place_in_recep"
    HEAT = "pick_heat_then_place_in_recep"
    COOL = "pick_cool_then_place_in_recep"
    LOOK = "look_at_obj_in_light"
    PICK_TWO = "pick_two_obj_and_place"

    @property
    def column(self) -> str:
        """The column name the ReAct paper's tables use (Pick, Clean, ... Pick2)."""
        return _COLUMNS[self]

    @classmethod
    def parse(cls, text: str) -> "TaskType":
        """Accept a folder name prefix or a column name (case-insensitive)."""
        key = text.strip().lower()
        for task in cls:
            if key in (task.value, task.column.lower(), task.name.lower()):
                return task
        known = ", ".join(t.value for t in cls)
        raise UnknownTaskError(f"unknown task type {text!r}; known: {known}")


@dataclass(frozen=True)
class Transform:
    """What a state-changing task does to its object: the command's verb (`heat X with Y`), the
    state it leaves (hot), and the appliance, by its type name in the problems (Microwave)."""

    verb: str
    state: str
    appliance: str


TRANSFORMS: dict[TaskType, Transform] = {
    TaskType.CLEAN: Transform("clean", "clean", "SinkBasin"),
    TaskType.HEAT: Transform("heat", "hot", "Microwave"),
    TaskType.COOL: Transform("cool", "cool", "Fridge"),
}


_COLUMNS = {
    TaskType.PICK: "Pick",
    TaskType.CLEAN: "Clean",
    TaskType.HEAT: "Heat",
    TaskType.COOL: "Cool",
    TaskType.LOOK: "Look",
    TaskType.PICK_TWO: "Pick2",
}


class UnknownTaskError(UserError, ValueError):
    """A task type or task folder name that is not one of the six."""


@dataclass(frozen=True)
class TaskSpec:
    """What an ALFWorld task folder name says: `<task>-<Obj>-<MRecep>-<Parent|Toggle>-<scene>`."""

    task_type: TaskType
    obj: str
    mrecep: str
    parent: str
    scene: str

    @property
    def folder(self) -> str:
        return f"{self.task_type.value}-{self.obj}-{self.mrecep}-{self.parent}-{self.scene}"


_FOLDER = re.compile(r"^(?P<task>[a-z_]+)-(?P<obj>\w+)-(?P<mrecep>\w+)-(?P<parent>\w+)-(?P<scene>\w+)$")


def parse_task_folder(name: str) -> TaskSpec:
    """Parse a task folder name; raise UnknownTaskError naming it if it is not one."""
    match = _FOLDER.match(name)
    if not match:
        raise UnknownTaskError(
            f"{name!r} is not an ALFWorld task folder (expected <task>-<Obj>-<MRecep>-<Parent>-<scene>)"
        )
    try:
        task_type = TaskType(match["task"])
    except ValueError:
        raise UnknownTaskError(f"task folder {name!r} names an unknown task type {match['task']!r}") from None
    return TaskSpec(task_type, match["obj"], match["mrecep"], match["parent"], match["scene"])


def game_name(path: str | Path) -> str:
    """A game file's `<task folder>/<trial>`: the same wherever the game files sit."""
    path = Path(path)
    return f"{path.parent.parent.name}/{path.parent.name}"
