"""The expert wins every game from the start, and from states reached by random play."""

from __future__ import annotations

import random

import pytest

from sparse_react.agent import Context, LoopRules, run_episode
from sparse_react.env import HouseholdEnv, StepBudget
from sparse_react.evaluation import evaluate
from sparse_react.report import success_table
from sparse_react.games.catalog import BUNDLED_SPLITS, find_games
from sparse_react.policies.expert import ExpertPolicy
from sparse_react.policies.random_admissible import RandomPolicy
from sparse_react.rhythms import get_rhythm
from sparse_react.tasks import TaskType
from sparse_react.trajectory import Failure


def _assert_all_won(episodes):
    lost = [(e.game, len(e.entries), e.failure, e.error) for e in episodes if not e.won]
    assert not lost, lost
    assert all(len(e.actions) <= 50 for e in episodes)


def test_expert_wins_one_valid_seen_game_per_task_type(valid_seen_games):
    sample = [next(g for g in valid_seen_games if g.task_type is t) for t in TaskType]
    _assert_all_won(evaluate(sample, ExpertPolicy(), progress=False))


def test_expert_wins_one_bundled_game_per_task_type(bundled_unseen):
    sample = [next(g for g in bundled_unseen if g.task_type is t) for t in TaskType]
    _assert_all_won(evaluate(sample, ExpertPolicy(), progress=False))


@pytest.mark.slow
@pytest.mark.parametrize("split", BUNDLED_SPLITS)
def test_expert_wins_every_bundled_game(split):
    episodes = evaluate(find_games(split), ExpertPolicy(), progress=False)
    _assert_all_won(episodes)
    assert len(episodes) >= 60


@pytest.mark.slow
def test_expert_wins_every_valid_seen_game(valid_seen_games):
    episodes = evaluate(valid_seen_games, ExpertPolicy(), progress=False)
    assert len(episodes) == 140
    _assert_all_won(episodes)
    assert "140/140 (100%)" in success_table(episodes)


@pytest.mark.parametrize("index", [0, 60, 120])
def test_expert_recovers_after_random_play(valid_seen_games, index):
    game = valid_seen_games[::7][index // 7]
    env = StepBudget(HouseholdEnv([game]), max_steps=50)
    observation, info = env.reset(options={"game": game})
    context = Context(get_rhythm("act"), game.task_type, info["task"], "", game=game)
    rng = random.Random(index)
    for _ in range(6):  # leave the solution path: random admissible commands
        command = rng.choice(info["admissible_commands"])
        observation, _, terminated, _, info = env.step(command)
        context.append(command, observation)
        if terminated:
            break
    expert = ExpertPolicy()  # handed control mid-episode: it knows only what the context says happened
    expert.start(context)
    while not info["won"] and env.steps < 50:
        (decision,) = expert.decide([(context, info["admissible_commands"])])
        observation, _, _, _, info = env.step(decision.line)
        context.append(decision.line, observation)
    assert info["won"], f"expert did not recover in {game.name}"


def test_a_budget_ending_is_a_failure(bundled_unseen):
    env = HouseholdEnv(bundled_unseen)
    episode = run_episode(env, RandomPolicy(seed=1), bundled_unseen[0], "act", rules=LoopRules(max_steps=1))
    assert episode.won is False and episode.failure is Failure.BUDGET and len(episode.entries) == 1
