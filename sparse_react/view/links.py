"""Where each page lives: URLs under the web app, relative file names in a static export. Runs and
episodes are named by their position only, so no request carries a path."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath
from urllib.parse import urlencode

ABSOLUTE_PATH = re.compile(r"(?<![\w.~/-])/(?:[^\s/]+/)*[^\s/]+")


@dataclass(frozen=True)
class ServerLinks:
    """Links inside the running app (steering allowed)."""

    static: bool = False  # a static export has no steering and no server-side filters

    def runs(self) -> str:
        return "/"

    def episodes(self, **filters: str) -> str:
        query = urlencode({k: v for k, v in filters.items() if v})
        return "/episodes" + (f"?{query}" if query else "")

    def episode(self, run: int, index: int) -> str:
        return f"/runs/{run}/episodes/{index}"

    def steer(self, run: int, index: int) -> str:
        return f"/runs/{run}/episodes/{index}/steer"

    def compare(self, run: int, index: int, other_run: int, other_index: int) -> str:
        return f"/compare/{run}/{index}/{other_run}/{other_index}"

    def path(self, text: object) -> str:
        """A file's path as this machine's own view shows it: whole."""
        return str(text)


@dataclass(frozen=True)
class StaticLinks:
    """Links between the files of a static export (no steering, no server-side filters)."""

    static: bool = True

    def runs(self) -> str:
        return "index.html"

    def episodes(self, page: str = "", **filters: str) -> str:
        """The Episodes list's file: page 1 is episodes.html, page n episodes-n.html (filters and sorts are the server's)."""
        return f"episodes-{page}.html" if page and page != "1" else "episodes.html"

    def episode(self, run: int, index: int) -> str:
        return f"episode-{run}-{index}.html"

    def steer(self, run: int, index: int) -> str:
        return ""

    def compare(self, run: int, index: int, other_run: int, other_index: int) -> str:
        """One file per pair, whichever side it is asked from (the earlier episode on the left)."""
        (a, b), (c, d) = sorted([(run, index), (other_run, other_index)])
        return f"compare-{a}-{b}-{c}-{d}.html"

    def path(self, text: object) -> str:
        """Text naming files, as published: each absolute path cut to its last two parts (…/run/episodes.jsonl),
        so no folder of the machine that wrote the export shows."""
        return ABSOLUTE_PATH.sub(lambda m: "…/" + "/".join(PurePath(m.group()).parts[-2:]), str(text))
