"""The searching expert: wins without walking to anything the game has not shown it."""

from __future__ import annotations

import json

import pytest

from sparse_react.evaluation import evaluate
from sparse_react.household.catalog import find_games
from sparse_react.household.tasks import TaskType
from sparse_react.lines import Kind
from sparse_react.policies import make_policy
from sparse_react.policies.search_order import main as rebuild_order
from sparse_react.policies.search_order import ranked_kinds, search_order
from sparse_react.rhythms import RHYTHMS

from checks import assert_never_walks_to_hidden_objects


@pytest.mark.parametrize("rhythm", list(RHYTHMS))
def test_search_expert_wins_bundled_games_in_every_rhythm(rhythm):
    games = [g for t in TaskType for g in find_games("train", task_types=[t])[:3]]
    episodes = evaluate(games, make_policy("search-expert"), rhythm, progress=False)
    assert [e.game for e in episodes if not e.won] == []
    for episode in episodes:
        assert_never_walks_to_hidden_objects(episode)
    if rhythm == "sparse":
        first = episodes[0].entries[0]
        assert first.kind is Kind.THOUGHT and "one by one, starting with" in first.text


def test_search_expert_wins_real_alfworld_games(valid_seen_games):
    sample = [g for t in TaskType for g in [x for x in valid_seen_games if x.task_type is t][:2]]
    episodes = evaluate(sample, make_policy("search-expert"), "sparse", progress=False)
    assert [e.game for e in episodes if not e.won] == []
    for episode in episodes:
        assert_never_walks_to_hidden_objects(episode)
    searched = sum(e.text.startswith("go to") for ep in episodes for e in ep.entries)
    assert searched > sum(1 for ep in episodes for e in ep.entries if e.text.startswith("take"))


def test_search_order_ranks_kinds_then_numbers():
    order = search_order("apple", ["cabinet 1", "fridge 1", "countertop 2", "countertop 1", "toilet 1"])
    assert order[:3] == ["countertop 1", "countertop 2", "fridge 1"]
    assert "toilet 1" not in order  # alfworld never places an apple there
    assert ranked_kinds("desklamp", ["desk", "sidetable", "fridge"]) == ["sidetable", "desk"]


def test_search_order_rebuilds_from_game_folders(tmp_path):
    out = tmp_path / "order.json"
    rebuild_order([str(find_games("train")[0].path.parent.parent), "--out", str(out)])
    data = json.loads(out.read_text())
    assert data["games"] >= 1 and all(isinstance(n, int) for c in data["counts"].values() for n in c.values())
    with pytest.raises(SystemExit):
        rebuild_order([str(tmp_path / "empty"), "--out", str(out)])
