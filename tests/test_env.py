"""The Gymnasium contract of HouseholdEnv and the think wrapper, on real ALFWorld games."""

from __future__ import annotations

import random

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import sparse_react
from sparse_react.household.env import THOUGHT_REPLY, HouseholdEnv, StepBudget, ThinkWrapper, make_react_env
from sparse_react.household.tasks import TaskType


@pytest.fixture(scope="module")
def few_games(bundled_unseen):
    """Four bundled games of different task types (no ALFWorld data needed)."""
    return [next(g for g in bundled_unseen if g.task_type is t) for t in list(TaskType)[:4]]


def test_env_plays_real_alfworld_games_too(valid_seen_games):
    env = gym.make(sparse_react.ENV_ID, games="alfworld:valid_seen", max_steps=5)
    observation, info = env.reset(options={"game": valid_seen_games[0].path})
    assert info["game_file"] == str(valid_seen_games[0].path)
    assert observation.endswith(info["task"]) and info["task_type"] == "look_at_obj_in_light"


@pytest.mark.filterwarnings("ignore:.*different from the unwrapped")
@pytest.mark.parametrize("env_id", [sparse_react.ENV_ID, sparse_react.REACT_ENV_ID])
def test_registered_ids_pass_check_env(env_id, few_games):
    env = gym.make(env_id, games=few_games[:2])
    inner = env.unwrapped if env_id == sparse_react.ENV_ID else env.env.env  # below gymnasium's own wrappers
    check_env(inner, skip_render_check=True)


def test_reset_separates_banner_and_fills_info(few_games):
    env = HouseholdEnv(few_games)
    observation, info = env.reset(seed=3)
    assert not observation.startswith("-=")
    assert "Welcome" in info["banner"]
    assert observation.startswith("You are in the middle of a room")
    assert observation.endswith(f"Your task is to: {info['task']}")
    assert info["task_type"] in {g.task_type.value for g in few_games}
    assert info["game_file"] in {str(g.path) for g in few_games}
    assert info["won"] is False and "look" in info["admissible_commands"]


def _rollout(env, seed, steps=12):
    observation, info = env.reset(seed=seed)
    rng = random.Random(seed)
    trace = [(observation, tuple(info["admissible_commands"]))]
    for _ in range(steps):
        command = rng.choice(info["admissible_commands"])
        observation, reward, terminated, truncated, info = env.step(command)
        trace.append((command, observation, reward, terminated, truncated, tuple(info["admissible_commands"])))
        if terminated or truncated:
            break
    return trace


def test_same_seed_same_rollout(few_games):
    first, second = HouseholdEnv(few_games), HouseholdEnv(few_games)
    assert _rollout(first, seed=11) == _rollout(second, seed=11)


def test_iteration_gives_each_game_once_per_pass(few_games):
    env = HouseholdEnv(few_games)
    env.reset(seed=5)
    seen = [env.game] + [env.reset()[1] and env.game for _ in range(len(few_games) - 1)]
    assert sorted(seen) == sorted(few_games)
    env.reset()  # the next pass starts over
    assert env.game in few_games


def test_seed_decides_the_order(few_games):
    env = HouseholdEnv(few_games)
    orders = set()
    for seed in range(6):
        env.reset(seed=seed)
        orders.add(env.game)
    assert len(orders) > 1


def test_win_gives_reward_and_terminates(few_games):
    env = HouseholdEnv(few_games)
    game = few_games[0]
    env.reset(options={"game": game})
    for command in env.expert_plan():
        observation, reward, terminated, truncated, info = env.step(command)
    assert (reward, terminated, truncated, info["won"]) == (1.0, True, False, True)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("look")


def test_budget_truncates_and_is_not_a_win(few_games):
    env = gym.make(sparse_react.ENV_ID, games=few_games, max_steps=3)
    env.reset(options={"game": few_games[1]})
    results = [env.step("look") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    assert results[-1][1] == 0.0 and results[-1][2] is False and results[-1][4]["won"] is False
    with pytest.raises(RuntimeError, match="reset"):
        env.step("look")


def test_inadmissible_command_says_nothing_happens(few_games):
    env = HouseholdEnv(few_games)
    env.reset(options={"game": few_games[0]})
    observation, reward, terminated, truncated, info = env.step("fly to the moon")
    assert observation == "Nothing happens." and reward == 0.0 and not truncated


def test_think_wrapper_answers_ok_without_touching_the_game(few_games):
    env = make_react_env(2, games=few_games)
    _, info = env.reset(options={"game": few_games[0]})
    observation, reward, terminated, truncated, think_info = env.step("think: the task needs a lamp.")
    assert observation == THOUGHT_REPLY and reward == 0.0 and not terminated and not truncated
    assert think_info["thought"] is True
    assert think_info["admissible_commands"] == info["admissible_commands"]
    observation, *_ , truncated, _ = env.step("think: still thinking")
    assert truncated  # thoughts count toward the budget by default


def test_think_wrapper_can_leave_thoughts_uncounted(few_games):
    env = StepBudget(ThinkWrapper(HouseholdEnv(few_games)), max_steps=1, thoughts_count=False)
    env.reset(options={"game": few_games[0]})
    assert env.step("think: free")[3] is False
    assert env.step("look")[3] is True
    env = make_react_env(3, thoughts_count=False, games=few_games)
    env.reset(options={"game": few_games[0]})
    lines = [env.step("think: free")[3] for _ in range(6)]
    assert lines == [False] * 5 + [True]  # thoughts free, but no more than two lines a step


def test_async_vector_env_runs_games_in_processes(few_games):
    fns = [lambda g=g: HouseholdEnv([g]) for g in few_games[:2]]
    envs = gym.vector.AsyncVectorEnv(fns, shared_memory=False)
    try:
        observations, infos = envs.reset(seed=0)
        assert len(observations) == 2 and all("Your task is to:" in o for o in observations)
        observations, rewards, terminated, truncated, infos = envs.step(["look", "inventory"])
        assert list(rewards) == [0.0, 0.0]
        assert "You are carrying" in observations[1] or "not carrying" in observations[1]
    finally:
        envs.close()
