"""The engine's shared logic and cached translations change nothing: same games as plain textworld."""

from __future__ import annotations

import random

import pytest
import textworld
from alfworld.agents.utils.misc import Demangler
from textworld.envs.pddl import PddlEnv

from sparse_react.engine import Engine


def _plain_rollout(path, seed, steps):
    env = PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True))
    env.load(str(path))
    demangler = Demangler(game_infos=env._entity_infos)
    for info in env._entity_infos.values():
        info.name = demangler.demangle_alfred_name(info.id)
    return _play(env.reset, lambda c: env.step(c)[0], lambda s: (s.feedback, tuple(s["admissible_commands"]), bool(s["won"])), seed, steps)


def _engine_rollout(engine, path, seed, steps):
    engine.load(path)
    return _play(engine.reset, engine.step, lambda s: (s.observation, s.admissible, s.won), seed, steps)


def _play(reset, step, view, seed, steps):
    rng = random.Random(seed)
    state = view(reset())
    trace = [state]
    for _ in range(steps):
        command = rng.choice(state[1])
        state = view(step(command))
        trace.append((command, *state))
        if state[2]:
            break
    return trace


@pytest.mark.parametrize("index", [3, 47, 100])
def test_engine_matches_plain_textworld_on_random_play(valid_seen_games, index):
    game = valid_seen_games[index]
    engine = Engine()
    expected = _plain_rollout(game.path, seed=index, steps=25)
    assert _engine_rollout(engine, game.path, seed=index, steps=25) == expected
    # a second reset (translations now cached) and another game in between change nothing either
    _engine_rollout(engine, valid_seen_games[index + 1].path, seed=0, steps=3)
    assert _engine_rollout(engine, game.path, seed=index, steps=25) == expected
