"""When an expert thinks: one thought writer per kind of expert thoughts a rhythm declares
(`Rhythm.expert_thoughts`), and the rhythm's own rule of where a thought may stand.

A writer is handed the `Moment` before the expert's next action and picks which of its thoughts,
if any, to write; the sentences themselves come from `phrases.py` through the moment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from sparse_react.lines import Kind
from sparse_react.rhythms import ExpertThoughts, Rhythm


@dataclass(frozen=True)
class Moment:
    """The state before an expert's next action, with the thoughts it could write there; each is
    put into words only when a writer asks for it."""

    previous: Kind | None  # the kind of the episode's last line (None at the start)
    key: Callable[[], str | None]  # the key moment's thought (the plan, a surprise, a subgoal done, ...), if this is one
    why: Callable[[], str]  # why the next action
    goal: Callable[[], str]  # the goal and the current subgoal

    @property
    def after_thought(self) -> bool:
        return self.previous is Kind.THOUGHT


class ThoughtWriter(Protocol):
    """Which thought, if any, an expert writes at a moment."""

    def write(self, moment: Moment) -> str | None:
        """The thought to write before the next action, or None to act."""


class NoThoughts:
    """`act`: never a thought."""

    def write(self, moment: Moment) -> str | None:
        return None


class KeyMoments:
    """`sparse`: a thought only at a key moment."""

    def write(self, moment: Moment) -> str | None:
        return moment.key()


class KeyMomentElseWhy:
    """`dense`: the key moment's thought, else why this action (not a second thought in a row)."""

    def write(self, moment: Moment) -> str | None:
        return moment.key() or (None if moment.after_thought else moment.why())


class GoalAndSubgoal:
    """`im`: the goal and the current subgoal before an action (not a second thought in a row)."""

    def write(self, moment: Moment) -> str | None:
        return None if moment.after_thought else moment.goal()


WRITERS: dict[ExpertThoughts, ThoughtWriter] = {
    ExpertThoughts.NONE: NoThoughts(),
    ExpertThoughts.KEY_MOMENTS: KeyMoments(),
    ExpertThoughts.KEY_MOMENTS_ELSE_WHY: KeyMomentElseWhy(),
    ExpertThoughts.GOAL_AND_SUBGOAL: GoalAndSubgoal(),
}


def writer_for(rhythm: Rhythm) -> ThoughtWriter:
    """The thought writer of `rhythm`'s kind of expert thoughts."""
    return WRITERS[rhythm.expert_thoughts]


def write_thought(rhythm: Rhythm, moment: Moment) -> str | None:
    """The expert's thought at `moment` in `rhythm`: None where the rhythm allows no thought."""
    if Kind.THOUGHT not in rhythm.allowed(moment.previous):
        return None
    return writer_for(rhythm).write(moment)
