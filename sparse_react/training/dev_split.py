"""The dev split: the games `sparse-react train` makes every choice on (go on or stop, which task
types to strengthen, which adapter to keep), never trained on, and apart from the test sets.

With ALFWorld data it is a fixed list of 204 ALFWorld train games, 34 of each task type, drawn once
with `random.Random(DEV_SEED)` from the sorted train games of each type and committed as
`dev_split.txt` (`draw_dev_names` remakes it). Its order takes the task types in turn, so its first
N games are balanced too. Without ALFWorld data it is `DEV_COUNT` games generated for the `train`
split from `DEV_SEED`, a seed no bundled split (1, 2, 3), no recipe stage (`TRAIN_SEED` and up) and
no logged experiment (7 to 13) uses.

The test sets, ALFWorld's valid_seen and the bundled valid_unseen, are other splits: their games are
never among these (`tests/test_train_recipe.py` checks it).
"""

from __future__ import annotations

import os
import random
import shutil
from importlib import resources
from pathlib import Path
from typing import Sequence

from sparse_react.household.catalog import GameRef, GameSetError, find_games
from sparse_react.household.generate import generate_games, write_game
from sparse_react.household.tasks import TaskType

DEV_SEED = 55  # the dev split's draw and, without ALFWorld data, its generated games
TRAIN_SEED = 60  # generated training games: TRAIN_SEED for the expert data, TRAIN_SEED + k for round k
DEV_PER_TYPE = 34
DEV_COUNT = 6 * DEV_PER_TYPE
DEV_FILE = "dev_split.txt"
TEST_SETS = ("valid_unseen", "alfworld:valid_seen")


def has_alfworld() -> bool:
    """Whether ALFWorld's train split is there (ALFWORLD_DATA set and holding it)."""
    if not os.environ.get("ALFWORLD_DATA"):
        return False
    try:
        find_games("alfworld:train")
    except GameSetError:
        return False
    return True


def dev_names() -> list[str]:
    """The committed dev split: ALFWorld train game names (`<task folder>/<trial>`), task types in turn."""
    text = resources.files("sparse_react.training").joinpath(DEV_FILE).read_text()
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def draw_dev_names(train: Sequence[GameRef], per_type: int = DEV_PER_TYPE, seed: int = DEV_SEED) -> list[str]:
    """The draw `dev_split.txt` holds: `per_type` games of each task type, sampled with `seed` from
    the sorted names of that type (in the order drawn), then the types taken in turn."""
    rng = random.Random(seed)
    drawn = []
    for task_type in TaskType:
        names = sorted(r.name for r in train if r.task_type is task_type)
        drawn.append(rng.sample(names, min(per_type, len(names))))  # in drawn order: any first N is a random draw too
    return [column[i] for i in range(max(map(len, drawn))) for column in drawn if i < len(column)]


def alfworld_dev_games(limit: int | None = None) -> list[GameRef]:
    """The dev split's ALFWorld train games (the first `limit` of the list)."""
    wanted = dev_names()[:limit]
    by_name = {r.name: r for r in find_games("alfworld:train")}
    missing = [n for n in wanted if n not in by_name]
    if missing:
        raise GameSetError(f"{len(missing)} dev-split games are not in this ALFWorld train split (e.g. {missing[0]}): "
                           f"ALFWORLD_DATA must hold json_2.1.1 as released")
    return [by_name[n] for n in wanted]


def alfworld_train_games(per_type: int) -> list[GameRef]:
    """The first `per_type` ALFWorld train games of each task type that are not in the dev split."""
    dev = set(dev_names())
    refs = [r for r in find_games("alfworld:train") if r.name not in dev]
    return [r for t in TaskType for r in [g for g in refs if g.task_type is t][:per_type]]


def link_games(refs: Sequence[GameRef], out: Path) -> Path:
    """A game folder at `out` holding `refs` as links to their files (each game keeps its name), made
    whole or not at all, so that a stage can name the games as one folder."""
    if out.exists():
        return out
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    for ref in refs:
        trial = partial / ref.name
        trial.mkdir(parents=True)
        for file in ref.path.parent.iterdir():
            if file.is_file():
                (trial / file.name).symlink_to(file.resolve())
    os.replace(partial, out)
    return out


def generate_into(out: Path, seed: int, count: int, split: str = "train", task_types: str | None = None) -> Path:
    """What `sparse-react games generate` does, written whole or not at all (a stopped run leaves no
    half folder that would count as done)."""
    if out.exists():
        return out
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    types = [TaskType.parse(t) for t in task_types.split(",")] if task_types else None
    for game in generate_games(seed, count, types, split=split):
        write_game(game, partial)
    partial.mkdir(parents=True, exist_ok=True)
    os.replace(partial, out)
    return out
