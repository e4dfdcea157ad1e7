"""Tests of the game generator against the real household engine (no mocks)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from sparse_react.household import generate as gen
from sparse_react.household.engine import Engine
from sparse_react.household.game_files import COMPACT_FORMAT, load_game_data
from sparse_react.household.tasks import TaskType, parse_task_folder

OPENABLE_NAMES = ("cabinet", "drawer", "fridge", "microwave", "safe")


@pytest.fixture(scope="module")
def engine() -> Engine:
    return gen._engine()


@pytest.fixture(scope="module")
def train_games() -> dict[TaskType, gen.GeneratedGame]:
    """One train game of each task type (generate_games cycles through the six in order)."""
    games = list(gen.generate_games(3, 6))
    assert [g.spec.task_type for g in games] == list(TaskType)
    return {g.spec.task_type: g for g in games}


def _receptacles(problem: str) -> list[str]:
    return re.findall(r"^(\S+) - receptacle$", problem, flags=re.M)


def test_same_seed_same_game_and_bytes(tmp_path: Path) -> None:
    first = gen.generate_game(11, TaskType.PICK)
    second = gen.generate_game(11, TaskType.PICK)
    assert first == second
    a = gen.write_game(first, tmp_path / "a").read_bytes()
    b = gen.write_game(second, tmp_path / "b").read_bytes()
    assert a == b
    other = gen.generate_game(12, TaskType.PICK)
    assert other.pddl_problem != first.pddl_problem
    assert other.trial != first.trial


def test_same_seed_same_bytes_in_another_process(train_games: dict[TaskType, gen.GeneratedGame]) -> None:
    game = train_games[TaskType.LOOK]
    code = (
        "import sys; from sparse_react.household.generate import generate_game; from sparse_react.household.tasks import TaskType;"
        f"sys.stdout.write(generate_game({game.seed}, TaskType.LOOK, {game.split!r}).to_json())"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout == game.to_json()


def test_generate_games_is_deterministic_and_round_robin(train_games: dict[TaskType, gen.GeneratedGame]) -> None:
    seeds = [g.seed for g in train_games.values()]
    assert len(set(seeds)) == 6
    assert len({g.trial for g in train_games.values()}) == 6
    pick, look = list(gen.generate_games(3, 2, task_types=[TaskType.PICK, TaskType.LOOK]))
    assert pick == train_games[TaskType.PICK]
    assert look.spec.task_type is TaskType.LOOK


@pytest.mark.parametrize("task_type", list(TaskType), ids=lambda t: t.column)
def test_each_task_type_is_solvable_after_round_trip(
    task_type: TaskType, train_games: dict[TaskType, gen.GeneratedGame], engine: Engine, tmp_path: Path
) -> None:
    game = train_games[task_type]
    path = gen.write_game(game, tmp_path)
    assert path == tmp_path / game.spec.folder / game.trial / "game.json"
    spec = parse_task_folder(path.parent.parent.name)
    assert spec == game.spec and spec.task_type is task_type and spec.mrecep == "None"
    data = load_game_data(path)
    assert data["walkthrough"] == game.walkthrough
    assert f'"format": "{COMPACT_FORMAT}"' in path.read_text()

    engine.load(path, data=data)
    state = engine.reset()
    assert f"Your task is to: {game.task[:-1]}" in state.observation
    assert 1 <= len(game.walkthrough) <= gen.MAX_PLAN_STEPS
    for command in game.walkthrough:
        assert not state.won
        assert command in state.admissible
        state = engine.step(command)
    assert state.won


def test_rooms_are_realistic(train_games: dict[TaskType, gen.GeneratedGame]) -> None:
    for scene in gen.all_scenes():
        room = gen.load_room(scene)
        assert gen.MIN_RECEPTACLES <= room.receptacle_count <= gen.MAX_RECEPTACLES, scene
    assert len(gen.all_scenes()) == 120
    for game in train_games.values():
        receptacles = _receptacles(game.pddl_problem)
        assert gen.MIN_RECEPTACLES <= len(receptacles) <= gen.MAX_RECEPTACLES
        assert "(opened " not in game.pddl_problem
        init = game.pddl_problem.split("(:goal")[0]
        placed = re.findall(r"\(inReceptacle (\S+) (\S+)\)", init)
        for obj, receptacle in placed:
            otype, rtype = obj.split("_bar_")[0], receptacle.split("_bar_")[0]
            rtype = gen.LAYOUT_ALIASES.get(rtype, rtype)
            assert otype in gen.LAMPS or otype in gen._receptacle_rules()[rtype], (obj, receptacle)
        assert len(placed) >= len(receptacles) // 2
    heat = train_games[TaskType.HEAT].pddl_problem
    assert "MicrowaveType - rtype" in heat and "(heatable " in heat
    two = train_games[TaskType.PICK_TWO]
    assert len(re.findall(rf"^{two.spec.obj}_bar_\d+ - object$", two.pddl_problem, flags=re.M)) >= 2


def test_openable_receptacles_start_closed(train_games: dict[TaskType, gen.GeneratedGame], engine: Engine) -> None:
    game = train_games[TaskType.HEAT]  # a kitchen: cabinets, drawers, fridge, microwave
    engine.load(Path("heat"), data=gen.game_data(game.task, game.pddl_problem))
    state = engine.reset()
    targets = [c[len("go to "):] for c in state.admissible if c.startswith("go to ")]
    closed = [t for t in targets if t.split()[0] in OPENABLE_NAMES]
    assert closed
    for target in closed:
        state = engine.step(f"go to {target}")
        assert f"The {target} is closed." in state.observation


def test_split_partition_properties() -> None:
    assert gen.unseen_scenes() and all(gen.is_unseen_scene(f"g{s}") for s in gen.unseen_scenes())
    for kind, scenes in gen.ROOM_KINDS.items():
        held = [s for s in scenes if gen.is_unseen_scene(s)]
        assert 5 <= len(held) <= 10, kind
    for task_type in TaskType:
        unseen = gen.split_combos(task_type, "valid_unseen")
        assert len(unseen) >= 5, task_type
        for obj, parent, scenes in unseen:
            assert gen.is_unseen_combo((task_type, obj, parent))
            assert scenes and all(gen.is_unseen_scene(s) for s in scenes)
        for split in ("train", "valid_seen"):
            seen = gen.split_combos(task_type, split)
            assert seen
            for obj, parent, scenes in seen:
                assert not gen.is_unseen_combo((task_type, obj, parent))
                assert not any(gen.is_unseen_scene(s) for s in scenes)
        assert gen.split_combos(task_type, "train") == gen.split_combos(task_type, "valid_seen")


def test_split_games(train_games: dict[TaskType, gen.GeneratedGame]) -> None:
    for game in train_games.values():
        assert not gen.is_unseen_scene(game.spec.scene) and not gen.is_unseen_combo(game.spec)
    for task_type in (TaskType.LOOK, TaskType.HEAT):
        game = gen.generate_game(5, task_type, "valid_unseen")
        assert game.split == "valid_unseen"
        assert gen.is_unseen_scene(game.spec.scene) and gen.is_unseen_combo(game.spec)
    seen = gen.generate_game(train_games[TaskType.PICK].seed, TaskType.PICK, "valid_seen")
    assert not gen.is_unseen_scene(seen.spec.scene) and not gen.is_unseen_combo(seen.spec)
    assert seen.pddl_problem != train_games[TaskType.PICK].pddl_problem


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        gen.generate_game(1, TaskType.PICK, "test")
    with pytest.raises(ValueError):
        gen.generate_game(-1, TaskType.PICK)
