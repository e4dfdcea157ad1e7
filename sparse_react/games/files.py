"""Reading game files: real ALFWorld `game.tw-pddl` files and the project's compact `game.json`.

A compact game stores only what is unique to it (the PDDL problem, the task sentence and the
solution); the PDDL domain and the text grammar come from the installed alfworld package.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from sparse_react.errors import UserError

ALFWORLD_GAME_FILE = "game.tw-pddl"
COMPACT_GAME_FILE = "game.json"
GAME_FILE_NAMES = (ALFWORLD_GAME_FILE, COMPACT_GAME_FILE)
COMPACT_FORMAT = "sparse_react.game/1"
SPLITS = ("train", "valid_seen", "valid_unseen")  # the splits of ALFWorld, of the bundled games and of generated ones
TASK_PLACEHOLDER = "UNKNOWN GOAL"


class GameFileError(UserError, ValueError):
    """A game file that is missing, unreadable or not a household game; the message names it."""


@lru_cache(maxsize=1)
def alfworld_logic() -> tuple[str, str]:
    """The PDDL domain and the grammar template shipped with the alfworld package."""
    import alfworld.info

    domain = Path(alfworld.info.ALFRED_PDDL_PATH).read_text()
    grammar = Path(alfworld.info.ALFRED_TWL2_PATH).read_text()
    return domain, grammar


def grammar_for_task(task: str) -> str:
    """The alfworld grammar with the task sentence filled in (`task` without 'Your task is to: ')."""
    _, grammar = alfworld_logic()
    return grammar.replace(TASK_PLACEHOLDER, task.rstrip("."))


COMPACT_KEYS = ("task", "pddl_problem", "walkthrough")  # what a compact game holds besides its provenance


def compact_game(task: str, pddl_problem: str, walkthrough: list[str], **provenance: Any) -> dict[str, Any]:
    """A compact game as `load_game_data` reads it back: the task, the problem and a solution,
    plus provenance fields (seed, split, generator version) that loading ignores."""
    return {"format": COMPACT_FORMAT, **dict(zip(COMPACT_KEYS, (task, pddl_problem, list(walkthrough)))),
            **provenance}


def load_game_data(path: str | Path) -> dict[str, Any]:
    """Read a game file into the mapping textworld's PddlEnv loads.

    Returns a dict with `pddl_domain`, `grammar`, `pddl_problem` and `walkthrough`.
    Raises GameFileError naming the file when it is missing or is not a game.
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise GameFileError(f"game file not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GameFileError(f"{path} is not a game file: {exc}") from None
    if not isinstance(raw, dict):
        raise GameFileError(f"{path} is not a game file: expected a JSON object")
    if raw.get("format") == COMPACT_FORMAT:
        missing = [k for k in COMPACT_KEYS if k not in raw]
        if missing:
            raise GameFileError(f"{path} is a compact game without {', '.join(missing)}")
        domain, _ = alfworld_logic()
        return {
            "pddl_domain": domain,
            "grammar": grammar_for_task(raw["task"]),
            "pddl_problem": raw["pddl_problem"],
            "walkthrough": list(raw["walkthrough"]),
        }
    missing = [k for k in ("pddl_domain", "grammar", "pddl_problem") if not isinstance(raw.get(k), str)]
    if missing:
        raise GameFileError(f"{path} is not a game file: no {', '.join(missing)}")
    return {
        "pddl_domain": raw["pddl_domain"],
        "grammar": raw["grammar"],
        "pddl_problem": raw["pddl_problem"],
        "walkthrough": list(raw.get("walkthrough") or []),
    }
