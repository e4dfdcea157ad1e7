"""Run folders: resumable after SIGINT or SIGKILL, settings checked, failures recorded, run goes on."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time

import pytest

from sparse_react.agent import LoopRules
from sparse_react.evaluation import EPISODES_FILE, SETTINGS_FILE, RunFolderError, RunSettings, evaluate, open_run
from sparse_react.household.catalog import find_games
from sparse_react.household.game_files import load_game_data
from sparse_react.policies.expert import ExpertPolicy
from sparse_react.policies.random_admissible import RandomPolicy
from sparse_react.trajectory import Failure, read_episodes

from doubles import DiesOn

EVAL = [sys.executable, "-m", "sparse_react.cli", "eval", "--games", "valid_unseen", "--policy", "random",
        "--rhythms", "act,sparse", "--limit", "30", "--max-steps", "30"]
TOTAL = 60  # episodes in EVAL: enough that a signal sent after the fourth lands before the last


def keys(episodes):
    return [(e.settings["game_name"], e.rhythm, e.prompt_variant) for e in episodes]


@pytest.mark.parametrize("sig,workers", [(signal.SIGKILL, "1"), (signal.SIGINT, "1"), (signal.SIGKILL, "2")])
def test_killed_eval_resumes_without_losing_or_repeating(tmp_path, sig, workers):
    run = tmp_path / "run"
    # as from a shell: Ctrl-C not ignored, whatever this test process inherited (an ignored signal survives exec)
    proc = subprocess.Popen([*EVAL, "--out", str(run), "--workers", workers], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    episodes = run / EPISODES_FILE
    deadline = time.time() + 120
    while time.time() < deadline and (not episodes.exists() or episodes.read_text().count("\n") < 4):
        time.sleep(0.05)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    before = episodes.read_text()
    finished = before.count("\n")
    assert 4 <= finished < TOTAL, "the run should have been stopped part-way"
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "rerun the same command" in err and "Traceback" not in err
    result = subprocess.run([*EVAL, "--out", str(run)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    after = read_episodes(episodes)
    assert len(after) == TOTAL and len(set(keys(after))) == TOTAL
    assert episodes.read_text().startswith(before[: before.rfind("\n") + 1])  # finished ones kept as written


def test_an_interrupt_raised_inside_an_eval_still_exits_130(tmp_path):
    # CPython under `python -m` dies of SIGINT at exit after a KeyboardInterrupt went through an eval() of a
    # string, even a caught one; textworld renders observations with eval(), where a Ctrl-C often lands
    (tmp_path / "interrupted_in_eval.py").write_text(
        "from sparse_react import cli\n"
        "def interrupt():\n    raise KeyboardInterrupt\n"
        "try:\n    eval('interrupt()')\nexcept KeyboardInterrupt:\n    cli._interrupted()\n")
    result = subprocess.run([sys.executable, "-m", "interrupted_in_eval"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 130 and "interrupted:" in result.stderr


def test_a_line_cut_short_is_dropped_and_rerun(tmp_path, bundled_unseen):
    run = tmp_path / "run"
    settings = RunSettings("valid_unseen", "expert", ("act",))
    evaluate(bundled_unseen[:3], ExpertPolicy(), "act", run_dir=run, settings=settings, progress=False)
    text = (run / EPISODES_FILE).read_text()
    (run / EPISODES_FILE).write_text(text[: len(text) - 40])  # the last episode was being written
    assert len(open_run(run, settings)) == 2
    episodes = evaluate(bundled_unseen[:3], ExpertPolicy(), "act", run_dir=run, settings=settings, progress=False)
    assert len(read_episodes(run / EPISODES_FILE)) == 3 and all(e.won for e in episodes)


def test_changed_settings_and_incompatible_folders_are_refused(tmp_path, bundled_unseen):
    run = tmp_path / "run"
    evaluate(bundled_unseen[:1], ExpertPolicy(), "act", run_dir=run,
             settings=RunSettings("valid_unseen", "expert", ("act",)), progress=False)
    with pytest.raises(RunFolderError, match="rhythms"):
        open_run(run, RunSettings("valid_unseen", "expert", ("sparse",)))
    stored = json.loads((run / SETTINGS_FILE).read_text())
    (run / SETTINGS_FILE).write_text(json.dumps({**stored, "format": "sparse_react.run/0"}))
    with pytest.raises(RunFolderError, match="incompatible version"):
        open_run(run, RunSettings("valid_unseen", "expert", ("act",)))


def test_a_game_that_fails_to_load_is_an_error_episode_and_the_run_goes_on(tmp_path, bundled_unseen):
    games = tmp_path / "games"
    for ref in bundled_unseen[:2]:
        shutil.copytree(ref.path.parent, games / ref.path.parent.parent.name / ref.path.parent.name)
    bad = games / bundled_unseen[0].spec.folder / "trial_broken" / "game.json"
    bad.parent.mkdir(parents=True)
    data = json.loads(bundled_unseen[0].path.read_text())
    bad.write_text(json.dumps({**data, "pddl_problem": data["pddl_problem"].replace("(:init", "(:init (", 1)}))
    episodes = evaluate(find_games(games), ExpertPolicy(), "act", rules=LoopRules(), run_dir=tmp_path / "run",
                        settings=RunSettings(str(games), "expert", ("act",)), progress=False)
    assert len(episodes) == 3 and sum(e.won for e in episodes) == 2
    broken = next(e for e in episodes if "trial_broken" in e.game)
    assert broken.failure is Failure.ERROR and "trial_broken" in broken.error
    assert load_game_data(bundled_unseen[0].path)  # the good games were untouched


def test_random_baseline_records_budget_failures(tmp_path, bundled_unseen):
    episodes = evaluate(bundled_unseen[:4], RandomPolicy(0), ["act", "dense"], rules=LoopRules(max_steps=6),
                        progress=False)
    assert len(episodes) == 8 and not any(e.won for e in episodes)
    assert {e.failure for e in episodes} <= {Failure.BUDGET, Failure.LOOP, Failure.INVALID_STREAK, Failure.CYCLE}


def test_two_workers_play_the_same_episodes_as_one(bundled_unseen):
    games = bundled_unseen[::15]
    one = evaluate(games, ExpertPolicy(), ["sparse", "act"], progress=False)
    two = evaluate(games, ExpertPolicy(), ["sparse", "act"], progress=False, workers=2)
    assert keys(one) == keys(two)
    assert [[(e.kind, e.text, e.observation) for e in x.entries] for x in one] == \
        [[(e.kind, e.text, e.observation) for e in x.entries] for x in two]


def test_a_crashed_worker_is_an_error_episode_and_the_run_goes_on(tmp_path, bundled_unseen):
    games = bundled_unseen[:6]
    run = tmp_path / "run"
    episodes = evaluate(games, DiesOn(games[2].name, 3), "act", run_dir=run, progress=False, workers=2,
                        settings=RunSettings("valid_unseen", "expert", ("act",)))
    crashed = [e for e in episodes if not e.won]
    assert [e.settings["game_name"] for e in crashed] == [games[2].name]
    assert crashed[0].failure is Failure.ERROR and "exit code 3" in crashed[0].error
    assert len(read_episodes(run / EPISODES_FILE)) == 6
