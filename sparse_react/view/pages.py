"""What each page shows, computed from the records with the report's own functions; the templates
only lay it out."""

from __future__ import annotations

import base64
import difflib
import tempfile
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable

from sparse_react.anatomy import EpisodeAnatomy, ThoughtKind
from sparse_react.household.tasks import TaskType
from sparse_react.lines import NOTHING_HAPPENS, Kind
from sparse_react.report import (
    COLUMNS,
    MEASURES,
    GroupStats,
    PairedComparison,
    measure_rows,
    paired_groups,
    success_rows,
    summarize,
    write_plots,
)
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

    @cached_property
    def measures(self) -> list[list[str]]:
        return measure_rows(self.groups)

    @cached_property
    def p_values(self) -> list[float]:
        """Each pair's exact McNemar p (worked out once: it sums binomials over every game only one won)."""
        return [pair.p_value for pair in self.pairs]

    @cached_property
    def steered(self) -> dict[int, int]:
        """Per run (by index), the episodes a human steered."""
        return {run.index: sum(e.steered for e in run.episodes) for run in self.runs}

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


_RUNS_PAGE: list[tuple[list[Run], RunsPage]] = []  # the last page and the runs (as read) it was computed from


def runs_page(runs: list[Run]) -> RunsPage:
    """Success by task type per run and rhythm, exactly as `sparse-react report` computes it;
    computed once per state of the records (the runs as RunSet last read them)."""
    if _RUNS_PAGE and len(_RUNS_PAGE[0][0]) == len(runs) and all(a is b for a, b in zip(_RUNS_PAGE[0][0], runs)):
        return _RUNS_PAGE[0][1]
    report_runs = [(run.label, run.episodes) for run in runs if run.episodes]
    groups = summarize(report_runs)
    key = tuple((r.label, len(r.episodes), tuple(r.lines)) for r in runs)
    page = RunsPage(runs, COLUMNS, success_rows(groups), groups, _plots(groups, key) if groups else {},
                    paired_groups(report_runs))
    _RUNS_PAGE[:] = [(runs, page)]
    return page


@dataclass(frozen=True)
class Filters:
    """The Episodes page's filters; empty strings mean 'any'. `q` is looked for (ignoring case) in
    the game's name, the task, and every thought, action and observation; `game` is one game's name."""

    run: str = ""
    rhythm: str = ""
    task: str = ""
    outcome: str = ""
    failure: str = ""
    game: str = ""
    thought: str = ""  # a thought kind (anatomy): episodes with a thought of that kind
    q: str = ""

    def keeps(self, row: "EpisodeRow") -> bool:
        run, episode, q = row.run, row.episode, self.q.strip().lower()
        return ((not self.run or self.run == str(run.index)) and (not self.rhythm or self.rhythm == episode.rhythm)
                and (not self.task or self.task == episode.task_type)
                and (not self.outcome or self.outcome == outcome(episode))
                and (not self.failure or self.failure == (episode.failure.value if episode.failure else ""))
                and (not self.game or self.game == episode.game_name)
                and (not self.thought or self.thought in run.thought_kinds[row.index])
                and (not q or q in run.search_texts[row.index]))

    def query(self) -> dict[str, str]:
        """The filters that are set, as a link's query parameters."""
        return {name: value for name, value in vars(self).items() if value}


@dataclass(frozen=True)
class EpisodeRow:
    run: Run
    index: int
    episode: Episode

    @property
    def game_name(self) -> str:
        return self.episode.game_name


PAGE_SIZE = 100  # episodes per page of the Episodes list
OTHERS_SHOWN = 24  # episodes of the same game an episode page links to side by side; the rest are a filtered list away


def _tokens(row: EpisodeRow) -> int | None:
    return row.episode.tokens


def _outcome_text(row: EpisodeRow) -> str:
    failure = row.episode.failure
    return outcome(row.episode) + (f": {failure.value}" if failure and not row.episode.won else "")


# column -> (header, sort key); a key of None sorts last whichever the direction
COLUMN_SORTS: dict[str, tuple[str, Callable[[EpisodeRow], Any]]] = {
    "run": ("run", lambda r: r.run.index),
    "index": ("#", lambda r: r.index),
    "game": ("game", lambda r: r.game_name),
    "task": ("task", lambda r: task_column(r.episode.task_type)),
    "rhythm": ("rhythm", lambda r: r.episode.rhythm),
    "outcome": ("outcome", _outcome_text),
    "steps": ("steps", lambda r: len(r.episode.entries)),
    "thoughts": ("thoughts", lambda r: len(r.episode.thoughts)),
    "tokens": ("tokens", _tokens),
    "time": ("time (s)", lambda r: r.episode.wall_time),
}


@dataclass(frozen=True)
class Sort:
    """A column to sort the Episodes list by (`?sort=steps`, or `?sort=-steps` for descending);
    the sort is stable, so rows that tie keep run and file order. Empty: run and file order."""

    column: str = ""
    descending: bool = False

    @classmethod
    def parse(cls, text: str) -> "Sort":
        column = text.strip().lstrip("-")
        return cls(column, text.strip().startswith("-")) if column in COLUMN_SORTS else cls()

    def __str__(self) -> str:
        return ("-" if self.descending else "") + self.column if self.column else ""

    def apply(self, rows: list[EpisodeRow]) -> list[EpisodeRow]:
        if not self.column:
            return rows
        key = COLUMN_SORTS[self.column][1]
        keyed = [(key(r), r) for r in rows]
        known = sorted((k for k in keyed if k[0] is not None), key=lambda k: k[0], reverse=self.descending)
        return [r for _, r in known] + [r for k, r in keyed if k is None]

    def toggled(self, column: str) -> "Sort":
        """What a column's header links to: ascending, or descending when already sorted ascending by it."""
        return Sort(column, self.column == column and not self.descending)


