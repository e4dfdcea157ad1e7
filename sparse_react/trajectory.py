"""Episode records: every thought and action with what the game said, one JSON line per episode.

Everything downstream of an episode (reports, resumption, the notebook) reads these records;
nothing re-runs a game to learn what happened in it.
"""

from __future__ import annotations

import fcntl
import json
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Iterator, TextIO

from pydantic import BeforeValidator, ConfigDict, TypeAdapter, ValidationError, with_config
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict  # pydantic reads typing.TypedDict only from Python 3.12

from sparse_react.errors import UserError
from sparse_react.household.tasks import game_name
from sparse_react.lines import NOTHING_HAPPENS, Kind
from sparse_react.schema import first_error

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


STRICT = ConfigDict(strict=True)  # a record's types are checked as written: "yes" is not a bool, "3" not an int
OPEN = ConfigDict(strict=True, extra="allow")  # known keys are checked, others kept as they are


@with_config(OPEN)
class ResumedFrom(TypedDict, total=False):
    """Where a steered episode came from: the record, episode and step a human edited."""

    record: str
    episode: int
    step: int
    insert: bool


@with_config(OPEN)
class EpisodeSettings(TypedDict, total=False):
    """The loop's rules an episode was played under, and what resumption or relabelling added."""

    max_steps: int
    thoughts_count: bool
    loop_repeats: int
    game_name: str
    resumed_from: ResumedFrom


@with_config(STRICT)
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


@with_config(STRICT)
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
    settings: EpisodeSettings = field(default_factory=dict)
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


@contextmanager
def record_lock(path: str | Path) -> Iterator[TextIO]:
    """The record file open for appending, under the one lock every writer takes (eval, resume, the view).

    The lock is the file's own (flock), so no lock file is left beside the record, and the kernel
    lets go of it when a writer dies. Under the lock nobody is writing, so a last line without its
    end of line was cut off by a writer that died: it is dropped (it never was a finished episode)
    rather than left to swallow the next one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        _drop_cut_line(path)
        yield handle


def _drop_cut_line(path: Path, chunk: int = 1 << 16) -> None:
    with path.open("rb+") as handle:
        end = position = handle.seek(0, 2)
        while position > 0:
            start = max(0, position - chunk)
            handle.seek(start)
            tail = handle.read(position - start)
            if position == end and tail.endswith(b"\n"):
                return
            if (newline := tail.rfind(b"\n")) >= 0:
                handle.truncate(start + newline + 1)
                return
            position = start
        handle.truncate(0)


def write_episode(handle: TextIO, episode: Episode) -> None:
    """Write one episode as a JSON line to a record held with `record_lock`, and flush it to disk."""
    handle.write(json.dumps(episode.to_dict()) + "\n")
    handle.flush()


def append_episode(path: str | Path, episode: Episode) -> None:
    """Append one episode as a JSON line under the record's lock, and flush it to disk."""
    with record_lock(path) as handle:
        write_episode(handle, episode)


@dataclass(frozen=True)
class BadLine:
    """A line of a record file that is not an episode: where it is, which field is wrong, and why."""

    path: Path
    line: int
    message: str
    field: str = ""

    def __str__(self) -> str:
        return f"{self.path}, line {self.line}: " + (f"{self.field}: " if self.field else "") + self.message


@dataclass
class Records:
    """What a record file holds: its episodes in file order, each one's line, and the lines that are not episodes."""

    path: Path
    episodes: list[Episode] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    bad: list[BadLine] = field(default_factory=list)


def _check_format(value: Any) -> Any:
    if isinstance(value, dict) and value.get("format") != EPISODE_FORMAT:
        got = repr(value.get("format"))[:60]
        raise PydanticCustomError("format", f"not a {EPISODE_FORMAT} record (format={got})")
    return value


@cache
def _episode_schema() -> TypeAdapter:
    return TypeAdapter(Annotated[Episode, BeforeValidator(_check_format)])


def parse_episode(line: str | bytes, path: Path | str = "", number: int = 0) -> Episode | BadLine:
    """One record line as an Episode, its types checked as written; a BadLine naming the field when it is not one."""
    try:
        return _episode_schema().validate_json(line)
    except ValidationError as exc:
        field, message = first_error(exc)
        return BadLine(Path(path), number, message, field)


def read_records(path: str | Path) -> Records:
    """Read a JSONL record file line by line, keeping every episode and naming every line that is not one.

    A bad line (not JSON, not UTF-8, nested too deep, a field of the wrong type) costs only itself,
    and a cut-off last line is named as unfinished (an episode still being written). RecordError only when
    the file itself cannot be read."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RecordError(f"record file not found: {path}") from None
    except OSError as exc:
        raise RecordError(f"cannot read {path}: {exc}") from None
    records = Records(path)
    lines = data.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            line.decode()
        except UnicodeDecodeError as exc:
            records.bad.append(BadLine(path, number, f"not UTF-8 (byte {line[exc.start]:#04x} at column {exc.start + 1})"))
            continue
        parsed = parse_episode(line, path, number)
        if isinstance(parsed, BadLine) and number == len(lines):  # no end of line: cut off, or still being written
            records.bad.append(BadLine(path, number, "unfinished: no end of line yet (still being written, or cut off)"))
        elif isinstance(parsed, BadLine):
            records.bad.append(parsed)
        else:
            records.episodes.append(parsed)
            records.lines.append(number)
    return records


def read_episodes(path: str | Path) -> list[Episode]:
    """Every episode of a JSONL record file; RecordError naming the file, line and field of the first bad line."""
    records = read_records(path)
    if records.bad:
        raise RecordError(f"{records.bad[0]}: not an episode record")
    return records.episodes
