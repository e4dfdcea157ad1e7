"""What each page shows, computed from the records with the report's own functions; the templates
only lay it out."""

from __future__ import annotations

import base64
import difflib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from sparse_react.lines import NOTHING_HAPPENS, Kind
from sparse_react.report import (
    COLUMNS, MEASURES, GroupStats, PairedComparison, measure_rows, paired_groups, success_rows, summarize, write_plots)
from sparse_react.tasks import TaskType
from sparse_react.trajectory import Entry, Episode, Failure, ending_cycle
from sparse_react.view.records import Run

OUTCOMES = ("won", "lost")
DEFAULT_LOOP_REPEATS = 3  # LoopRules' default, for records that do not say


def task_column(task_type: str) -> str:
    """The paper's short name of a task type (Pick, Clean, ...), or the raw value if unknown."""
    try:
        return TaskType(task_type).column
    except ValueError:
        return task_type


def outcome(episode: Episode) -> str:
    return "won" if episode.won else "lost"


@dataclass
class RunsPage:
    """The Runs page: the report's success table, game-by-game pairs and measures, its plots, and
    each run's bad lines."""

    runs: list[Run]
    columns: tuple[str, ...]
    success: list[list[str]]
    groups: list[GroupStats]
    plots: dict[str, str]  # name -> data: URI of the PNG
    pairs: list[PairedComparison]

    @property
    def measures(self) -> list[list[str]]:
        return measure_rows(self.groups)

    def run_index(self, label: str) -> str:
        return next(str(r.index) for r in self.runs if r.label == label)

    @property
    def measure_names(self) -> tuple[str, ...]:
        return MEASURES


_PLOT_CACHE: dict[tuple, dict[str, str]] = {}


def _plots(groups: list[GroupStats], key: tuple) -> dict[str, str]:
    """The report's PNG plots as data URIs, drawn once per state of the records."""
    if key not in _PLOT_CACHE:
        with tempfile.TemporaryDirectory() as folder:
            paths = write_plots(groups, Path(folder))
            _PLOT_CACHE.clear()
            _PLOT_CACHE[key] = {name: "data:image/png;base64," + base64.b64encode(p.read_bytes()).decode()
                                for name, p in paths.items()}
    return _PLOT_CACHE[key]


def runs_page(runs: list[Run]) -> RunsPage:
    """Success by task type per run and rhythm, exactly as `sparse-react report` computes it."""
    report_runs = [(run.label, run.episodes) for run in runs if run.episodes]
    groups = summarize(report_runs)
    key = tuple((r.label, len(r.episodes), tuple(r.lines)) for r in runs)
    return RunsPage(runs, COLUMNS, success_rows(groups), groups, _plots(groups, key) if groups else {},
                    paired_groups(report_runs))


@dataclass(frozen=True)
class Filters:
    """The Episodes page's filters; empty strings mean 'any'."""

    run: str = ""
    rhythm: str = ""
    task: str = ""
    outcome: str = ""
    failure: str = ""
    q: str = ""

    def keeps(self, run: Run, episode: Episode) -> bool:
        q = self.q.strip().lower()
        return ((not self.run or self.run == str(run.index)) and (not self.rhythm or self.rhythm == episode.rhythm)
                and (not self.task or self.task == episode.task_type)
                and (not self.outcome or self.outcome == outcome(episode))
                and (not self.failure or self.failure == (episode.failure.value if episode.failure else ""))
                and (not q or any(q in e.text.lower() for e in episode.thoughts)))


@dataclass(frozen=True)
class EpisodeRow:
    run: Run
    index: int
    episode: Episode

    @property
    def game_name(self) -> str:
        return self.episode.game_name


@dataclass
class EpisodesPage:
    """The filtered list, with counts, the choices each filter offers, and bad lines as error rows."""

    filters: Filters
    rows: list[EpisodeRow]
    total: int
    runs: list[Run]
    choices: dict[str, list[tuple[str, str]]]

    @property
    def won(self) -> int:
        return sum(r.episode.won for r in self.rows)


