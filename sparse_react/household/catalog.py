"""Finding games: bundled splits, ALFWorld data folders, single files; classifying them by task type."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from sparse_react.bundled import bundled_dir
from sparse_react.errors import UserError
from sparse_react.household.game_files import GAME_FILE_NAMES, SPLITS, GameFileError
from sparse_react.household.tasks import TaskSpec, TaskType, game_name, parse_task_folder

BUNDLED_SPLITS = SPLITS
ALFWORLD_PREFIX = "alfworld:"
ALFWORLD_HINT = (
    "set ALFWORLD_DATA to the folder holding ALFWorld's json_2.1.1 (or to json_2.1.1 itself), "
    "e.g. ALFWORLD_DATA=../shared/alfworld"
)


class GameSetError(UserError, ValueError):
    """A game set that cannot be found or holds no games; the message names it."""


@dataclass(frozen=True, order=True)
class GameRef:
    """One game file and what its task folder says about it."""

    path: Path
    spec: TaskSpec

    @property
    def task_type(self) -> TaskType:
        return self.spec.task_type

    @property
    def name(self) -> str:
        """`<task folder>/<trial>`: unique within a split, stable across machines."""
        return game_name(self.path)


def bundled_games_dir() -> Path:
    """The project's bundled game folder (`games/`), or SPARSE_REACT_GAMES when set."""
    override = os.environ.get("SPARSE_REACT_GAMES")
    if override:
        return Path(override)
    return bundled_dir("games")


def alfworld_data_dir() -> Path:
    """ALFWorld's json_2.1.1 folder, from ALFWORLD_DATA; GameSetError saying how to set it if absent."""
    root = os.environ.get("ALFWORLD_DATA")
    if not root:
        raise GameSetError(f"ALFWORLD_DATA is not set: {ALFWORLD_HINT}")
    root_path = Path(root).expanduser()
    for candidate in (root_path / "json_2.1.1", root_path):
        if any((candidate / split).is_dir() for split in ("train", "valid_seen", "valid_unseen")):
            return candidate
    raise GameSetError(f"no ALFWorld splits under ALFWORLD_DATA={root}: {ALFWORLD_HINT}")


def resolve_game_set(source: str | Path) -> Path:
    """Turn a game-set name into a path.

    `valid_unseen` (or `train`, `valid_seen`) names a bundled split; `alfworld:valid_seen` an
    ALFWorld split under ALFWORLD_DATA; anything else is a folder or a single game file.
    """
    text = str(source)
    if text.startswith(ALFWORLD_PREFIX):
        split = text[len(ALFWORLD_PREFIX):]
        path = alfworld_data_dir() / split
        if not path.is_dir():
            raise GameSetError(f"ALFWorld split {split!r} not found at {path}")
        return path
    if text in BUNDLED_SPLITS and not Path(text).exists():
        return bundled_games_dir() / text
    path = Path(text).expanduser()
    if not path.exists():
        raise GameSetError(
            f"game set {text!r} not found: give a game file, a folder of games, a bundled split "
            f"({', '.join(BUNDLED_SPLITS)}) or alfworld:<split> ({ALFWORLD_HINT})"
        )
    return path


def game_ref(path: Path) -> GameRef:
    """Classify one game file by its task folder (`<task>-<Obj>-<MRecep>-<Parent>-<scene>/<trial>/`)."""
    if path.name not in GAME_FILE_NAMES:
        raise GameFileError(f"{path} is not a game file (expected one of {', '.join(GAME_FILE_NAMES)})")
    return GameRef(path, parse_task_folder(path.parent.parent.name))


def find_games(source: str | Path, task_types: Iterable[TaskType | str] | None = None) -> list[GameRef]:
    """All games of a set, sorted by path, optionally only some task types.

    Raises GameSetError when the set does not exist or selects no game (an empty set would
    otherwise hang textworld's reset).
    """
    root = resolve_game_set(source)
    if root.is_file():
        refs = [game_ref(root)]
    else:
        files = sorted(p for name in GAME_FILE_NAMES for p in root.rglob(name))
        refs = [game_ref(p) for p in files]
    refs = keep_task_types(refs, task_types)
    if not refs:
        raise GameSetError(f"no games found in {root}" + (" for the task types asked" if task_types else ""))
    return sorted(refs)


def keep_task_types(refs: Sequence[GameRef], task_types: Iterable[TaskType | str] | None) -> list[GameRef]:
    """The games of the given task types (names or TaskTypes; None keeps all)."""
    if task_types is None:
        return list(refs)
    wanted = {TaskType.parse(t) if isinstance(t, str) else t for t in task_types}
    return [r for r in refs if r.task_type in wanted]


def count_by_task(refs: Sequence[GameRef]) -> dict[TaskType, int]:
    """How many games of each task type (all six keys, in table order)."""
    counts = Counter(r.task_type for r in refs)
    return {t: counts.get(t, 0) for t in TaskType}
