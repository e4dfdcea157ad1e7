"""A static export: the same pages as plain files (no steering, no server-side filters or sorting),
to publish; it names no folder of the machine that wrote it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from markupsafe import escape

from sparse_react.errors import UserError
from sparse_react.evaluation import SETTINGS_FILE
from sparse_react.trajectory import EPISODES_FILE
from sparse_react.view.links import StaticLinks
from sparse_react.view.pages import (
    OTHERS_SHOWN, EpisodeRow, Filters, compare_page, entry_views, episodes_page, runs_page, same_game)
from sparse_react.view.records import RunSet, RunSource
from sparse_react.view.render import render

LINKS = StaticLinks()


def check_out_dir(out: Path, sources: Sequence[RunSource], force: bool) -> None:
    """Refuse (UserError, before anything is written) a folder that is not empty or is a run folder,
    unless `force`; a file is refused whatever `force` says."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file, not a folder: name a new or empty folder for the static export")
    if force:
        return
    target = out.resolve()
    if target in {s.folder for s in sources} or (target / EPISODES_FILE).exists() or (target / SETTINGS_FILE).exists():
        raise UserError(f"{out} is a run folder: name a new or empty folder for the static export, "
                        "or add --force (force=True) to write its pages there anyway")
    if out.is_dir() and any(out.iterdir()):
        raise UserError(f"{out} is not empty: name a new or empty folder for the static export, "
                        "or add --force (force=True) to write over the files of the same names there")


def private_paths(sources: Sequence[RunSource]) -> list[tuple[re.Pattern, str]]:
    """What a published page must not name, longest first, each with what stands in for it: each run
    folder (its label), the working folder, this checkout (.) and the home folder (~)."""
    names: dict[str, str] = {}
    for source in sources:
        for form in (source.folder, source.folder.absolute()):
            names.setdefault(str(form), source.label)
    for folder, stand_in in ((Path.cwd(), "."), (Path(__file__).resolve().parents[2], "."), (Path.home(), "~")):
        for form in (folder, folder.resolve()):
            if len(form.parts) > 1:  # never the root itself
                names.setdefault(str(form), stand_in)
    patterns = []
    for path in sorted(names, key=len, reverse=True):
        for shown in dict.fromkeys((path, str(escape(path)))):  # as written, and as the HTML escapes it
            patterns.append((re.compile(re.escape(shown) + r"(?![\w.-])"), names[path]))
    return patterns


def export_static(paths: Sequence[Path | str], out_dir: Path | str, force: bool = False) -> list[Path]:
    """Write index.html, the Episodes list (episodes.html, episodes-2.html, ... of PAGE_SIZE rows),
    one page per episode, and one per pair of episodes of the same game that an episode page links
    to (up to OTHERS_SHOWN per episode) into `out_dir`; returns the files written.

    `out_dir` must be new or empty, and not a run folder, unless `force` (UserError before anything
    is written). No absolute path of a run folder, the working folder, this checkout or the home
    folder is written: each stands as the run's label, `.` or `~`."""
    runset = RunSet(paths)
    out = Path(out_dir)
    check_out_dir(out, runset.sources, force)
    runs = runset.runs()
    hidden = private_paths(runset.sources)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    def write(name: str, template: str, **values) -> None:
        text = render(template, LINKS, **values)
        for pattern, stand_in in hidden:
            text = pattern.sub(stand_in, text)
        path = out / name
        path.write_text(text)
        written.append(path)

    write(LINKS.runs(), "runs.html", page=runs_page(runs))
    first = episodes_page(runs, Filters())
    for number in range(1, first.pages + 1):
        page = first if number == 1 else episodes_page(runs, Filters(), number=number)
        write(LINKS.episodes(page=str(number)), "episodes.html", page=page)
    pairs: set[str] = set()
    for run in runs:
        for index, episode in enumerate(run.episodes):
            row = EpisodeRow(run, index, episode)
            others = [r for r in same_game(runs, episode) if (r.run.index, r.index) != (run.index, index)]
            shown = others[:OTHERS_SHOWN]
            write(LINKS.episode(run.index, index), "episode.html", row=row, entries=entry_views(episode, run.anatomy(index)),
                  others=shown, more_others=len(others) - len(shown), message="")
            for other in shown:  # only the pairs a page links to: same game, at most OTHERS_SHOWN per episode
                left, right = sorted([row, other], key=lambda r: (r.run.index, r.index))  # the earlier one on the left
                name = LINKS.compare(left.run.index, left.index, right.run.index, right.index)
                if name not in pairs:
                    pairs.add(name)
                    write(name, "compare.html", page=compare_page(left, right))
    return written
