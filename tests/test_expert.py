"""The expert wins every game from the start, and from states reached by random play."""

from __future__ import annotations

import pytest

from sparse_react.env import HouseholdEnv
from sparse_react.games.catalog import BUNDLED_SPLITS, find_games
from sparse_react.evaluate import evaluate, play_game, success_table
from sparse_react.policies.expert import ExpertPolicy
from sparse_react.policies.random_admissible import RandomPolicy
from sparse_react.tasks import TaskType


def _assert_all_won(results):
    lost = [(r.game, r.steps, r.error) for r in results if not r.won]
    assert not lost, lost
    assert all(r.steps <= 50 for r in results)


def test_expert_wins_one_valid_seen_game_per_task_type(valid_seen_games):
    sample = [next(g for g in valid_seen_games if g.task_type is t) for t in TaskType]
    _assert_all_won(evaluate(sample, ExpertPolicy(), progress=False))


def test_expert_wins_one_bundled_game_per_task_type(bundled_unseen):
    sample = [next(g for g in bundled_unseen if g.task_type is t) for t in TaskType]
    _assert_all_won(evaluate(sample, ExpertPolicy(), progress=False))


@pytest.mark.slow
@pytest.mark.parametrize("split", BUNDLED_SPLITS)
def test_expert_wins_every_bundled_game(split):
    results = evaluate(find_games(split), ExpertPolicy(), progress=False)
    _assert_all_won(results)
    assert len(results) >= 60


@pytest.mark.slow
def test_expert_wins_every_valid_seen_game(valid_seen_games):
    results = evaluate(valid_seen_games, ExpertPolicy(), progress=False)
    assert len(results) == 140
    _assert_all_won(results)
    assert "140/140 (100%)" in success_table(results)


@pytest.mark.parametrize("index", [0, 60, 120])
def test_expert_recovers_after_random_play(valid_seen_games, index):
    game = valid_seen_games[::7][index // 7]
    env = HouseholdEnv([game], max_steps=50)
    observation, info = env.reset(options={"game": game})
    wanderer = RandomPolicy(seed=index)
    wanderer.reset(env)
    for _ in range(6):  # leave the solution path: random admissible commands
        observation, _, terminated, _, info = env.step(wanderer.next_line(observation, info["admissible_commands"]))
        if terminated:
            break
    expert = ExpertPolicy()
    expert.reset(env)
    while not info["won"] and env.steps_used < 50:
        observation, _, _, _, info = env.step(expert.next_line(observation, info["admissible_commands"]))
    assert info["won"], f"expert did not recover in {game.name}"


def test_a_budget_ending_is_a_failure(valid_seen_games):
    game = valid_seen_games[0]
    env = HouseholdEnv([game], max_steps=1)
    result = play_game(env, RandomPolicy(seed=1), game)
    assert result.won is False and result.steps == 1