def episodes_page(runs: list[Run], filters: Filters) -> EpisodesPage:
    everything = [EpisodeRow(run, i, e) for run in runs for i, e in enumerate(run.episodes)]
    episodes = [r.episode for r in everything]
    choices = {
        "run": [(str(r.index), r.label) for r in runs],
        "rhythm": [(x, x) for x in dict.fromkeys(e.rhythm for e in episodes)],
        "task": [(t.value, t.column) for t in TaskType],
        "outcome": [(x, x) for x in OUTCOMES],
        "failure": [(f.value, f.value) for f in Failure],
    }
    rows = [r for r in everything if filters.keeps(r.run, r.episode)]
    return EpisodesPage(filters, rows, len(everything), runs, choices)


@dataclass(frozen=True)
class EntryView:
    """One entry as the episode page shows it: a thought set apart, or an action with its answer."""

    entry: Entry
    nothing_happens: bool
    in_loop: bool

    @property
    def thought(self) -> bool:
        return self.entry.kind is Kind.THOUGHT


def entry_views(episode: Episode) -> list[EntryView]:
    """Every entry, marking `Nothing happens.` and the repeated actions the loop check ended on (or
    the rounds of the cycle it ended in)."""
    looped: set[int] = set()
    if episode.failure is Failure.LOOP:
        repeats = int(episode.settings.get("loop_repeats") or DEFAULT_LOOP_REPEATS)
        looped = {e.step for e in episode.entries[-repeats:]}
    elif episode.failure is Failure.CYCLE and (cycle := ending_cycle(episode)):  # its last two rounds
        looped = {e.step for e in episode.actions[-2 * len(cycle):]}
    return [EntryView(e, e.kind is Kind.ACTION and e.observation == NOTHING_HAPPENS, e.step in looped)
            for e in episode.entries]


def same_game(runs: Iterable[Run], episode: Episode) -> list[EpisodeRow]:
    """Every episode of the same game, in any run or rhythm."""
    return [EpisodeRow(run, i, e) for run in runs for i, e in enumerate(run.episodes) if e.game == episode.game]


@dataclass(frozen=True)
class AlignedRow:
    """One row of the side-by-side view: an entry of each episode (or None where one has no
    counterpart); `same` when both wrote the same line, `parting` on the first action that differs."""

    left: EntryView | None
    right: EntryView | None
    same: bool
    parting: bool = False


@dataclass
class ComparePage:
    left: EpisodeRow
    right: EpisodeRow
    rows: list[AlignedRow] = field(default_factory=list)
    parting_step: int | None = None  # the left episode's step where the action paths part


def _key(entry: Entry) -> tuple[str, str]:
    return (entry.kind.value, entry.text.strip().lower())


def align(left: Episode, right: Episode) -> list[AlignedRow]:
    """Line the two episodes up with difflib: equal runs side by side, differing blocks padded."""
    a, b = entry_views(left), entry_views(right)
    rows: list[AlignedRow] = []
    matcher = difflib.SequenceMatcher(None, [_key(v.entry) for v in a], [_key(v.entry) for v in b], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            rows += [AlignedRow(x, y, True) for x, y in zip(a[i1:i2], b[j1:j2])]
            continue
        left_block, right_block = a[i1:i2], b[j1:j2]
        for n in range(max(len(left_block), len(right_block))):
            rows.append(AlignedRow(left_block[n] if n < len(left_block) else None,
                                   right_block[n] if n < len(right_block) else None, False))
    return _mark_parting(rows, left, right)


def _mark_parting(rows: list[AlignedRow], left: Episode, right: Episode) -> list[AlignedRow]:
    """Mark the row holding the first action where the two action paths differ."""
    pairs = list(zip([e.text for e in left.actions], [e.text for e in right.actions]))
    first = next((n for n, (x, y) in enumerate(pairs) if x != y), None)
    if first is None and len(left.actions) != len(right.actions):
        first = len(pairs)
    if first is None:
        return rows
    targets = [side[first] for side in (left.actions, right.actions) if first < len(side)]
    for n, row in enumerate(rows):
        if any(view is not None and any(view.entry is t for t in targets) for view in (row.left, row.right)):
            rows[n] = AlignedRow(row.left, row.right, row.same, True)
            break
    return rows


def compare_page(left: EpisodeRow, right: EpisodeRow) -> ComparePage:
    rows = align(left.episode, right.episode)
    parting = next((r for r in rows if r.parting), None)
    step = None if parting is None else (parting.left or parting.right).entry.step
    return ComparePage(left, right, rows, step)
