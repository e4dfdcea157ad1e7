"""Finding and classifying games; bad game sets and files get messages that name them."""

from __future__ import annotations

import json

import pytest

from sparse_react.household.catalog import GameSetError, count_by_task, find_games, game_ref
from sparse_react.household.engine import Engine
from sparse_react.household.game_files import GameFileError, load_game_data
from sparse_react.household.tasks import TaskType, UnknownTaskError, parse_task_folder


def test_task_folder_names_parse():
    spec = parse_task_folder("pick_two_obj_and_place-AlarmClock-None-Dresser-318")
    assert (spec.task_type, spec.obj, spec.parent, spec.scene) == (TaskType.PICK_TWO, "AlarmClock", "Dresser", "318")
    assert spec.folder == "pick_two_obj_and_place-AlarmClock-None-Dresser-318"


@pytest.mark.parametrize("name", ["pick_and_dance-Apple-None-Table-1", "not-a-task", "trial_T2019"])
def test_unknown_task_folder_is_named(name):
    with pytest.raises(UnknownTaskError, match=name):
        parse_task_folder(name)


def test_task_type_parse_accepts_columns_and_rejects_others():
    assert TaskType.parse("Pick2") is TaskType.PICK_TWO
    assert TaskType.parse("pick_heat_then_place_in_recep") is TaskType.HEAT
    with pytest.raises(UnknownTaskError, match="juggle"):
        TaskType.parse("juggle")


def test_alfworld_splits_are_found_and_classified(valid_seen_games):
    counts = count_by_task(valid_seen_games)
    assert sum(counts.values()) == len(valid_seen_games) == 140
    assert all(n > 0 for n in counts.values())
    heat = find_games("alfworld:valid_seen", task_types=["heat"])
    assert len(heat) == counts[TaskType.HEAT] and all(g.task_type is TaskType.HEAT for g in heat)


def test_alfworld_games_load_without_traj_data(valid_seen_games):
    game = valid_seen_games[0]
    assert not (game.path.parent / "traj_data.json").exists()
    engine = Engine()
    engine.load(game.path)
    assert "Your task is to:" in engine.reset().observation


def test_missing_alfworld_data_says_how_to_point_at_it(monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    with pytest.raises(GameSetError, match="ALFWORLD_DATA"):
        find_games("alfworld:valid_seen")
    monkeypatch.setenv("ALFWORLD_DATA", "/nonexistent/alfworld")
    with pytest.raises(GameSetError, match="/nonexistent/alfworld"):
        find_games("alfworld:valid_seen")


def test_missing_folder_and_empty_set_are_named(tmp_path):
    with pytest.raises(GameSetError, match="no_such_folder"):
        find_games(tmp_path / "no_such_folder")
    with pytest.raises(GameSetError, match=f"no games found in {tmp_path}"):
        find_games(tmp_path)


def test_file_that_is_not_a_game_is_named(tmp_path):
    folder = tmp_path / "pick_and_place_simple-Apple-None-Fridge-1" / "trial_x"
    folder.mkdir(parents=True)
    bad = folder / "game.tw-pddl"
    bad.write_text("this is not json")
    with pytest.raises(GameFileError, match=str(bad)):
        load_game_data(bad)
    bad.write_text(json.dumps({"pddl_problem": "(define)"}))
    with pytest.raises(GameFileError, match="pddl_domain"):
        load_game_data(bad)
    with pytest.raises(GameFileError, match="not a game file"):
        game_ref(tmp_path / "notes.txt")


def test_malformed_problem_fails_to_load_with_its_name(tmp_path, valid_seen_games):
    data = load_game_data(valid_seen_games[0].path)
    data["pddl_problem"] = data["pddl_problem"].replace("(:init", "(:init (", 1)
    folder = tmp_path / valid_seen_games[0].spec.folder / "trial_bad"
    folder.mkdir(parents=True)
    path = folder / "game.tw-pddl"
    path.write_text(json.dumps(data))
    with pytest.raises(GameFileError, match="trial_bad"):
        Engine().load(path)


def test_bundled_unseen_split_holds_out_rooms_and_combinations(bundled_unseen):
    from sparse_react.household.generate import is_unseen_combo, is_unseen_scene

    assert min(count_by_task(bundled_unseen).values()) >= 20
    assert all(is_unseen_scene(g.spec.scene) and is_unseen_combo(g.spec) for g in bundled_unseen)
    for split in ("train", "valid_seen"):
        games = find_games(split)
        assert min(count_by_task(games).values()) >= 10
        assert not any(is_unseen_scene(g.spec.scene) or is_unseen_combo(g.spec) for g in games)
    seen_rooms = {g.spec.scene for g in find_games("train")}
    assert seen_rooms.isdisjoint({g.spec.scene for g in bundled_unseen})


def test_bundled_games_are_what_the_documented_commands_make(tmp_path):
    from sparse_react.household.catalog import bundled_games_dir
    from sparse_react.household.generate import generate_games, write_game

    for game in generate_games(3, 3, split="valid_unseen"):  # games/README.md: --seed 3 for valid_unseen
        made = write_game(game, tmp_path)
        bundled = bundled_games_dir() / "valid_unseen" / made.relative_to(tmp_path)
        assert made.read_bytes() == bundled.read_bytes(), bundled
