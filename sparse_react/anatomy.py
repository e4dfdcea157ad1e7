"""Thought anatomy: where an agent thinks. Each thought is classified by what preceded it, from the
episode's record and a replay of its game (no model judges):

- decomposition: the episode's first thought;
- subgoal: the line before it was an action that completed a subgoal of the task (an object of the
  task's kind seen for the first time, taken, cleaned/heated/cooled, put in place; for Look, the
  lamp seen, then switched on). The replay reads holding, transforming, placing and switching off
  the game's own state after each action; "seen" is read off the observations;
- exception: the line before it was an action answered `Nothing happens.`, the end of a search that
  found nothing (the action that visited the last kind of place the latest guess named, with the
  object still not seen), or a thought whose "found" claim no observation had backed;
- location: it names places of the room where an object may be, with a guess (likely, probably,
  usually, may, might, could, ...), and at least one of them not yet visited;
- other: none of these (a recap, a restated plan, a reason for the next action).

A thought can be of several kinds (the first thought often decomposes the task and guesses where to
look). The triggers of an episode are its subgoal completions and exceptions, but for one on its last
line, which no line can follow (the winning action); a trigger is covered when the line right
after it is a thought.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from pathlib import Path
from typing import Iterable, Sequence

from sparse_react.claims import contradicted, found_claims
from sparse_react.household.catalog import GameRef, game_ref
from sparse_react.household.engine import Engine
from sparse_react.household.tasks import TRANSFORMS, TaskType
from sparse_react.lines import NOTHING_HAPPENS, Kind
from sparse_react.trajectory import Entry, Episode


class ThoughtKind(str, Enum):
    """Where a thought sits: what preceded it (see the module's docstring for the rules)."""

    DECOMPOSITION = "decomposition"
    SUBGOAL = "subgoal"
    EXCEPTION = "exception"
    LOCATION = "location"
    OTHER = "other"


class Trigger(str, Enum):
    """A moment the ReAct design thinks at, caused by an action."""

    SUBGOAL = "subgoal"
    EXCEPTION = "exception"


GUESS = re.compile(r"\b(likely|probably|usually|often|typically|normally|perhaps|maybe|may|might|could|"
                   r"should be|tends? to|check)\b", re.IGNORECASE)
_NAMED = re.compile(r"\b([a-z]+) (\d+)\b")
SEARCH_VERBS = ("go to ", "open ")


@dataclass(frozen=True)
class Progress:
    """The task's subgoals done after an action: objects of its kind seen, held, transformed, put
    in place; for Look, the lamp seen and switched on."""

    seen: int = 0
    held: bool = False
    transformed: bool = False
    placed: int = 0
    lamp_seen: bool = False
    lamp_on: bool = False

    def advanced(self, before: "Progress") -> bool:
        return (self.seen > before.seen or self.placed > before.placed or (self.held and not before.held)
                or (self.transformed and not before.transformed) or (self.lamp_seen and not before.lamp_seen)
                or (self.lamp_on and not before.lamp_on))


def _kinds_named(text: str) -> list[tuple[str, str]]:
    return [(kind, f"{kind} {n}") for kind, n in _NAMED.findall(text.lower())]


class Replay:
    """Plays an episode's actions again in its game and reads the task's progress after each."""

    def __init__(self, game: GameRef) -> None:
        self.game = game
        spec = game.spec
        self.task_type = spec.task_type
        self.obj, self.parent = spec.obj.lower(), spec.parent.lower()

    def progress(self, actions: Sequence[Entry]) -> list[Progress]:
        """The progress after each action (the replay's observations must match the record's)."""
        engine = Engine()
        engine.load(self.game.path)
        engine.reset()
        seen: set[str] = set()
        placed_names: set[str] = set()
        lamp_seen = False
        out = []
        for action in actions:
            engine.step(action.text)
            facts = engine.facts()
            held, transformed, placed, lamp_on = self._read(facts)
            if action.observation != NOTHING_HAPPENS and action.text.startswith("move "):
                placed_names |= {name for kind, name in _kinds_named(action.text) if kind == self.obj}
            at = action.text.rpartition(" ")[0].split(" ")[-1] if action.text.startswith(SEARCH_VERBS) else ""
            if not (self.task_type is TaskType.PICK_TWO and at == self.parent):  # one already in place is not found
                seen |= {name for kind, name in _kinds_named(action.observation) if kind == self.obj}
            if self.task_type is TaskType.LOOK and held:
                lamp_seen = lamp_seen or any(kind == self.parent for kind, _ in _kinds_named(action.observation))
            found = min(len(seen - placed_names), 1)
            out.append(Progress(found + placed if self.task_type is TaskType.PICK_TWO else found,
                                held, transformed, placed, lamp_seen, lamp_on))
        return out

    def _read(self, facts: frozenset) -> tuple[bool, bool, int, bool]:
        typed = {args[0] for name, args in facts if name == "objecttype" and args[1] == f"{self.obj}type"}
        held = any(name == "holds" and args[1] in typed for name, args in facts)
        transformed = self.task_type in TRANSFORMS and any(
            name == f"is{TRANSFORMS[self.task_type].state}" and args[0] in typed for name, args in facts)
        targets = {args[0] for name, args in facts if name == "receptacletype" and args[1] == f"{self.parent}type"}
        placed = sum(1 for name, args in facts if name == "inreceptacle" and args[0] in typed and args[1] in targets)
        lamps = {args[0] for name, args in facts if name == "objecttype" and args[1] == f"{self.parent}type"}
        lamp_on = any(name == "istoggled" and args[0] in lamps for name, args in facts)
        return held, transformed, placed, lamp_on


@dataclass(frozen=True)
class ClassifiedThought:
    """One thought of an episode, with its kinds."""

    step: int
    text: str
    kinds: frozenset[ThoughtKind]


@dataclass(frozen=True)
class TriggerAt:
    """A trigger caused by the action at `step`, and whether a thought followed right after it."""

    step: int
    kind: Trigger
    covered: bool


@dataclass(frozen=True)
class EpisodeAnatomy:
    """Where an episode's thoughts sit, and which of its triggers they cover."""

    episode: Episode
    thoughts: tuple[ClassifiedThought, ...]
    triggers: tuple[TriggerAt, ...]
    subgoal_steps: tuple[int, ...]  # the actions that completed a subgoal (for the timeline)

    @property
    def coverage(self) -> float | None:
        """Share of triggers followed by a thought; None when the episode had none."""
        return sum(t.covered for t in self.triggers) / len(self.triggers) if self.triggers else None

    @property
    def idle(self) -> int:
        """Thoughts at no trigger and no guess: recaps and reasons."""
        return sum(t.kinds == {ThoughtKind.OTHER} for t in self.thoughts)


def _room_places(episode: Episode) -> set[str]:
    """The receptacles the first observation names (`cabinet 3`)."""
    return {name for _, name in _kinds_named(episode.initial_observation.partition("Your task is to:")[0])}


def _is_location_guess(text: str, places: set[str], visited: set[str]) -> bool:
    """A guess (likely, may, ...) naming a kind of place of the room with an instance not yet visited."""
    open_kinds = {place.rpartition(" ")[0] for place in places - visited}
    return bool(GUESS.search(text)) and any(re.search(rf"\b{re.escape(kind)}s?\b", text.lower()) for kind in open_kinds)


def _needed(replay: Replay, progress: Progress) -> str | None:
    """The kind of object the task still has to find: its object, or for Look the lamp once held."""
    if replay.task_type is TaskType.LOOK and progress.held:
        return None if progress.lamp_seen else replay.parent
    known = progress.seen - (progress.placed if replay.task_type is TaskType.PICK_TWO else 0)
    return None if progress.held or known > 0 else replay.obj


def _guessed_kinds(text: str, places: set[str]) -> set[str]:
    return {kind for kind in {p.rpartition(" ")[0] for p in places} if re.search(rf"\b{re.escape(kind)}s?\b", text.lower())}


def episode_anatomy(episode: Episode, game: GameRef | None = None) -> EpisodeAnatomy:
    """Classify an episode's thoughts and find its triggers (the game is replayed from its file,
    `episode.game` unless given)."""
    replay = Replay(game or game_ref(Path(episode.game)))
    actions = episode.actions
    progress = dict(zip((a.step for a in actions), replay.progress(actions)))
    before = Progress()
    places, visited, observations = _room_places(episode), set(), [episode.initial_observation]
    triggers: dict[int, Trigger] = {}
    subgoals: list[int] = []
    thoughts: list[ClassifiedThought] = []
    false_claim_at: set[int] = set()
    guessed: set[str] = set()  # the kinds of place the latest guess named, until searched out or a subgoal is done
    visited_since_guess: set[str] = set()
    for index, entry in enumerate(episode.entries):
        previous = episode.entries[index - 1] if index else None
        if entry.kind is Kind.ACTION:
            now = progress[entry.step]
            visited |= {name for kind, name in _kinds_named(entry.text) if name in places}
            visited_since_guess |= {name for _, name in _kinds_named(entry.text) if name in places}
            searched_out = bool(guessed) and guessed <= {v.rpartition(" ")[0] for v in visited_since_guess}
            if now.advanced(before):
                triggers[entry.step] = Trigger.SUBGOAL
                subgoals.append(entry.step)
                guessed = set()
            elif entry.observation == NOTHING_HAPPENS or (searched_out and _needed(replay, now) is not None):
                triggers[entry.step] = Trigger.EXCEPTION
                guessed = set() if searched_out else guessed
            before = now
            observations.append(entry.observation)
            continue
        kinds = set()
        if not thoughts:
            kinds.add(ThoughtKind.DECOMPOSITION)
        if previous is not None and triggers.get(previous.step) is Trigger.SUBGOAL:
            kinds.add(ThoughtKind.SUBGOAL)
        if previous is not None and (triggers.get(previous.step) is Trigger.EXCEPTION or previous.step in false_claim_at):
            kinds.add(ThoughtKind.EXCEPTION)
        if _is_location_guess(entry.text, places, visited):
            kinds.add(ThoughtKind.LOCATION)
            guessed, visited_since_guess = _guessed_kinds(entry.text, places), set()
        if any(contradicted(claim, observations) for claim in found_claims(entry.text)):
            false_claim_at.add(entry.step)
        thoughts.append(ClassifiedThought(entry.step, entry.text, frozenset(kinds or {ThoughtKind.OTHER})))
    following = {e.step: episode.entries[i + 1].kind is Kind.THOUGHT
                 for i, e in enumerate(episode.entries[:-1])}  # the last line (often the win) has no next line
    return EpisodeAnatomy(episode, tuple(thoughts),
                          tuple(TriggerAt(step, kind, following[step]) for step, kind in triggers.items()
                                if step in following),
                          tuple(subgoals))


@dataclass(frozen=True)
class AnatomySummary:
    """A group's thought anatomy: shares of each kind, coverage of triggers, idle thoughts."""

    label: str
    episodes: int
    thoughts: int
    shares: dict[ThoughtKind, float]  # share of thoughts with each kind (a thought may count for several)
    coverage: dict[Trigger, float | None]  # share of triggers of each kind followed by a thought
    idle: float  # share of thoughts at no trigger and no guess

    @cached_property
    def row(self) -> list[str]:
        pct = lambda x: "–" if x is None else f"{x:.0%}"
        return [self.label, str(self.episodes), str(self.thoughts), *(pct(self.shares[k]) for k in ThoughtKind),
                *(pct(self.coverage[t]) for t in Trigger), pct(self.idle)]


SUMMARY_HEADER = ["", "episodes", "thoughts", *(k.value for k in ThoughtKind),
                  *(f"{t.value} covered" for t in Trigger), "idle"]


def summarize_anatomy(label: str, anatomies: Iterable[EpisodeAnatomy]) -> AnatomySummary:
    """Shares, coverage and idle thoughts over a group of episodes."""
    anatomies = list(anatomies)
    thoughts = [t for a in anatomies for t in a.thoughts]
    triggers = [t for a in anatomies for t in a.triggers]
    share = lambda hits, of: hits / of if of else None
    return AnatomySummary(
        label, len(anatomies), len(thoughts),
        {k: share(sum(k in t.kinds for t in thoughts), len(thoughts)) for k in ThoughtKind},
        {k: share(sum(t.covered for t in triggers if t.kind is k), sum(t.kind is k for t in triggers)) for k in Trigger},
        share(sum(a.idle for a in anatomies), len(thoughts)))
