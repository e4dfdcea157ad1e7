"""Search strategies: how an expert chooses its next command and names its current subgoal.

- `PlannerSearch` (the plain expert): the planner, which knows where everything is, chooses.
- `OrderedSearch` (the searching expert): it visits the receptacles most likely to hold the
  object first (`search_order`), goes where it has seen one, then to the appliance and the goal
  receptacle; the planner only steps in where its own command is not admissible.
- `HistorySearch` (the relabelling expert): the ordered search from what any agent's episode has
  shown, never the planner: with every likely place searched it looks in the others, then again in
  those seen longest ago, and it puts down what the task does not need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from sparse_react.household.planner import Planner
from sparse_react.household.tasks import TaskType
from sparse_react.policies.expert.knowledge import Knowledge
from sparse_react.policies.expert.phrases import (
    planned_new_subgoal,
    planned_opening,
    search_new_subgoal,
    search_opening,
)
from sparse_react.policies.expert.reading import Turns
from sparse_react.policies.expert.task import ExpertError, ExpertTask, a, kind
from sparse_react.policies.search_order import search_order


class SearchStrategy(Protocol):
    """What an expert goes by, what it does next, and how it says its plan."""

    def knowledge(self, task: ExpertTask, turns: Turns) -> Knowledge:
        """The state `turns` lead to, as this expert reads it."""

    def command(self, known: Knowledge, admissible: Sequence[str]) -> str:
        """The next command (one of `admissible`); ExpertError where there is none."""

    def subgoal(self, known: Knowledge) -> str:
        """The current subgoal, in words (`take the apple 1 from the countertop 2`)."""

    def opening(self, known: Knowledge) -> str:
        """The thought at the start: the plan and where to look."""

    def new_subgoal(self, known: Knowledge, subgoal: str) -> str:
        """The thought when a subgoal is done and `subgoal` is the next."""


# -- subgoals -----------------------------------------------------------------------------------
def planned_subgoal(known: Knowledge) -> str:
    """The subgoal by the subgoals done alone."""
    p, task, o, t = known.progress, known.task, known.task.obj, known.task.target
    if task.task_type is TaskType.LOOK:
        return f"find and take {a(o)}" if not p.holding else f"turn on the {t}"
    if not p.holding:
        return f"find and take a second {o}" if p.placed else f"find and take {a(o)}"
    if task.transform and not p.transformed:
        verb, _, tool = task.transform
        return f"{verb} the {o} with the {tool}"
    return f"put the {o} in/on the {t}"


def search_subgoal(known: Knowledge) -> str:
    """The subgoal, naming the thing wanted where one has been seen."""
    wanted = known.wanted()
    if wanted is None:
        return planned_subgoal(known)
    found = known.found(wanted)
    if found and wanted == known.task.target:
        return f"turn on the {found[0]}"
    if found:
        return f"take the {found[0]} from the {found[1]}"
    return f"find {'a second ' + wanted if known.progress.placed else a(wanted)}"


# -- commands -----------------------------------------------------------------------------------
def planned_command(planner: Planner, known: Knowledge, admissible: Sequence[str]) -> str:
    """The first command of a winning plan from the current state."""
    game = known.task.game
    plan = planner.plan(game, known.reading.actions)
    if not plan:
        raise ExpertError(f"the planner finds no way to win {game.path} from here")
    if plan[0] not in admissible:
        raise ExpertError(f"the planner's command {plan[0]!r} is not admissible in {game.path}")
    return plan[0]


def search_command(known: Knowledge, admissible: Sequence[str]) -> str | None:
    """Towards the thing still wanted: to where one was seen, else open this receptacle or go to
    the next likely one. None when nothing is wanted."""
    wanted, r = known.wanted(), known.reading
    if wanted is None:
        return None
    found = known.found(wanted)
    if found:
        name, place = found
        if r.location != place:
            return f"go to {place}"
        return f"use {name}" if wanted == known.task.target else f"take {name} from {place}"
    if r.location and r.closed_here:
        return f"open {r.location}"
    # Some receptacles share a spot (stove burners): the game offers no `go to` between them.
    rest = [f"go to {p}" for p in search_order(wanted, known.task.receptacles) if p not in r.searched]
    return next((c for c in rest if c in admissible), None)


def finish_command(known: Knowledge, admissible: Sequence[str]) -> str | None:
    """With the object in hand: to the appliance, then to the goal receptacle (both in view from
    the start). Scripted rather than planned: the planner takes seconds per state here."""
    held, here, task = known.reading.held, known.reading.location, known.task
    if held is None:
        return None
    if task.transform and not known.progress.transformed:
        verb, _, appliance = task.transform
        place = known.first(appliance)
        command = f"{verb} {held} with {place}"
    else:
        place = known.first(task.target)
        command = f"move {held} to {place}"
    if place is None or here != place:
        return place and f"go to {place}"
    return command if command in admissible or f"open {place}" not in admissible else f"open {place}"


def history_command(known: Knowledge, admissible: Sequence[str]) -> str:
    """The relabelling expert's next command, from the history alone."""
    r = known.reading
    if r.held and kind(r.held) != known.task.obj:
        return put_down(known, admissible)
    command = search_command(known, admissible) or finish_command(known, admissible)
    if command and command in admissible:
        return command
    if command and command.startswith("go to "):  # places that share a spot (a desk and its drawers): no `go to`
        there = known.at(command.removeprefix("go to "))
        then = search_command(there, admissible) or finish_command(there, admissible)
        if then in admissible:
            return then
    wanted = known.wanted()
    if wanted is not None and not known.found(wanted):
        return search_anywhere(known, wanted, admissible)
    raise ExpertError(f"no command from what the history shows ({command!r} is not admissible)")


