"""Reading game files: real ALFWorld `game.tw-pddl` files and the project's compact `game.json`.

A compact game stores only what is unique to it (the PDDL problem, the task sentence and the
solution); the PDDL domain and the text grammar come from the installed alfworld package.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError, with_config
from typing_extensions import NotRequired, TypedDict  # pydantic reads typing.TypedDict only from Python 3.12

from sparse_react.errors import UserError
from sparse_react.schema import first_error

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


@with_config(ConfigDict(strict=True))
class CompactGame(TypedDict):
    """What loading reads of a compact game (provenance fields beside these are ignored)."""

    task: str
    pddl_problem: str
    walkthrough: list[str]


@with_config(ConfigDict(strict=True))
class AlfworldGame(TypedDict):
    """What loading reads of an ALFWorld `game.tw-pddl` file."""

    pddl_domain: str
    grammar: str
    pddl_problem: str
    walkthrough: NotRequired[list[str] | None]


GAME_SCHEMAS = {"object": TypeAdapter(dict[str, Any]), "compact": TypeAdapter(CompactGame),
                "alfworld": TypeAdapter(AlfworldGame)}


def load_game_data(path: str | Path) -> dict[str, Any]:
    """Read a game file into the mapping textworld's PddlEnv loads.

    Returns a dict with `pddl_domain`, `grammar`, `pddl_problem` and `walkthrough`.
    Raises GameFileError naming the file (and the field) when it is missing or is not a game.
    """
    path = Path(path)
    try:
        raw = GAME_SCHEMAS["object"].validate_json(path.read_bytes())
        kind = "compact" if raw.get("format") == COMPACT_FORMAT else "alfworld"
        game = GAME_SCHEMAS[kind].validate_python(raw)
    except FileNotFoundError:
        raise GameFileError(f"game file not found: {path}") from None
    except OSError as exc:
        raise GameFileError(f"{path} is not a game file: {exc}") from None
    except ValidationError as exc:
        field, message = first_error(exc)
        what = "a compact game" if field and kind == "compact" else "not a game file"
        raise GameFileError(f"{path} is {what}: {field + ': ' if field else ''}{message}") from None
    if kind == "compact":
        domain, _ = alfworld_logic()
        return {"pddl_domain": domain, "grammar": grammar_for_task(game["task"]),
                "pddl_problem": game["pddl_problem"], "walkthrough": game["walkthrough"]}
    return {**game, "walkthrough": game.get("walkthrough") or []}
