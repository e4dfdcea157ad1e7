"""The engine's shared logic and cached translations change nothing: same games as plain textworld."""

from __future__ import annotations

import random

import pytest
import textworld
from alfworld.agents.utils.misc import Demangler
from textworld.envs.pddl import PddlEnv

from sparse_react.engine import Engine
from sparse_react.games.files import load_game_data


def _plain_rollout(path, seed, steps):
    env = PddlEnv(textworld.EnvInfos(admissible_commands=True, won=True))
    env.load(load_game_data(path))  # the same mapping, loaded the plain way
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


def _check_same_games(games, steps=50):
    engine = Engine()
    for seed, game in enumerate(games):
        expected = _plain_rollout(game.path, seed=seed, steps=steps)
        assert _engine_rollout(engine, game.path, seed=seed, steps=steps) == expected, game.name
        # a repeated reset (everything now cached) changes nothing either
        assert _engine_rollout(engine, game.path, seed=seed, steps=steps) == expected, game.name


def test_engine_matches_plain_textworld_on_alfworld_games(valid_seen_games):
    _check_same_games(valid_seen_games[3::47])


def test_engine_matches_plain_textworld_on_bundled_games(bundled_unseen):
    _check_same_games(bundled_unseen[::40])


@pytest.mark.slow
def test_engine_matches_plain_textworld_on_many_games(valid_seen_games, bundled_unseen):
    _check_same_games(valid_seen_games[::7] + bundled_unseen[5::10])
