"""No false results: an episode a human steered is shown apart and never counted as the policy's
own, in the report, the API's results and the view; and a resume that would break the rhythm's
rules is refused with the rule named, changing no file."""

from __future__ import annotations

import subprocess
import sys

import pytest
from starlette.testclient import TestClient
from test_agent import FollowThoughts

import sparse_react as sr
from sparse_react.agent import LoopRules, run_episode
from sparse_react.household.env import HouseholdEnv
from sparse_react.household.game_files import load_game_data
from sparse_react.policies.expert import ExpertPolicy
from sparse_react.report import load_runs, markdown_report
from sparse_react.trajectory import append_episode, read_episodes
from sparse_react.view import create_app

SCRIPT = ["think: plan: look", "think: plan: inventory"] * 10


@pytest.fixture
def run(bundled_unseen, tmp_path):
    """A run folder of one policy, a thought-following script: it wins game 0 (its first thought is
    the walkthrough) and loses game 1."""
    games = bundled_unseen[:2]
    record = tmp_path / "run" / "episodes.jsonl"
    plan = ["think: plan: " + "; ".join(load_game_data(games[0].path)["walkthrough"])]
    append_episode(record, run_episode(HouseholdEnv(games), FollowThoughts(plan), games[0], "sparse"))
    lost = run_episode(HouseholdEnv(games), FollowThoughts(SCRIPT), games[1], "sparse", rules=LoopRules(max_steps=12))
    assert not lost.won
    append_episode(record, lost)
    return record, games


def test_a_steered_win_is_shown_apart_and_never_counted(run):
    record, games = run
    client = TestClient(create_app([record.parent], policy_for=lambda run, episode: FollowThoughts(SCRIPT)),
                        base_url="http://127.0.0.1")
    before = markdown_report(load_runs([record.parent]))
    plan = "plan: " + "; ".join(load_game_data(games[1].path)["walkthrough"])
    steered = client.post("/runs/0/episodes/1/steer", data={"step": "1", "thought": plan, "mode": "edit"},
                          follow_redirects=False)
    assert steered.status_code == 303
    episodes = read_episodes(record)
    assert len(episodes) == 3 and episodes[2].won and episodes[2].steered and not episodes[1].steered

    after = markdown_report(load_runs([record.parent]))
    assert "1/2 (50%)" in before and "1/2 (50%)" in after and "2/3" not in after
    assert "## Steered episodes (not counted above)" in after and games[1].name in after.split("Steered")[1]
    results = sr.Results.load(record.parent)
    assert results.success() == 0.5 and "1/2 (50%)" in results.table()
    runs_page = client.get("/").text
    assert "1/2 (50%)" in runs_page and "1 steered by a human (shown, not counted)" in runs_page
    assert "Steered by a human" in client.get("/runs/0/episodes/2").text


@pytest.mark.parametrize("rhythm, step, rule", [
    ("act", 1, "rhythm 'act' does not allow a thought at the start"),
    ("dense", 2, "rhythm 'dense' does not allow a thought after a thought"),
    ("im", 2, "rhythm 'im' does not allow a thought after a thought"),
])
def test_resume_refuses_an_insert_the_rhythm_forbids(bundled_unseen, tmp_path, rhythm, step, rule):
    game = bundled_unseen[0]
    record = tmp_path / "run.jsonl"
    append_episode(record, run_episode(HouseholdEnv([game]), ExpertPolicy(), game, rhythm))
    before = record.read_bytes()
    result = subprocess.run([sys.executable, "-m", "sparse_react.cli", "resume", str(record), "--episode", "0",
                             "--insert", str(step), "the lamp may be on the desk"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and rule in result.stderr and "Traceback" not in result.stderr
    assert record.read_bytes() == before
    client = TestClient(create_app([record]), base_url="http://127.0.0.1")
    refused = client.post("/runs/0/episodes/0/steer", data={"step": str(step), "thought": "x", "mode": "insert"})
    assert refused.status_code == 400 and rule.replace("'", "&#39;") in refused.text
    assert record.read_bytes() == before


def test_side_by_side_refuses_two_different_games_and_names_both(run):
    record, games = run
    client = TestClient(create_app([record.parent]), base_url="http://127.0.0.1")
    refused = client.get("/compare/0/0/0/1")
    assert refused.status_code == 400 and games[0].name in refused.text and games[1].name in refused.text
    assert "<title>Different games" in refused.text
    assert client.get("/compare/0/1/0/1").status_code == 200
