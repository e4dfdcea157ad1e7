"""What an expert goes by at one state of an episode: the task, the reading of the turns, the
subgoals done, and what follows from them (the thing still wanted, where one was seen, which
receptacle is the goal)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

from sparse_react.household.tasks import TaskType
from sparse_react.policies.expert.reading import Progress, Reading, Turns, progress_by_commands, progress_of_task, read
from sparse_react.policies.expert.task import ExpertTask, kind


@dataclass(frozen=True)
class Knowledge:
    """One state as an expert knows it.

    `placed` (the task's objects already put in/on a goal receptacle, and where) is kept only by
    an expert reading any agent's episode: a second object then joins the first, and a placed
    one is not taken again. An expert reading its own episode keeps none and goes to the
    lowest-numbered goal receptacle.
    """

    task: ExpertTask
    reading: Reading
    progress: Progress
    placed: Mapping[str, str]

    @classmethod
    def of_own_play(cls, task: ExpertTask, turns: Turns) -> "Knowledge":
        """For an expert that wrote every command of `turns` itself (or follows on from them as if it had)."""
        reading = read(turns, task)
        return cls(task, reading, progress_by_commands(reading), {})

    @classmethod
    def of_any_play(cls, task: ExpertTask, turns: Turns) -> "Knowledge":
        """For an expert reading any agent's episode: only the task's objects count as taken or placed."""
        reading = read(turns, task)
        return cls(task, reading, progress_of_task(reading, task), reading.placed)

    def at(self, location: str) -> "Knowledge":
        """The same knowledge, as if the agent stood at `location`."""
        return replace(self, reading=replace(self.reading, location=location))

    def first(self, receptacle_kind: str) -> str | None:
        """The receptacle of this kind to use: where the task's objects were placed, for the goal's
        kind, else the lowest-numbered one."""
        if receptacle_kind == self.task.target and self.placed:
            return next(iter(self.placed.values()))
        return self.task.lowest(receptacle_kind)

    def target_place(self) -> str | None:
        """For a pick-two task, the goal receptacle (a second object is not looked for there)."""
        return self.first(self.task.target) if self.task.task_type is TaskType.PICK_TWO else None

    def wanted(self) -> str | None:
        """The kind of thing still to be found: the task's object, or the lamp once it is held."""
        if not self.progress.holding:
            return self.task.obj
        return self.task.target if self.task.task_type is TaskType.LOOK else None

    def found(self, object_kind: str) -> tuple[str, str] | None:
        """(name, receptacle) of the first thing of this kind seen where it is still to be taken from."""
        for name, place in self.reading.seen.items():
            if kind(name) == object_kind and name not in self.placed and place != self.target_place():
                return name, place
        return None
