"""Episode records: every thought and action with what the game said, one JSON line per episode.

Everything downstream of an episode (reports, resumption, the notebook) reads these records;
nothing re-runs a game to learn what happened in it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from sparse_react.errors import UserError
from sparse_react.lines import NOTHING_HAPPENS, Kind
from sparse_react.tasks import game_name

EPISODE_FORMAT = "sparse_react.episode/1"
EPISODES_FILE = "episodes.jsonl"  # a run folder's record: one JSON line per finished episode
INVALID_STREAK = 5  # trailing `Nothing happens.` actions that make a budget failure an invalid-action streak


class Failure(str, Enum):
    """Why an episode that was not won ended."""

    BUDGET = "budget"
    LOOP = "loop"
    INVALID_STREAK = "invalid_streak"
    CYCLE = "cycle"
    ERROR = "error"


class RecordError(UserError, ValueError):
    """A record file or line that cannot be read; the message names the file and line."""


@dataclass
class Entry:
    """One line of an episode: a thought (answered `OK.`) or an action and its observation."""

    step: int
    kind: Kind
    text: str
    observation: str
    wall_time: float = 0.0
    tokens: int | None = None
    mode: str | None = None  # how the policy chose an action: expert, scripted, scored, free, ...


@dataclass
class Episode:
    """One episode of one game. `won` is what the game said; nothing else counts as success."""

    game: str
    task_type: str
    task: str
    rhythm: str
    policy: str
    initial_observation: str
    prompt_variant: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)
    won: bool = False
    failure: Failure | None = None
    error: str | None = None
    wall_time: float = 0.0
    policy_spec: dict[str, Any] = field(default_factory=dict)  # the policy's identity: kind, model, weights' hash, settings
    traceback: str | None = None  # of the exception that ended an error episode

    @property
    def game_name(self) -> str:
        """The game's name (task folder/trial), the same wherever the game files sit: what pairs episodes across runs."""
        return self.settings.get("game_name") or game_name(self.game)

    @property
    def steered(self) -> bool:
        """A human edited or inserted a thought: the episode is not the policy's own."""
        return bool(self.settings.get("resumed_from")) or any(e.mode == "human" for e in self.entries)

    @property
    def actions(self) -> list[Entry]:
        return [e for e in self.entries if e.kind is Kind.ACTION]

    @property
    def thoughts(self) -> list[Entry]:
        return [e for e in self.entries if e.kind is Kind.THOUGHT]

    @property
    def invalid_actions(self) -> int:
        return sum(e.observation == NOTHING_HAPPENS for e in self.actions)

    @property
    def repeated_actions(self) -> int:
        """Actions that repeat the previous action with the same observation."""
        acts = self.actions
        return sum((a.text, a.observation) == (b.text, b.observation) for a, b in zip(acts, acts[1:]))

    @property
    def thought_density(self) -> float:
        return len(self.thoughts) / len(self.entries) if self.entries else 0.0

    @property
    def tokens(self) -> int | None:
        known = [e.tokens for e in self.entries if e.tokens is not None]
        return sum(known) if known else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["format"] = EPISODE_FORMAT
        data["failure"] = self.failure.value if self.failure else None
        for entry in data["entries"]:
            entry["kind"] = entry["kind"].value
        data["counts"] = {
            "actions": len(self.actions),
            "thoughts": len(self.thoughts),
            "invalid_actions": self.invalid_actions,
            "repeated_actions": self.repeated_actions,
            "steps": len(self.entries),
        }
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Episode":
        if data.get("format") != EPISODE_FORMAT:
            raise RecordError(f"not a {EPISODE_FORMAT} record (format={data.get('format')!r})")
        data = {k: v for k, v in data.items() if k not in ("format", "counts")}
        entries = [Entry(**{**e, "kind": Kind(e["kind"])}) for e in data.pop("entries")]
        failure = Failure(data.pop("failure")) if data.get("failure") else None
        data.pop("failure", None)
        return cls(**data, entries=entries, failure=failure)


def classify_failure(episode: Episode, ended_by: Failure) -> Failure:
    """Name a failed episode: an error or a loop as such; a budget ending whose last actions all
    did nothing is an invalid-action streak, one whose last actions go round a cycle a cycle."""
    if ended_by is Failure.BUDGET:
        tail = episode.actions[-INVALID_STREAK:]
        if len(tail) == INVALID_STREAK and all(a.observation == NOTHING_HAPPENS for a in tail):
            return Failure.INVALID_STREAK
        if ending_cycle(episode):
            return Failure.CYCLE
    return ended_by


def ending_cycle(episode: Episode) -> list[str] | None:
    """The commands the episode's last actions go round (`go to A`, `go to B`, ...), when the last
    two turns of a cycle of two or more different commands were the same commands with the same
    observations (the A–B–A–B the three-repeats loop rule misses); thoughts between them do not
    count. None when the episode does not end so."""
    acts = [(a.text, a.observation) for a in episode.actions]
    for period in range(2, len(acts) // 2 + 1):
        turn = acts[-period:]
        if acts[-2 * period:-period] == turn and len(set(turn)) > 1:
            return [command for command, _ in turn]
    return None


def failure_class(episode: Episode) -> Failure | None:
    """The episode's failure class by today's rules, from its record alone (a budget ending
    recorded before a class existed is classified again)."""
    if episode.failure in (Failure.BUDGET, Failure.INVALID_STREAK, Failure.CYCLE):
        return classify_failure(episode, Failure.BUDGET)
    return episode.failure


def append_episode(path: str | Path, episode: Episode) -> None:
    """Append one episode as a JSON line and flush it to disk."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(json.dumps(episode.to_dict()) + "\n")
        handle.flush()


def read_episodes(path: str | Path) -> list[Episode]:
    """Read every episode of a JSONL record file; RecordError names the file and line of a bad one."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise RecordError(f"record file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecordError(f"cannot read {path}: {exc}") from None
    episodes = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            episodes.append(Episode.from_dict(json.loads(line)))
        except (json.JSONDecodeError, RecordError, TypeError, ValueError, KeyError) as exc:
            raise RecordError(f"{path}, line {number}: not an episode record ({exc})") from None
    return episodes