@dataclass
class EpisodesPage:
    """One page of the filtered, sorted list, with counts over every matching episode, the choices
    each filter offers, and bad lines as error rows (on the first page)."""

    filters: Filters
    rows: list[EpisodeRow]  # this page's rows
    matching: int
    won: int
    total: int
    runs: list[Run]
    choices: dict[str, list[tuple[str, str]]]
    sort: Sort = field(default_factory=Sort)
    number: int = 1
    pages: int = 1
    first: int = 0  # the position (from 0) of this page's first row among the matching ones

    @property
    def lost(self) -> int:
        return self.matching - self.won

    def link(self, links: Any, number: int | None = None, sort: Sort | None = None, **filters: str) -> str:
        """A link to another page of this list, or to the list sorted or filtered otherwise (from its
        first page), keeping the other filters and the sort."""
        query = {k: v for k, v in {**self.filters.query(), **filters}.items() if v}
        sort = self.sort if sort is None else sort
        if str(sort):
            query["sort"] = str(sort)
        if number is not None and number > 1:
            query["page"] = str(number)
        return links.episodes(**query)

    @property
    def page_numbers(self) -> list[int | None]:
        """The page links to show: the first, the last and those near this one; None for a gap."""
        near = {1, self.pages, *range(max(1, self.number - 2), min(self.pages, self.number + 2) + 1)}
        shown: list[int | None] = []
        for n in sorted(near):
            if shown and n - (shown[-1] or 0) > 1:
                shown.append(None)
            shown.append(n)
        return shown

    @property
    def columns(self) -> list[tuple[str, str]]:
        return [(name, header) for name, (header, _) in COLUMN_SORTS.items()]


def page_number(text: str) -> int:
    """`?page=` as a page number from 1; anything else is the first page."""
    return int(text) if text.isdigit() and int(text) > 0 else 1


_ROWS: list[tuple[list[Run], list[EpisodeRow], list[str]]] = []  # the last runs (as read), their rows and rhythms


def _all_rows(runs: list[Run]) -> tuple[list[EpisodeRow], list[str]]:
    """Every episode's row in run and file order, and the rhythms they hold: made once per state of the records."""
    if not (_ROWS and len(_ROWS[0][0]) == len(runs) and all(a is b for a, b in zip(_ROWS[0][0], runs))):
        rows = [EpisodeRow(run, i, e) for run in runs for i, e in enumerate(run.episodes)]
        _ROWS[:] = [(runs, rows, list(dict.fromkeys(r.episode.rhythm for r in rows)))]
    return _ROWS[0][1], _ROWS[0][2]


def episodes_page(runs: list[Run], filters: Filters, sort: Sort = Sort(), number: int = 1,
                  page_size: int = PAGE_SIZE) -> EpisodesPage:
    """Page `number` (from 1; past the last, the last) of the episodes that pass `filters`, sorted by `sort`."""
    everything, rhythms = _all_rows(runs)
    choices = {
        "run": [(str(r.index), r.label) for r in runs],
        "rhythm": [(x, x) for x in rhythms],
        "task": [(t.value, t.column) for t in TaskType],
        "outcome": [(x, x) for x in OUTCOMES],
        "failure": [(f.value, f.value) for f in Failure],
        "thought": [(k.value, k.value) for k in ThoughtKind],
    }
    rows = sort.apply([r for r in everything if filters.keeps(r)] if filters.query() else everything)
    pages = max(1, -(-len(rows) // page_size))
    number = min(max(1, number), pages)
    first = (number - 1) * page_size
    return EpisodesPage(filters, rows[first:first + page_size], len(rows), sum(r.episode.won for r in rows),
                        len(everything), runs, choices, sort, number, pages, first)


@dataclass(frozen=True)
class EntryView:
    """One entry as the episode page shows it: a thought set apart, or an action with its answer."""

    entry: Entry
    nothing_happens: bool
    in_loop: bool
    kinds: tuple[str, ...] = ()  # a thought's kinds, where its game could be replayed

    @property
    def thought(self) -> bool:
        return self.entry.kind is Kind.THOUGHT


def entry_views(episode: Episode, anatomy: EpisodeAnatomy | None = None) -> list[EntryView]:
    """Every entry, marking `Nothing happens.`, the repeated actions the loop check ended on (or
    the rounds of the cycle it ended in) and, given the episode's anatomy, each thought's kinds."""
    looped: set[int] = set()
    if episode.failure is Failure.LOOP:
        repeats = int(episode.settings.get("loop_repeats") or DEFAULT_LOOP_REPEATS)
        looped = {e.step for e in episode.entries[-repeats:]}
    elif episode.failure is Failure.CYCLE and (cycle := ending_cycle(episode)):  # its last two rounds
        looped = {e.step for e in episode.actions[-2 * len(cycle):]}
    kinds = {t.step: tuple(k.value for k in ThoughtKind if k in t.kinds) for t in (anatomy.thoughts if anatomy else ())}
    return [EntryView(e, e.kind is Kind.ACTION and e.observation == NOTHING_HAPPENS, e.step in looped,
                      kinds.get(e.step, ())) for e in episode.entries]


def same_game(runs: Iterable[Run], episode: Episode) -> list[EpisodeRow]:
    """Every episode of the same game (by its name, wherever its files sit), in any run or rhythm."""
    return [EpisodeRow(run, i, run.episodes[i]) for run in runs for i in run.by_game.get(episode.game_name, ())]


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
