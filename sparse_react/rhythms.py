"""Thought rhythms: when an agent may think. A rhythm is data; adding one is a new entry here
and a thought key in the prompt files, not edits across the code."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from sparse_react.errors import UserError
from sparse_react.lines import Kind


class RhythmError(UserError, ValueError):
    """An unknown rhythm, or a line whose kind the rhythm does not allow at that point."""


class ExpertThoughts(str, Enum):
    """Which thoughts the experts write in a rhythm (`policies/expert.py` phrases them)."""

    NONE = "none"
    KEY_MOMENTS = "key moments"  # decomposition, a subgoal done and the next chosen, where to look, surprises
    KEY_MOMENTS_ELSE_WHY = "the key moment's thought, else why this action"
    GOAL_AND_SUBGOAL = "the goal and the current subgoal"


@dataclass(frozen=True)
class Rhythm:
    """What the loop allows: whether thoughts exist at all, and whether one must precede each action;
    and which thoughts the experts write in it."""

    name: str
    thinks: bool
    thought_before_each_action: bool
    description: str
    expert_thoughts: ExpertThoughts

    def allowed(self, previous: Kind | None) -> frozenset[Kind]:
        """The kinds of line allowed after `previous` (None at the start of an episode)."""
        if not self.thinks:
            return frozenset({Kind.ACTION})
        if self.thought_before_each_action:
            return frozenset({Kind.ACTION if previous is Kind.THOUGHT else Kind.THOUGHT})
        return frozenset({Kind.THOUGHT, Kind.ACTION})

    def check(self, kind: Kind, previous: Kind | None) -> None:
        if kind not in self.allowed(previous):
            after = f"after a {previous.value}" if previous else "at the start"
            raise RhythmError(f"rhythm {self.name!r} does not allow a {kind.value} {after}")


RHYTHMS: dict[str, Rhythm] = {
    r.name: r
    for r in (
        Rhythm("sparse", True, False, "ReAct: thoughts only at decomposition, subgoal changes, object search, surprises",
               ExpertThoughts.KEY_MOMENTS),
        Rhythm("dense", True, True, "a thought before every action", ExpertThoughts.KEY_MOMENTS_ELSE_WHY),
        Rhythm("im", True, True, "ReAct-IM: before every action, restate the goal and the current subgoal only",
               ExpertThoughts.GOAL_AND_SUBGOAL),
        Rhythm("act", False, False, "actions only", ExpertThoughts.NONE),
    )
}
DEFAULT_RHYTHM = "sparse"


def get_rhythm(name: str) -> Rhythm:
    """The rhythm called `name`; RhythmError lists the known ones otherwise."""
    try:
        return RHYTHMS[name]
    except KeyError:
        raise RhythmError(f"unknown rhythm {name!r}; known: {', '.join(RHYTHMS)}") from None
