"""The pure reader: the turns of an episode so far (each line with the game's answer) as the state
an expert decides from. Nothing the game has not shown goes in, and nothing is kept between calls:
the same turns always read the same."""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Sequence

from sparse_react.lines import NOTHING_HAPPENS, is_thought, thought_text
from sparse_react.policies.expert.task import ENTITY, TRANSFORM_VERBS, ExpertTask, kind

Turns = Sequence[tuple[str, str]]  # (line, the game's answer) per turn, as `Context.turns` holds them


@dataclass(frozen=True)
class Progress:
    """Which subgoals of the task are done."""

    holding: bool = False
    transformed: bool = False
    placed: int = 0


@dataclass(frozen=True)
class Reading:
    """What the turns so far show: where the agent is, what it has looked at and seen, what it
    holds, what it has transformed and put down, and how the episode's last lines went."""

    actions: tuple[str, ...]  # every command sent, in order (those that did nothing too)
    location: str | None  # the receptacle last gone to
    closed_here: bool  # it was closed when the agent arrived and has not been opened since
    searched: frozenset[str]  # receptacles the agent has been at while they were open
    seen: Mapping[str, str]  # object -> the receptacle it was last seen in/on (the held one not among them)
    held: str | None
    taken_from: str | None  # where the last object taken came from
    moves: int  # commands that put something down
    transformed: frozenset[str]  # objects heated, cooled or cleaned
    placed: Mapping[str, str]  # the task's objects put in/on a goal-kind receptacle (and not taken since) -> where
    last_visit: Mapping[str, int]  # receptacle -> the turn (0-based) it was last gone to
    last_thought: str | None  # the text of the latest thought, wherever it was
    last_is_thought: bool
    last_action: str | None
    surprise: bool  # the last command did nothing


def read(turns: Turns, task: ExpertTask) -> Reading:
    """The state `turns` lead to in `task`'s game. Pure: `turns` is only read."""
    location, closed_here, held, taken_from, moves = None, False, None, None, 0
    searched: set[str] = set()
    transformed: set[str] = set()
    seen: dict[str, str] = {}
    placed: dict[str, str] = {}
    last_visit: dict[str, int] = {}
    actions: list[str] = []
    last_thought, last_is_thought, last_action, surprise = None, False, None, False
    for step, (line, observation) in enumerate(turns):
        if is_thought(line):
            last_thought, last_is_thought = thought_text(line), True
            continue
        actions.append(line)
        last_is_thought, last_action, surprise = False, line, observation == NOTHING_HAPPENS
        if surprise:
            continue
        verb, _, rest = line.partition(" ")
        if verb == "go":
            location = rest.removeprefix("to ")
            closed_here = "is closed" in observation
            last_visit[location] = step
        elif verb == "open":
            closed_here = False
        if location and not closed_here:
            searched.add(location)
            for name in ENTITY.findall(observation):
                if name != location:
                    seen[name] = location
        if verb == "take":
            held, _, taken_from = rest.partition(" from ")
            seen.pop(held, None)
            placed.pop(held, None)
        elif verb == "move":
            name, _, place = rest.partition(" to ")
            seen[name], held, moves = place, None, moves + 1
            if kind(name) == task.obj and kind(place) == task.target:
                placed[name] = place
        elif verb in TRANSFORM_VERBS:
            transformed.add(rest.partition(" with ")[0])
    if held:
        seen.pop(held, None)  # an observation since (`You pick up ...`, the inventory) named it
    return Reading(tuple(actions), location, closed_here, frozenset(searched), MappingProxyType(seen), held,
                   taken_from, moves, frozenset(transformed), MappingProxyType(placed),
                   MappingProxyType(last_visit), last_thought, last_is_thought, last_action, surprise)


def progress_by_commands(reading: Reading) -> Progress:
    """Subgoals done, for an expert reading its own episode: every take, transform and move it sent
    was of the task's object."""
    return Progress(reading.held is not None, bool(reading.transformed), reading.moves)


def progress_of_task(reading: Reading, task: ExpertTask) -> Progress:
    """Subgoals done, for an expert reading any agent's episode: only the task's own objects count."""
    holding = reading.held is not None and kind(reading.held) == task.obj
    return Progress(holding, holding and reading.held in reading.transformed, len(reading.placed))


def last_action_index(turns: Turns) -> int:
    """The index of the last command among `turns` (0 when there is none)."""
    return max((i for i, (line, _) in enumerate(turns) if not is_thought(line)), default=0)
