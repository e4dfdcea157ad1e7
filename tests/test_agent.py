"""The agent loop, rhythms, episode records and resuming after an edited thought."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from sparse_react.agent import Context, LoopRules, run_episode
from sparse_react.evaluation import evaluate
from sparse_react.household.env import HouseholdEnv
from sparse_react.household.game_files import load_game_data
from sparse_react.household.tasks import TaskType
from sparse_react.lines import Kind
from sparse_react.policies.expert import ExpertPolicy
from sparse_react.policies.random_admissible import RandomPolicy
from sparse_react.policies.scripted import ScriptedPolicy
from sparse_react.report import success_table
from sparse_react.resume import resume
from sparse_react.rhythms import RHYTHMS
from sparse_react.trajectory import Failure, RecordError, append_episode, read_episodes


class FollowThoughts(ScriptedPolicy):
    """A test double for a model that listens to its thoughts: after `think: plan: a; b; c` it
    sends a, b, c; otherwise it replays its script."""

    name = "follow-thoughts"

    def begin(self, context):
        super().begin(context)
        self.pending = []

    def next_line(self, context, admissible):
        line = context.turns[-1][0] if context.turns else ""
        if line.startswith("think: plan:"):
            self.pending = [c.strip() for c in line.split("plan:", 1)[1].split(";") if c.strip()]
        return self.pending.pop(0) if self.pending else super().next_line(context, admissible)


@pytest.fixture(scope="module")
def sample(bundled_unseen):
    return [next(g for g in bundled_unseen if g.task_type is t) for t in TaskType]


@pytest.fixture(scope="module")
def env(bundled_unseen):
    return HouseholdEnv(bundled_unseen)


@pytest.mark.parametrize("rhythm", list(RHYTHMS))
def test_expert_with_thoughts_has_the_rhythms_density(env, sample, rhythm):
    for game in sample:
        episode = run_episode(env, ExpertPolicy(), game, rhythm)
        assert episode.won, (game.name, episode.error)
        kinds = [e.kind for e in episode.entries]
        if rhythm == "act":
            assert Kind.THOUGHT not in kinds
        elif rhythm == "sparse":
            assert kinds[0] is Kind.THOUGHT and 0 < episode.thought_density < 0.45
        else:  # dense and im: a thought before every action
            assert kinds == [Kind.THOUGHT, Kind.ACTION] * len(episode.actions)
        if rhythm == "im":
            for thought in episode.thoughts:
                assert thought.text.startswith("Goal: ") and "Current subgoal: " in thought.text
                assert not any(w in thought.text for w in ("likely", "Now I", "Next"))


@pytest.mark.slow
@pytest.mark.parametrize("rhythm", list(RHYTHMS))
def test_expert_wins_every_bundled_unseen_game_in_every_rhythm(bundled_unseen, rhythm):
    episodes = evaluate(bundled_unseen, ExpertPolicy(), rhythm, progress=False)
    assert [e for e in episodes if not e.won] == []
    assert "120/120 (100%)" in success_table(episodes)


def test_context_text_only_grows(env, sample):
    game = sample[2]
    observation, info = env.reset(options={"game": game})
    context = Context.start(RHYTHMS["sparse"], game.task_type, info["task"], observation)
    texts = [context.text()]
    for line, obs in [("think: where is it?", "OK."), ("look", "You are in the middle of a room.")]:
        context.append(line, obs)
        texts.append(context.text())
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))
    assert context.last_observation == "You are in the middle of a room."


def test_loop_is_detected_and_can_be_turned_off(env, sample):
    episode = run_episode(env, ScriptedPolicy(["look"] * 10), sample[0], "act")
    assert (episode.won, episode.failure, len(episode.actions)) == (False, Failure.LOOP, 3)
    episode = run_episode(env, ScriptedPolicy(["look"] * 10), sample[0], "act", rules=LoopRules(max_steps=5, loop_repeats=0))
    assert (episode.failure, len(episode.actions)) == (Failure.BUDGET, 5)


def test_invalid_action_streak_and_errors_are_classified(env, sample):
    episode = run_episode(env, ScriptedPolicy([f"dance {i}" for i in range(9)]), sample[0], "act",
                          rules=LoopRules(max_steps=6))
    assert episode.failure is Failure.INVALID_STREAK and episode.invalid_actions == 6
    episode = run_episode(env, ScriptedPolicy(["look"]), sample[0], "act")
    assert episode.failure is Failure.ERROR and "used up" in episode.error
    episode = run_episode(env, ScriptedPolicy(["think: hmm", "look"]), sample[0], "act")
    assert episode.failure is Failure.ERROR and "does not allow a thought" in episode.error


def test_thoughts_count_toward_the_budget(env, sample):
    episode = run_episode(env, ScriptedPolicy(["think: a", "think: b", "look", "look"]), sample[0], "sparse",
                          rules=LoopRules(max_steps=2))
    assert episode.failure is Failure.BUDGET and len(episode.thoughts) == 2 and not episode.actions


def test_with_thoughts_free_the_budget_counts_actions_and_lines_are_capped(env, sample):
    """The expert's dense episode needs more lines than a budget just above its action count allows when
    thoughts count; with thoughts free the same budget is enough; a policy that only thinks stops at
    twice the budget."""
    full = run_episode(env, ExpertPolicy(), sample[0], "dense")
    budget = len(full.actions) + 1
    counted = run_episode(env, ExpertPolicy(), sample[0], "dense", rules=LoopRules(max_steps=budget))
    free = run_episode(env, ExpertPolicy(), sample[0], "dense", rules=LoopRules(max_steps=budget, thoughts_count=False))
    assert full.won and len(full.entries) > budget
    assert counted.failure is Failure.BUDGET and free.won and len(free.entries) == len(full.entries)
    thinker = run_episode(env, ScriptedPolicy(["think: hmm"] * 20), sample[0], "sparse",
                          rules=LoopRules(max_steps=3, thoughts_count=False))
    assert thinker.failure is Failure.BUDGET and len(thinker.entries) == 6 and not thinker.actions


def test_records_round_trip(tmp_path, env, sample):
    path = tmp_path / "run.jsonl"
    episodes = [run_episode(env, ExpertPolicy(), g, r) for g, r in zip(sample, ["sparse", "dense", "im", "act"])]
    episodes.append(run_episode(env, RandomPolicy(3), sample[4], "sparse", rules=LoopRules(max_steps=4)))
    for episode in episodes:
        append_episode(path, episode)
    assert read_episodes(path) == episodes
    record = json.loads(path.read_text().splitlines()[0])
    assert record["versions"]["textworld"] and record["counts"]["thoughts"] == len(episodes[0].thoughts)
    assert {"won", "failure", "entries", "task", "task_type", "rhythm", "prompt_variant", "policy"} <= set(record)


def test_bad_record_files_are_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "sparse_react.episode/1"}\nnot json\n')
    with pytest.raises(RecordError, match="bad.jsonl, line 1"):
        read_episodes(bad)
    with pytest.raises(RecordError, match="not found"):
        read_episodes(tmp_path / "missing.jsonl")


def test_edited_thought_turns_a_failure_into_a_win(tmp_path, env, sample):
    game = sample[1]
    walkthrough = load_game_data(game.path)["walkthrough"]
    script = ["think: plan: look", "think: plan: inventory"] * 10
    failed = run_episode(env, FollowThoughts(script), game, "sparse", rules=LoopRules(max_steps=12))
    assert not failed.won
    record = tmp_path / "run.jsonl"
    append_episode(record, failed)
    won, mismatches = resume(record, 0, 3, "plan: " + "; ".join(walkthrough), FollowThoughts(script))
    assert won.won and mismatches == []
    assert [e.text for e in won.entries[:2]] == [e.text for e in failed.entries[:2]]
    assert won.entries[2].text.startswith("plan: ") and won.settings["resumed_from"]["step"] == 3


def test_resume_cli_rejects_bad_input_and_changes_no_file(tmp_path, env, sample):
    record = tmp_path / "run.jsonl"
    append_episode(record, run_episode(env, ExpertPolicy(), sample[0], "sparse"))
    before = record.read_bytes()

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "sparse_react.cli", "resume", str(record), *args],
                              capture_output=True, text=True, timeout=120)

    for args, needle in [(["--episode", "3", "--edit", "1", "x"], "out of range"),
                         (["--episode", "0", "--edit", "2", "x"], "is an action"),
                         (["--episode", "0", "--edit", "99", "x"], "step 99 is out of range")]:
        result = cli(*args)
        assert result.returncode == 2 and needle in result.stderr and "Traceback" not in result.stderr
    not_json = tmp_path / "notes.jsonl"
    not_json.write_text("hello\n")
    result = subprocess.run([sys.executable, "-m", "sparse_react.cli", "resume", str(not_json), "--episode", "0",
                             "--edit", "1", "x"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "notes.jsonl, line 1" in result.stderr
    assert record.read_bytes() == before
    result = cli("--episode", "0", "--insert", "2", "the object should be nearby")
    assert result.returncode == 0, result.stderr
    assert len(read_episodes(record)) == 2 and read_episodes(record)[1].won
