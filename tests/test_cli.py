"""The command line, run as a user runs it: clear one-line errors, never a traceback or a hang."""

from __future__ import annotations

import subprocess
import sys


from sparse_react.games.files import load_game_data


def cli(*args, stdin=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "sparse_react.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout)


def assert_user_error(result, *needles):
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error:") or "Error" in result.stderr
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
