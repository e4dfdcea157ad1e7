"""The run folders a view may read: addressed by their position on the command line, never by a
path from a request, and read afresh on every page so a run that is still being written shows its
new episodes on reload."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from sparse_react.report import run_labels
from sparse_react.evaluation import SETTINGS_FILE
from sparse_react.trajectory import EPISODES_FILE, Episode, RecordError, failure_class


@dataclass(frozen=True)
class BadLine:
    """A record line that is not an episode: shown as an error row, the rest of the run still shows."""

    line: int
    message: str


@dataclass
class Run:
    """One named run: its label, its record file, its episodes (in file order) and its bad lines."""

    index: int
    label: str
    folder: Path
    record: Path
    episodes: list[Episode] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)  # the record line of each episode
    bad: list[BadLine] = field(default_factory=list)

    @property
    def settings(self) -> dict:
        """The run's settings.json (what `eval` was asked), or {} for a loose record file."""
        path = self.folder / SETTINGS_FILE
        try:
            return json.loads(path.read_text()) if path.is_file() else {}
        except (OSError, json.JSONDecodeError):
            return {}


@dataclass(frozen=True)
class RunSource:
    """A run folder (holding episodes.jsonl) or a loose .jsonl record, as named on the command line."""

    label: str
    folder: Path
    record: Path


def run_sources(paths: Sequence[Path | str]) -> list[RunSource]:
    """Check every path names a run folder or a record file; RecordError names the first that does not."""
    if not paths:
        raise RecordError("name at least one run folder")
    sources = []
    for raw, label in zip(paths, run_labels(paths)):
        path = Path(raw).resolve()
        if path.is_dir():
            record = path / EPISODES_FILE
            if not record.is_file() and not (path / SETTINGS_FILE).is_file():  # settings alone: an eval just begun
                raise RecordError(f"{raw}: no {EPISODES_FILE} in this run folder")
            folder = path
        elif path.is_file():
            record, folder = path, path.parent
        else:
            raise RecordError(f"{raw}: no such run folder or record file")
        sources.append(RunSource(label, folder, record))
    return sources


def read_run(index: int, source: RunSource) -> Run:
    """Read a run's record line by line, keeping every good episode and naming every bad line."""
    run = Run(index, source.label, source.folder, source.record)
    if not source.record.exists():  # an evaluation that has not finished its first episode
        return run
    try:
        text = source.record.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        run.bad.append(BadLine(0, f"cannot read {source.record}: {exc}"))
        return run
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if number == len(lines):  # no newline yet: an episode still being written
            run.bad.append(BadLine(number, f"{source.record}, line {number}: still being written"))
            continue
        try:
            episode = Episode.from_dict(json.loads(line))
            episode.failure = failure_class(episode)  # a record made before a class existed, by today's rules
            run.episodes.append(episode)
            run.lines.append(number)
        except (json.JSONDecodeError, RecordError, TypeError, ValueError, KeyError, AttributeError) as exc:
            run.bad.append(BadLine(number, f"{source.record}, line {number}: not an episode record ({exc})"))
    return run


class RunSet:
    """The runs named on the command line; the only files a view reads or writes."""

    def __init__(self, paths: Sequence[Path | str]) -> None:
        self.sources = run_sources(paths)

    def runs(self) -> list[Run]:
        return [read_run(i, s) for i, s in enumerate(self.sources)]

    def run(self, index: int) -> Run:
        if not 0 <= index < len(self.sources):
            raise LookupError(f"no run {index}: {len(self.sources)} runs are open")
        return read_run(index, self.sources[index])

    def episode(self, run_index: int, index: int) -> tuple[Run, Episode]:
        run = self.run(run_index)
        if not 0 <= index < len(run.episodes):
            raise LookupError(f"no episode {index} in run {run.label}: it holds {len(run.episodes)}")
        return run, run.episodes[index]
