"""The run folders a view may read: addressed by their position on the command line, never by a
path from a request. Each record is read once and read again when its file changes, so a run that
is still being written shows its new episodes on reload."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Sequence

from sparse_react.anatomy import EpisodeAnatomy, episode_anatomy
from sparse_react.errors import UserError
from sparse_react.report import run_labels
from sparse_react.evaluation import SETTINGS_FILE
from sparse_react.trajectory import EPISODES_FILE, BadLine, Episode, RecordError, failure_class, read_records


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

    @cached_property
    def search_texts(self) -> list[str]:
        """Per episode, what the Episodes page's search looks in, lower-cased: read once per record state."""
        return [search_text(e) for e in self.episodes]

    def anatomy(self, index: int) -> EpisodeAnatomy | None:
        """Episode `index`'s thought anatomy (its game replayed once), or None when its game cannot be replayed here."""
        cache = self.__dict__.setdefault("_anatomies", {})
        if index not in cache:
            try:
                cache[index] = episode_anatomy(self.episodes[index])
            except (UserError, OSError):
                cache[index] = None
        return cache[index]

    @cached_property
    def thought_kinds(self) -> list[frozenset[str]]:
        """Per episode, the kinds of its thoughts: the first filter by kind replays every game once."""
        return [frozenset(k.value for t in (a.thoughts if a else ()) for k in t.kinds)
                for a in map(self.anatomy, range(len(self.episodes)))]

    @cached_property
    def by_game(self) -> dict[str, list[int]]:
        """The episodes of each game (by game name), in file order."""
        games: dict[str, list[int]] = {}
        for i, episode in enumerate(self.episodes):
            games.setdefault(episode.game_name, []).append(i)
        return games


SEARCH_SEPARATOR = "\x00"  # between the searched fields, so no match spans two of them


def search_text(episode: Episode) -> str:
    """The game's name, the task, every thought, action and observation of an episode, lower-cased."""
    texts = [episode.game_name, episode.task]
    for entry in episode.entries:
        texts += (entry.text, entry.observation)
    return SEARCH_SEPARATOR.join(str(t) for t in texts if t).lower()


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
    """Read a run's record, keeping every good episode and naming every bad line (its line and field)."""
    run = Run(index, source.label, source.folder, source.record)
    if not source.record.exists():  # an evaluation that has not finished its first episode
        return run
    try:
        records = read_records(source.record)
    except RecordError as exc:
        run.bad.append(BadLine(source.record, 0, str(exc)))
        return run
    for episode in records.episodes:
        episode.failure = failure_class(episode)  # a record made before a class existed, by today's rules
    run.episodes, run.lines, run.bad = records.episodes, records.lines, records.bad
    return run


RecordState = tuple[int, int, int, int] | None


def record_state(path: Path) -> RecordState:
    """What tells a changed record file from an unchanged one: inode, size and modification and
    change times in nanoseconds (an append always changes the size); None when it cannot be seen."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class RunSet:
    """The runs named on the command line; the only files a view reads or writes.

    Each run is read once and kept with its record file's state (`record_state`); a page that
    finds the file changed (an evaluation appended an episode, a steer added one) reads it again.
    `cache=False` reads every run afresh on every call, as the view did before."""

    def __init__(self, paths: Sequence[Path | str], cache: bool = True) -> None:
        self.sources = run_sources(paths)
        self.cache = cache
        self._held: dict[int, tuple[RecordState, Run]] = {}
        self._lock = threading.Lock()

    def runs(self) -> list[Run]:
        return [self.run(i) for i in range(len(self.sources))]

    def run(self, index: int) -> Run:
        if not 0 <= index < len(self.sources):
            raise LookupError(f"no run {index}: {len(self.sources)} runs are open")
        source = self.sources[index]
        state = record_state(source.record)  # before reading: a line appended meanwhile is read on the next page
        with self._lock:
            held = self._held.get(index)
        if self.cache and held is not None and held[0] == state:
            return held[1]
        run = read_run(index, source)
        if self.cache:
            with self._lock:
                self._held[index] = (state, run)
        return run

    def episode(self, run_index: int, index: int) -> tuple[Run, Episode]:
        run = self.run(run_index)
        if not 0 <= index < len(run.episodes):
            raise LookupError(f"no episode {index} in run {run.label}: it holds {len(run.episodes)}")
        return run, run.episodes[index]
