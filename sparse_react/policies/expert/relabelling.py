"""The relabelling expert: from any state of any episode (a model's too), the line(s) a good agent
writes next, from only what the history has shown. `label` is a pure query."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Sequence

from sparse_react.agent import Context
from sparse_react.claims import found_claims, shown
from sparse_react.lines import is_thought, kind_of
from sparse_react.policies.base import LinePolicy
from sparse_react.policies.expert.knowledge import Knowledge
from sparse_react.policies.expert.phrases import correction, goal, replan, surprise, why
from sparse_react.policies.expert.policy import Memory, choose_line
from sparse_react.policies.expert.reading import Turns, last_action_index
from sparse_react.policies.expert.search import HistorySearch, SearchStrategy
from sparse_react.policies.expert.task import ExpertError, ExpertTask
from sparse_react.policies.expert.thoughts import Moment, write_thought
from sparse_react.rhythms import DEFAULT_RHYTHM, Rhythm, get_rhythm


@dataclass(frozen=True)
class Label:
    """The line(s) a good agent writes next from a state: a thought where one is due, then the action."""

    thought: str | None
    action: str


@dataclass(frozen=True)
class Offered:
    """The admissible commands the game offered before each action, by the number of actions sent
    before it: what tells a detour from the expert's own plan (the turns do not record them)."""

    by_actions_sent: Mapping[int, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))

    def adding(self, actions_sent: int, admissible: Sequence[str]) -> "Offered":
        """With `admissible` offered after `actions_sent` actions (the first offer there stands)."""
        if actions_sent in self.by_actions_sent:
            return self
        return Offered(MappingProxyType({**self.by_actions_sent, actions_sent: tuple(admissible)}))

    def before_last_action(self, actions_sent: int) -> tuple[str, ...] | None:
        """What the game offered before the last of `actions_sent` actions, where known."""
        return self.by_actions_sent.get(actions_sent - 1)


def false_belief(thought: str, turns: Turns) -> str | None:
    """The kind of object a thought claims found that no observation of `turns` has shown, else None
    (an object shown since, even elsewhere, needs no correction: the plan says where it is)."""
    observations = [o for line, o in turns if not is_thought(line)]
    for claim in found_claims(thought):
        if not shown(claim.name, observations):
            return claim.kind
    return None


def due_thought(search: SearchStrategy, known: Knowledge, turns: Turns, subgoal: str,
                admissible_before: Sequence[str] | None, replan_detours: bool) -> str | None:
    """The key moment's thought, judged from the history alone: the plan at the start, a correction
    after a false claim, a surprise, a subgoal done by the last action (on the plan or by a detour
    that found the thing), and with `replan_detours` the plan again after a detour."""
    r = known.reading
    if not turns:
        return search.opening(known)
    wrong = r.last_thought and false_belief(r.last_thought, turns)
    if r.last_is_thought:
        return correction(known, wrong, subgoal) if wrong else None
    if wrong:
        return correction(known, wrong, subgoal)
    if r.surprise:
        return surprise(subgoal)
    before = search.knowledge(known.task, turns[:last_action_index(turns)])
    if search.subgoal(before) != subgoal:
        return search.new_subgoal(known, subgoal)
    if replan_detours and _planned(search, before, admissible_before, r.last_action) != r.last_action:
        return replan(known, subgoal)
    return None


def _planned(search: SearchStrategy, before: Knowledge, admissible: Sequence[str] | None,
             sent: str | None) -> str | None:
    """The action the expert would have chosen before the last one (`sent` where the offer is unknown)."""
    if admissible is None:
        return sent
    try:
        return search.command(before, admissible)
    except ExpertError:
        return None


class RelabellingExpertPolicy(LinePolicy):
    """The search expert, writing from any state of any episode (a model's too) only what its
    history has shown: the places looked in, what was seen there, what is held (`HistorySearch`).

    Unlike the search expert it never asks the planner (which knows where hidden objects are): with
    every likely place searched it looks in the others, then again in those seen longest ago. It
    puts down an object the task does not need, and counts only the task's own objects as taken,
    transformed or placed. Beside the search expert's own thoughts (the plan, a surprise, a subgoal
    done) it corrects the last thought when it claims an object no observation showed. With
    `replan_detours` it also re-plans after every detour (the last action was not the one this
    expert would have chosen), saying where to look next and why; off by default, since under the
    paper's step rule each such thought costs a step, and a model trained on them thinks where it
    used to act (see the README's Rounds). `label` answers for one state without playing and
    without changing the expert; as a policy it plays from wherever it is handed control.
    """

    name = "relabel-expert"

    def __init__(self, replan_detours: bool = False) -> None:
        super().__init__()
        self.replan_detours = replan_detours
        self.search: SearchStrategy = HistorySearch()

    def begin(self, context: Context) -> None:
        self._task = ExpertTask.of(context)
        self._memory = Memory()
        self._offered = Offered()

    def next_line(self, context: Context, admissible: Sequence[str]) -> str:
        sent = len(context.actions)
        self._offered = self._offered.adding(sent, admissible)
        label = self.label(self._task, context.turns, admissible, self._offered.before_last_action(sent),
                           context.rhythm)
        line, self._memory = choose_line(label.thought, label.action, self._memory, context)
        return line

    def label(self, task: ExpertTask, turns: Turns, admissible: Sequence[str],
              admissible_before: Sequence[str] | None = None, rhythm: Rhythm | None = None) -> Label:
        """The next line(s) from the state `turns` lead to in `task`'s game, with the thoughts of
        `rhythm` (default: sparse) where it allows one. `admissible_before` (the commands the game
        offered before the last action) lets it tell a detour from its own plan. A pure query:
        neither the expert nor its arguments change."""
        rhythm = rhythm or get_rhythm(DEFAULT_RHYTHM)
        search, detours = self.search, self.replan_detours
        known = search.knowledge(task, turns)
        action = search.command(known, admissible)
        subgoal = search.subgoal(known)
        moment = Moment(kind_of(turns[-1][0]) if turns else None,
                        key=lambda: due_thought(search, known, turns, subgoal, admissible_before, detours),
                        why=lambda: why(known, action, subgoal), goal=lambda: goal(known, subgoal))
        return Label(write_thought(rhythm, moment), action)
