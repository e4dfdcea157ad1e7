"""One owner of the step budget (StepBudget), shared by gym.make, make_env and the loop; and caller
mistakes that raise at the call instead of becoming an error episode."""

from __future__ import annotations

import gymnasium as gym
import pytest

import sparse_react as sr
from sparse_react.agent import LoopRules, run_episode
from sparse_react.errors import UserError
from sparse_react.household.env import HouseholdEnv
from sparse_react.policies.scripted import ScriptedPolicy
from sparse_react.trajectory import Failure

THINK_AND_LOOK = ["think: where could it be?", "look", "think: not here", "inventory"] * 20


@pytest.fixture(scope="module")
def game(bundled_unseen):
    return bundled_unseen[3]


def envs(game, max_steps=5, thoughts_count=True):
    """The same budget given three ways: gym.make's ReAct id, make_env, and a plain HouseholdEnv
    with the budget in the loop's rules."""
    return [
        ("gym.make", gym.make(sr.REACT_ENV_ID, games=[game], max_steps=max_steps, thoughts_count=thoughts_count), None),
        ("make_env", sr.make_env([game], max_steps=max_steps, thoughts_count=thoughts_count), None),
        ("HouseholdEnv", HouseholdEnv([game]), LoopRules(max_steps=max_steps, thoughts_count=thoughts_count)),
    ]


@pytest.mark.parametrize("thoughts_count", [True, False])
def test_five_actions_mean_five_whoever_holds_the_env(game, thoughts_count):
    for how, env, rules in envs(game, 5, thoughts_count):
        episode = run_episode(env, sr.load_policy("random"), game, "act", rules=rules)
        assert (len(episode.actions), episode.failure) == (5, Failure.BUDGET), how
        assert episode.settings["max_steps"] == 5 and episode.settings["thoughts_count"] is thoughts_count, how


@pytest.mark.parametrize("thoughts_count, actions, lines", [(True, 2, 5), (False, 5, 10)])
def test_thoughts_spend_the_budget_only_when_they_count(game, thoughts_count, actions, lines):
    for how, env, rules in envs(game, 5, thoughts_count):
        episode = run_episode(env, ScriptedPolicy(THINK_AND_LOOK), game, "sparse", rules=rules)
        assert (len(episode.actions), len(episode.entries)) == (actions, lines), how
        assert not episode.won and episode.failure in (Failure.BUDGET, Failure.CYCLE), how  # a cycle is a budget ending


def test_plain_gym_make_without_the_loop_stops_at_the_budget(game):
    env = gym.make(sr.ENV_ID, games=[game], max_steps=5)
    env.reset(options={"game": game})
    truncated = [env.step("look")[3] for _ in range(5)]
    assert truncated == [False] * 4 + [True]


def test_the_env_and_the_rules_cannot_disagree(game):
    env = sr.make_env([game], max_steps=5)
    with pytest.raises(UserError, match="budget.*differ"):
        run_episode(env, sr.load_policy("random"), game, "act", rules=LoopRules(max_steps=7))
    episode = run_episode(env, sr.load_policy("random"), game, "act", rules=LoopRules(max_steps=5))
    assert len(episode.actions) == 5


def test_caller_mistakes_raise_before_any_game(game):
    env, policy = HouseholdEnv([game]), sr.load_policy("random")
    with pytest.raises(TypeError, match="variant must be"):
        run_episode(env, policy, game, "act", LoopRules(max_steps=5))  # rules in the variant's place
    with pytest.raises(UserError, match="prompt variant 9 is out of range"):
        run_episode(env, policy, game, "act", 9)
    with pytest.raises(UserError, match="unknown rhythm 'sparce'"):
        run_episode(env, policy, game, "sparce")
    with pytest.raises(TypeError, match="not a policy"):
        run_episode(env, "expert", game)
    with pytest.raises(TypeError, match="household env"):
        run_episode(gym.make("CartPole-v1"), policy, game)
    with pytest.raises(TypeError, match="max_steps must be an int"):
        LoopRules(max_steps="5")
    with pytest.raises(UserError, match="max_steps must be at least 1"):
        sr.make_env([game], max_steps=0)
    with pytest.raises(UserError, match="prompt variant 7"):
        sr.evaluate(policy, games=[game], variants=[7])
    with pytest.raises(UserError, match="unknown rhythm"):
        sr.evaluate(policy, games=[game], rhythms=["fast"])


def test_the_loop_takes_the_envs_game_and_rhythm_when_not_told(game, bundled_unseen):
    env = sr.make_env(bundled_unseen[:3], rhythm="act", max_steps=4)
    env.reset(seed=1)
    episode = run_episode(env, sr.load_policy("expert"))
    assert episode.rhythm == "act" and not episode.thoughts
    assert episode.game_name in {g.name for g in bundled_unseen[:3]} and episode.settings["max_steps"] == 4
