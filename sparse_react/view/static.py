"""A static export: the same pages as plain files (no steering, no server-side filters)."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path
from typing import Sequence

from sparse_react.view.links import StaticLinks
from sparse_react.view.pages import EpisodeRow, Filters, compare_page, entry_views, episodes_page, runs_page
from sparse_react.view.records import RunSet
from sparse_react.view.render import render

LINKS = StaticLinks()


def export_static(paths: Sequence[Path | str], out_dir: Path | str) -> list[Path]:
    """Write index.html, episodes.html, one page per episode and one per pair of episodes of the
    same game into `out_dir`; returns the files written."""
    runs = RunSet(paths).runs()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def write(name: str, template: str, **values) -> None:
        path = out / name
        path.write_text(render(template, LINKS, **values))
        written.append(path)

    write(LINKS.runs(), "runs.html", page=runs_page(runs))
    write(LINKS.episodes(), "episodes.html", page=episodes_page(runs, Filters()))
    games: dict[str, list[EpisodeRow]] = {}
    for run in runs:
        for index, episode in enumerate(run.episodes):
            row = EpisodeRow(run, index, episode)
            games.setdefault(episode.game, []).append(row)
    for rows in games.values():
        for row in rows:
            others = [r for r in rows if r is not row]
            write(LINKS.episode(row.run.index, row.index), "episode.html", row=row, entries=entry_views(row.episode),
                  others=others, message="")
        for left, right in combinations(rows, 2):  # rows are in run and file order: the earlier one on the left
            write(LINKS.compare(left.run.index, left.index, right.run.index, right.index), "compare.html",
                  page=compare_page(left, right))
    return written
