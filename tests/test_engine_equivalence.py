"""The engine's shared logic and cached translations change nothing: same games as plain textworld."""

from __future__ import annotations

import random

import pytest
import textworld
from alfworld.agents.utils.misc import Demangler
from textworld.envs.pddl import PddlEnv

from sparse_react.household import engine_cache
from sparse_react.household.engine import Engine
from sparse_react.household.engine_cache import PROPOSITION_MEMO_SIZE, BoundedMemo
from sparse_react.household.game_files import load_game_data


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


def test_an_engine_bounds_textworlds_memo_of_propositions(monkeypatch):
    """textworld memoises every Proposition it makes in one process-wide dict (mementos) that
    never lets go; object names are unique to an ALFWorld game, so a worker grew by every game it
    played (about 0.45 MB each: benchmarks/bench_soak.py). An engine puts a bounded memo in its place."""
    import mementos.core

    monkeypatch.setattr(mementos.core, "_memento_cache", {"kept": 1})
    Engine()
    memo = mementos.core._memento_cache
    assert isinstance(memo, BoundedMemo) and memo.size == PROPOSITION_MEMO_SIZE and memo == {"kept": 1}
    Engine()
    assert mementos.core._memento_cache is memo


def test_a_bounded_memo_drops_its_oldest_half():
    memo = BoundedMemo(4)
    for key in range(7):
        memo[key] = str(key)
    assert memo == {4: "4", 5: "5", 6: "6"}  # full at 4: 0 and 1 made room for 4, then 2 and 3 for 6


def test_a_memo_bounded_below_one_game_changes_no_game(bundled_unseen, monkeypatch):
    """Entries dropped mid-game are made again, equal: the same games as with textworld's unbounded
    memo, and the memo never holds more than its bound."""
    import mementos.core

    games = bundled_unseen[::30]
    monkeypatch.setattr(engine_cache, "PROPOSITION_MEMO_SIZE", 0)  # engines leave textworld's own memo
    monkeypatch.setattr(mementos.core, "_memento_cache", {})
    engine = Engine()
    expected = [_engine_rollout(engine, game.path, seed=seed, steps=30) for seed, game in enumerate(games)]
    made = len(mementos.core._memento_cache)
    memo = BoundedMemo(200)
    monkeypatch.setattr(mementos.core, "_memento_cache", memo)
    engine = Engine()
    for seed, game in enumerate(games):
        assert _engine_rollout(engine, game.path, seed=seed, steps=30) == expected[seed], game.name
        assert len(memo) <= 200
    assert made > 4 * 200  # the games made far more than the memo may hold
