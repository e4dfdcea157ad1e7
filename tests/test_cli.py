"""The command line, run as a user runs it: clear one-line errors, never a traceback or a hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sparse_react.household.game_files import load_game_data
from sparse_react.trajectory import read_episodes


def cli(*args, stdin=None, timeout=300, env=None):
    return subprocess.run([sys.executable, "-m", "sparse_react.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def assert_user_error(result, *needles):
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error:") and result.stderr.count("\n") == 1, result.stderr
    for needle in needles:
        assert needle in result.stderr


def test_games_list_counts_alfworld_split(alfworld_json):
    result = cli("games", "list", "alfworld:valid_seen")
    assert result.returncode == 0, result.stderr
    assert "| alfworld:valid_seen | 35 | 27 | 16 | 25 | 13 | 24 | 140 |" in result.stdout


def test_missing_folder_is_named(tmp_path):
    assert_user_error(cli("games", "list", str(tmp_path / "nowhere")), "nowhere")


def test_empty_set_fails_fast_instead_of_hanging(tmp_path):
    assert_user_error(cli("eval", "--games", str(tmp_path), timeout=60), "no games found")


def test_unknown_task_type_is_named(alfworld_json):
    assert_user_error(cli("eval", "--games", "alfworld:valid_seen", "--task-types", "juggle"), "juggle")


def test_unknown_task_folder_is_named(tmp_path):
    folder = tmp_path / "fold_laundry-Shirt-None-Bed-1" / "trial_1"
    folder.mkdir(parents=True)
    (folder / "game.tw-pddl").write_text("{}")
    assert_user_error(cli("games", "list", str(tmp_path)), "fold_laundry")


def test_file_that_is_not_a_game_is_named(tmp_path):
    folder = tmp_path / "pick_and_place_simple-Apple-None-Fridge-1" / "trial_1"
    folder.mkdir(parents=True)
    (folder / "game.tw-pddl").write_text("not json at all")
    assert_user_error(cli("games", "show", str(folder / "game.tw-pddl")), "game.tw-pddl")


def test_bundled_sets_are_listed():
    result = cli("games", "list")
    assert result.returncode == 0, result.stderr
    assert "| valid_unseen | 20 | 20 | 20 | 20 | 20 | 20 | 120 |" in result.stdout


def test_person_plays_and_wins(bundled_unseen):
    game = bundled_unseen[0]
    walkthrough = load_game_data(game.path)["walkthrough"]
    moves = "\n".join(["admissible", "dance wildly", *walkthrough]) + "\n"
    result = cli("play", str(game.path), stdin=moves)
    assert result.returncode == 0, result.stderr
    assert walkthrough[0] in result.stdout.split("Nothing happens.")[0]  # the admissible listing
    assert "'dance wildly' is not an admissible command" in result.stdout
    assert "Nothing happens." in result.stdout
    assert "You won in" in result.stdout


def test_play_ends_cleanly_on_end_of_input(bundled_unseen):
    result = cli("play", str(bundled_unseen[0].path), stdin="look\n")
    assert result.returncode == 0 and "without winning" in result.stdout


def test_eval_prints_success_table(valid_seen_games):
    result = cli("eval", "--games", "alfworld:valid_seen", "--policy", "expert", "--rhythms", "act",
                 "--task-types", "look", "--limit", "2")
    assert result.returncode == 0, result.stderr
    assert "| expert (act) | – | – | – | – | 2/2 (100%) | – | 2/2 (100%) |" in result.stdout


def test_run_plays_one_game_prints_it_and_appends_its_record(tmp_path):
    record = tmp_path / "run.jsonl"
    for _ in range(2):
        result = cli("run", "valid_unseen", "--index", "3", "--policy", "search-expert", "--rhythm", "sparse",
                     "--out", str(record))
        assert result.returncode == 0, result.stderr
    [first, second] = read_episodes(record)
    assert first.won and second.won and len(first.entries) == len(second.entries)
    assert f"WON in {len(first.entries)} steps" in result.stdout and "  think: " in result.stdout
    assert first.policy_spec == {"kind": "search-expert"}


@pytest.fixture(scope="module")
def train_run(tmp_path_factory):
    """An eval run folder: the search expert on 3 bundled train games, sparse and act."""
    run = tmp_path_factory.mktemp("cli") / "experts"
    result = cli("eval", "--games", "train", "--limit", "3", "--policy", "search-expert", "--rhythms", "sparse,act",
                 "--out", str(run))
    assert result.returncode == 0, result.stderr
    return run


def test_report_writes_the_table_the_measures_and_plots(train_run, tmp_path):
    result = cli("report", str(train_run), "--out", str(tmp_path / "report"))
    assert result.returncode == 0, result.stderr
    wins = {e.rhythm: sum(x.won for x in read_episodes(train_run / "episodes.jsonl") if x.rhythm == e.rhythm)
            for e in read_episodes(train_run / "episodes.jsonl")}
    assert "| sparse | " in result.stdout and f"{wins['sparse']}/3" in result.stdout
    for name in ("report.md", "report.csv", "success_by_task.png", "thought_density.png", "steps_to_success.png"):
        assert (tmp_path / "report" / name).stat().st_size > 100, name


def test_export_then_finetune_from_the_command_line(train_run, tmp_path):
    from tiny import tiny_model

    data = tmp_path / "data.jsonl"
    result = cli("export", str(train_run), "--rhythm", "sparse", "--out", str(data))
    assert result.returncode == 0, result.stderr
    won = sum(e.won for e in read_episodes(train_run / "episodes.jsonl") if e.rhythm == "sparse")
    assert f"wrote {won} examples ({won} sparse)" in result.stdout
    assert len(data.read_text().splitlines()) == won
    tiny_model(tmp_path / "tiny", chat=True)
    model = tmp_path / "model"
    result = cli("finetune", "--data", str(data), "--out", str(model), "--base", str(tmp_path / "tiny"),
                 "--max-steps", "2", "--grad-accum", "1", "--learning-rate", "1e-3", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    card = json.loads((model / "sparse_react.json").read_text())
    assert card["steps"] == 2 and card["examples"] == won and f"trained 2 steps on {won} sparse" in result.stdout


def test_dtype_is_a_setting_of_the_model_policy(tmp_path):
    from tiny import tiny_model

    tiny_model(tmp_path / "tiny", chat=True)
    args = ["run", "valid_unseen", "--model", str(tmp_path / "tiny"), "--max-steps", "2", "--device", "cpu"]
    result = cli(*args, "--dtype", "bfloat16", "--out", str(tmp_path / "run.jsonl"), env={"HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr
    assert read_episodes(tmp_path / "run.jsonl")[0].policy_spec["dtype"] == "bfloat16"
    assert_user_error(cli(*args, "--dtype", "int8", env={"HF_HUB_OFFLINE": "1"}), "unknown dtype 'int8'")


def test_games_generate_writes_games_that_show_and_solve(tmp_path):
    result = cli("games", "generate", "--out", str(tmp_path), "--seed", "5", "--count", "2", "--split", "train")
    assert result.returncode == 0, result.stderr
    paths = result.stdout.split()
    assert len(paths) == 2 and all(os.path.isfile(p) for p in paths)
    shown = cli("games", "show", paths[1])
    assert shown.returncode == 0 and "solution:   " in shown.stdout and json.loads(open(paths[1]).read())["walkthrough"]


def test_cache_info_says_where_the_cache_is_and_what_it_holds(tmp_path, bundled_unseen):
    env = {"SPARSE_REACT_CACHE_DIR": str(tmp_path / "cache"), "SPARSE_REACT_DISK_CACHE": "1"}
    before = cli("cache", "info", env=env)
    assert before.returncode == 0, before.stderr
    assert f"folder:    {tmp_path / 'cache' / 'translations'}" in before.stdout and "entries:   0 " in before.stdout
    assert cli("games", "show", str(bundled_unseen[0].path), env=env).returncode == 0
    after = cli("cache", "info", env=env)
    assert "entries:   0 " not in after.stdout and "enabled:   True" in after.stdout


def test_a_bad_argument_is_refused_with_status_2_and_writes_nothing(tmp_path):
    record = tmp_path / "run.jsonl"
    result = cli("run", "valid_unseen", "--index", "0", "--policy", "expert", "--variant", "9", "--out", str(record))
    assert result.returncode == 2 and "prompt variant 9 is out of range 0..5" in result.stderr
    assert "Traceback" not in result.stderr and not record.exists()
    result = cli("eval", "--games", "valid_unseen", "--policy", "expert", "--variants", "0,7", "--limit", "1",
                 "--out", str(tmp_path / "run"))
    assert result.returncode == 2 and "prompt variant 7" in result.stderr and not (tmp_path / "run").exists()
