"""Where to look first: receptacle types ranked per object type by how often training games place
that object there.

The ranking is counted once from the initial states of training games (`python -m
sparse_react.policies.search_order GAME_DIR... --out FILE` rebuilds it) and shipped as
`search_order.json`, so a searching agent needs no game data and never sees evaluation games.
Types the counts never saw, but which alfworld's placement rules allow, follow in name order.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from sparse_react.household.catalog import GameSetError, find_games
from sparse_react.household.game_files import load_game_data

ORDER_FILE = Path(__file__).with_name("search_order.json")
# Receptacles the problems name differently from the game text.
ALIASES = {"sink": "sinkbasin", "bathtub": "bathtubbasin"}
_IN_RECEPTACLE = re.compile(r"\(inReceptacle (\w+?)_bar_\S+ (\w+?)_bar_\S+\)")


def count_placements(game_files: Iterable[Path]) -> dict[str, dict[str, int]]:
    """object type -> receptacle type -> how many objects of that type start there."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for path in game_files:
        problem = load_game_data(path)["pddl_problem"]
        for obj, receptacle in _IN_RECEPTACLE.findall(problem):
            receptacle = receptacle.lower()
            counts[obj.lower()][ALIASES.get(receptacle, receptacle)] += 1
    return {obj: dict(c.most_common()) for obj, c in sorted(counts.items())}


@lru_cache(maxsize=1)
def _ranking() -> dict[str, dict[str, int]]:
    return json.loads(ORDER_FILE.read_text())["counts"]


@lru_cache(maxsize=1)
def _allowed() -> dict[str, frozenset[str]]:
    from alfworld.gen.constants import VAL_RECEPTACLE_OBJECTS

    allowed: dict[str, set[str]] = defaultdict(set)
    for receptacle, objs in VAL_RECEPTACLE_OBJECTS.items():
        for obj in objs:
            allowed[obj.lower()].add(receptacle.lower())
    return {obj: frozenset(r) for obj, r in allowed.items()}


def ranked_kinds(obj_type: str, kinds_in_room: Iterable[str]) -> list[str]:
    """The receptacle kinds of this room that may hold `obj_type`, most likely first."""
    obj_type = obj_type.lower()
    counts = _ranking().get(obj_type, {})
    allowed = _allowed().get(obj_type, frozenset())
    room = list(dict.fromkeys(k.lower() for k in kinds_in_room))
    possible = [k for k in room if counts.get(k) or k in allowed]
    return sorted(possible, key=lambda k: (-counts.get(k, 0), k))


def search_order(obj_type: str, receptacles: Iterable[str]) -> list[str]:
    """Receptacle names (`cabinet 3`) in the order to visit them: kinds by rank, then by number."""
    by_kind: dict[str, list[str]] = defaultdict(list)
    for name in receptacles:
        kind, _, number = name.rpartition(" ")
        by_kind[kind].append(name)
    order: list[str] = []
    for kind in ranked_kinds(obj_type, by_kind):
        order += sorted(by_kind[kind], key=lambda n: int(n.rpartition(" ")[2]))
    return order


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Rebuild search_order.json from training game folders.")
    parser.add_argument("folders", nargs="+", type=Path, help="folders searched for game.tw-pddl / game.json files")
    parser.add_argument("--out", type=Path, default=ORDER_FILE)
    args = parser.parse_args(argv)
    try:
        files = [game.path for folder in args.folders for game in find_games(folder)]
    except GameSetError as exc:
        parser.error(str(exc))
    data = {"sources": [f.name for f in args.folders], "games": len(files), "counts": count_placements(files)}
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{len(files)} games -> {args.out}")


if __name__ == "__main__":
    main()
