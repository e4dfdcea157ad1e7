"""The few-shot prompt files: three examples per task type, shared actions, rhythm-specific thoughts."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparse_react.household.catalog import find_games
from sparse_react.household.env import HouseholdEnv
from sparse_react.household.tasks import TaskType
from sparse_react.prompts import VARIANTS, PromptError, load_examples, variant_examples
from sparse_react.rhythms import RHYTHMS, get_rhythm


@pytest.mark.parametrize("task_type", list(TaskType))
def test_each_task_type_has_three_examples_and_six_variants(task_type):
    examples = load_examples(task_type)
    assert len(examples) == 3 and len(VARIANTS) == 6
    pairs = {tuple(e.game for e in variant_examples(task_type, v)) for v in range(6)}
    assert len(pairs) == 6
    for example in examples:
        assert "Your task is to:" in example.observation


@pytest.mark.parametrize("task_type", list(TaskType))
def test_rhythms_differ_only_in_their_thoughts(task_type):
    for example in load_examples(task_type):
        renderings = {name: example.lines(rhythm) for name, rhythm in RHYTHMS.items()}
        actions = {name: [l for l in lines if not l[0].startswith("think:")] for name, lines in renderings.items()}
        assert len({tuple(a) for a in actions.values()}) == 1
        n = len(example.turns)
        thoughts = {name: len(lines) - n for name, lines in renderings.items()}
        assert thoughts["act"] == 0
        assert thoughts["dense"] == thoughts["im"] == n
        assert 1 <= thoughts["sparse"] < n / 2
        assert renderings["sparse"][0][0].startswith("think:")  # goal decomposition comes first
        im = [l for l, _ in renderings["im"] if l.startswith("think:")]
        assert all("Goal:" in t and "Current subgoal:" in t for t in im)


@pytest.mark.parametrize("task_type", list(TaskType))
def test_examples_replay_exactly_in_the_environment(task_type, alfworld_json):
    for example in load_examples(task_type):
        split, _, name = example.game.partition(":")[2].partition("/")
        game = find_games(alfworld_json / split / name)[0]
        env = HouseholdEnv([game])
        observation, info = env.reset(options={"game": game})
        assert observation == example.observation
        for turn in example.turns:
            assert turn.action in info["admissible_commands"]
            observation, _, _, _, info = env.step(turn.action)
            assert observation == turn.observation
        assert info["won"]


def test_bad_prompt_inputs_are_named(tmp_path):
    with pytest.raises(PromptError, match="variant 6"):
        variant_examples(TaskType.PICK, 6)
    (tmp_path / "pick_and_place_simple.yaml").write_text("examples: [1, 2")
    with pytest.raises(PromptError, match="pick_and_place_simple.yaml"):
        load_examples(TaskType.PICK, Path(tmp_path))
    with pytest.raises(ValueError, match="unknown rhythm 'loud'"):
        get_rhythm("loud")
