"""Editing a thought and resuming an episode (the paper's human-in-the-loop experiment).

The episode is kept up to the edited step, the new thought replaces (or is inserted before) that
step, the recorded lines before it are replayed in a fresh game, checking that every observation
matches the record, and then the policy carries on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from sparse_react.agent import Context, Decision, LoopRules, Policy, Request, run_episode
from sparse_react.household.catalog import game_ref
from sparse_react.household.env import HouseholdEnv
from sparse_react.lines import THOUGHT_REPLY, Kind, is_thought, thought_line, thought_text
from sparse_react.rhythms import get_rhythm
from sparse_react.trajectory import Entry, Episode, RecordError, read_records


@dataclass
class ReplayPolicy:
    """Sends recorded lines first (with the mode and tokens they were recorded with, so a resumed
    model episode keeps its token counts and an edited thought stays marked `human`), noting every
    replayed action whose observation differs, then hands over to `then`."""

    lines: list[Entry]
    then: Policy
    mismatches: list[int] = field(default_factory=list)
    _next: int = 0

    @property
    def name(self) -> str:
        return self.then.name

    @property
    def batched(self) -> bool:
        return False

    def spec(self) -> dict:
        return self.then.spec()

    def start(self, context: Context) -> None:
        self._next = 0
        self.mismatches = []
        self.then.start(context)

    def end(self, context: Context) -> None:
        self.then.end(context)

    def decide(self, requests: Sequence[Request]) -> list[Decision | Exception]:
        (context, admissible), = requests
        if 0 < self._next <= len(self.lines):
            sent = self.lines[self._next - 1]
            if sent.kind is Kind.ACTION and context.last_observation != sent.observation:
                self.mismatches.append(sent.step)
        self._next += 1
        if self._next <= len(self.lines):
            entry = self.lines[self._next - 1]
            line = thought_line(entry.text) if entry.kind is Kind.THOUGHT else entry.text
            return [Decision(line, entry.mode if entry.mode == "human" else "replay", entry.tokens)]
        return self.then.decide(requests)


def edited_lines(episode: Episode, step: int, thought: str, insert: bool) -> list[Entry]:
    """The entries to replay: those before `step`, then the new thought."""
    if not 1 <= step <= len(episode.entries) + (1 if insert else 0):
        raise RecordError(f"step {step} is out of range: the episode has {len(episode.entries)} steps")
    if not insert and episode.entries[step - 1].kind is not Kind.THOUGHT:
        raise RecordError(f"step {step} is an action ({episode.entries[step - 1].text!r}), not a thought: "
                          "insert a thought before it instead")
    thought = thought.strip()
    thought = thought_text(thought) if is_thought(thought) else thought
    if not thought:
        raise RecordError("the new thought is empty")
    if insert:  # an edit keeps a thought where one was; an insert must be one the rhythm allows there
        get_rhythm(episode.rhythm).check(Kind.THOUGHT, episode.entries[step - 2].kind if step > 1 else None)
    return [*episode.entries[: step - 1], Entry(step, Kind.THOUGHT, thought, THOUGHT_REPLY, mode="human")]


def load_episode(record: str | Path, index: int) -> Episode:
    """Episode `index` (0-based, counting episodes, not lines that are not episodes) of a record file;
    RecordError when there is no such episode."""
    records = read_records(record)
    if not 0 <= index < len(records.episodes):
        bad = f" ({len(records.bad)} lines are not episodes; the first: {records.bad[0]})" if records.bad else ""
        raise RecordError(f"episode {index} is out of range: {record} holds {len(records.episodes)} episodes{bad}")
    return records.episodes[index]


def resume(record: str | Path, index: int, step: int, thought: str, policy: Policy,
           insert: bool = False, old: Episode | None = None) -> tuple[Episode, list[int]]:
    """Resume episode `index` (0-based) of a record file after editing (or inserting) a thought.

    `old` is that episode when the caller has already read it. Returns the new episode and the
    steps whose replayed observation differed from the record. Nothing is written; bad input
    raises RecordError before anything runs.
    """
    old = old or load_episode(record, index)
    lines = edited_lines(old, step, thought, insert)
    game = game_ref(Path(old.game))
    replay = ReplayPolicy(lines, policy)
    rules = LoopRules(**{k: v for k, v in old.settings.items() if k in LoopRules.__dataclass_fields__})
    episode = run_episode(HouseholdEnv([game]), replay, game, old.rhythm, old.prompt_variant, rules)
    episode.settings["resumed_from"] = {"record": str(record), "episode": index, "step": step,
                                        "insert": insert, "mismatches": replay.mismatches}
    return episode, replay.mismatches
