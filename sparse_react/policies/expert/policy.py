"""The expert and the searching expert as policies: a search strategy and the rhythm's thought
writer, over the state the pure reader gives each turn."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from sparse_react.agent import Context
from sparse_react.household.planner import Planner
from sparse_react.lines import NOTHING_HAPPENS, Kind, thought_line
from sparse_react.policies.base import LinePolicy
from sparse_react.policies.expert.knowledge import Knowledge
from sparse_react.policies.expert.phrases import goal, surprise, why
from sparse_react.policies.expert.reading import Turns
from sparse_react.policies.expert.search import OrderedSearch, PlannerSearch, SearchStrategy
from sparse_react.policies.expert.task import ExpertError, ExpertTask
from sparse_react.policies.expert.thoughts import Moment, write_thought


@dataclass(frozen=True)
class Memory:
    """What an expert remembers of its own lines in one episode, which the turns cannot tell apart
    from another writer's (a model's before a hand-over, an edited thought): the subgoal when it
    last could think, and the action its last thought was about."""

    subgoal: str = ""
    thought_for: str | None = None


def choose_line(thought: str | None, action: str, memory: Memory, context: Context) -> tuple[str, Memory]:
    """The thought, unless the expert's last line was already the thought for `action`; else the
    action (ExpertError when the rhythm wants a thought here and there is none)."""
    if thought and memory.thought_for != action:
        return thought_line(thought), Memory(memory.subgoal, action)
    if Kind.ACTION not in context.allowed:
        raise ExpertError(f"rhythm {context.rhythm.name!r} wants a thought the expert has none for")
    return action, Memory(memory.subgoal, None)


def key_moment(search: SearchStrategy, known: Knowledge, turns: Turns, subgoal: str, last_subgoal: str) -> str | None:
    """The thought due before the next action if this is a key moment: the start, a surprise, or a
    subgoal other than the one when the expert last could think."""
    if not turns:
        return search.opening(known)
    if turns[-1][1] == NOTHING_HAPPENS:
        return surprise(subgoal)
    return search.new_subgoal(known, subgoal) if subgoal != last_subgoal else None


class ExpertPolicy(LinePolicy):
    """The planner's commands, with the thoughts the context's rhythm declares (`ExpertThoughts`).

    It replans from wherever the game is (following the stored solution while it is on it), so it
    recovers from any reachable state and control can be handed to it mid-episode.
    """

    name = "expert"
    strategy: type[PlannerSearch | OrderedSearch] = PlannerSearch  # made with the planner

    def __init__(self, planner: Planner | None = None) -> None:
        super().__init__()
        self.planner = planner or Planner()
        self.search: SearchStrategy = self.strategy(self.planner)

    def begin(self, context: Context) -> None:
        self._task = ExpertTask.of(context)
        self._memory = Memory()

    def next_line(self, context: Context, admissible: Sequence[str]) -> str:
        search, turns, memory = self.search, context.turns, self._memory
        last_subgoal = memory.subgoal
        known = search.knowledge(self._task, turns)
        command = search.command(known, admissible)
        subgoal = search.subgoal(known)
        moment = Moment(context.previous_kind, key=lambda: key_moment(search, known, turns, subgoal, last_subgoal),
                        why=lambda: why(known, command, subgoal), goal=lambda: goal(known, subgoal))
        thought = write_thought(context.rhythm, moment)
        if Kind.THOUGHT in context.allowed:
            memory = Memory(subgoal, memory.thought_for)
        line, self._memory = choose_line(thought, command, memory, context)
        return line


class SearchingExpertPolicy(ExpertPolicy):
    """The expert without privileged knowledge of where things are (`OrderedSearch`).

    It looks for the task's object (and, for Look tasks, the lamp) by visiting the room's
    receptacles in a fixed order: kinds ranked by how often training games put that object there
    (`search_order`), instances by number, opening closed ones. Once the thing has been seen it
    goes there, then to the appliance and the goal receptacle, which the room description names
    from the start (the planner only steps in if a command of its own is not admissible). Its
    trajectories are what a model can learn to imitate: they never walk straight to a hidden object.
    """

    name = "search-expert"
    strategy = OrderedSearch