def put_down(known: Knowledge, admissible: Sequence[str]) -> str:
    """Towards putting down a held thing the task does not need: here, or back where it came from."""
    r = known.reading
    here = f"move {r.held} to {r.location}"
    if here in admissible:
        return here
    if r.location and f"open {r.location}" in admissible:
        return f"open {r.location}"
    back = f"go to {r.taken_from}"
    if back in admissible:
        return back
    raise ExpertError(f"cannot put down the {r.held} from what the history shows")


def search_anywhere(known: Knowledge, wanted: str, admissible: Sequence[str]) -> str:
    """Past the likely places: the others never searched, then every place again, the one seen
    longest ago first (the agent may have moved things, or seen a place while it was closed)."""
    r, ranked = known.reading, search_order(wanted, known.task.receptacles)
    places = ranked + [p for p in known.task.receptacles if p not in ranked]
    unseen = [p for p in places if p not in r.searched]
    again = sorted((p for p in places if p != r.location), key=lambda p: r.last_visit.get(p, -1))
    for place in unseen + again:
        if f"go to {place}" in admissible:
            return f"go to {place}"
    raise ExpertError(f"nowhere left to look for {a(wanted)}")


# -- the strategies -----------------------------------------------------------------------------
@dataclass(frozen=True)
class PlannerSearch:
    """The plain expert's: the planner chooses; its thoughts say where such an object usually is."""

    planner: Planner

    def knowledge(self, task: ExpertTask, turns: Turns) -> Knowledge:
        return Knowledge.of_own_play(task, turns)

    def command(self, known: Knowledge, admissible: Sequence[str]) -> str:
        return planned_command(self.planner, known, admissible)

    def subgoal(self, known: Knowledge) -> str:
        return planned_subgoal(known)

    def opening(self, known: Knowledge) -> str:
        return planned_opening(known)

    def new_subgoal(self, known: Knowledge, subgoal: str) -> str:
        return planned_new_subgoal(known, subgoal)


@dataclass(frozen=True)
class OrderedSearch:
    """The searching expert's: likely places first, the planner only where its own command is not admissible."""

    planner: Planner

    def knowledge(self, task: ExpertTask, turns: Turns) -> Knowledge:
        return Knowledge.of_own_play(task, turns)

    def command(self, known: Knowledge, admissible: Sequence[str]) -> str:
        command = search_command(known, admissible) or finish_command(known, admissible)
        return command if command in admissible else planned_command(self.planner, known, admissible)

    def subgoal(self, known: Knowledge) -> str:
        return search_subgoal(known)

    def opening(self, known: Knowledge) -> str:
        return search_opening(known)

    def new_subgoal(self, known: Knowledge, subgoal: str) -> str:
        return search_new_subgoal(known, subgoal)


@dataclass(frozen=True)
class HistorySearch:
    """The relabelling expert's: the ordered search from what any agent's episode has shown, never the planner."""

    def knowledge(self, task: ExpertTask, turns: Turns) -> Knowledge:
        return Knowledge.of_any_play(task, turns)

    def command(self, known: Knowledge, admissible: Sequence[str]) -> str:
        return history_command(known, admissible)

    def subgoal(self, known: Knowledge) -> str:
        return search_subgoal(known)

    def opening(self, known: Knowledge) -> str:
        return search_opening(known)

    def new_subgoal(self, known: Knowledge, subgoal: str) -> str:
        return search_new_subgoal(known, subgoal)
