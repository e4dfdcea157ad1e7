"""`sparse-react train` as CI can afford it: the tests' tiny model, a few generated games, two stages
(the first stage and one expert round), a step or two each. Each stage's output is there, a rerun
skips every stage, the adapter's card gives the one command, and the dev split shares no game with
the training data or the test sets. Bad input gets one line and leaves nothing written."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("peft")

from tiny import tiny_model  # noqa: E402

import sparse_react as sr  # noqa: E402
from sparse_react.cli import app  # noqa: E402
from sparse_react.household.catalog import find_games  # noqa: E402
from sparse_react.options import from_flat  # noqa: E402
from sparse_react.training.budget import BaseError, BudgetError  # noqa: E402
from sparse_react.training.dev_split import (  # noqa: E402
    DEV_COUNT,
    alfworld_dev_games,
    alfworld_train_games,
    dev_names,
    draw_dev_names,
)
from sparse_react.training.export import game_digest  # noqa: E402
from sparse_react.training.recipe import (  # noqa: E402
    RecipeError,
    RecipeSettings,
    recipe_command,
    train_agent,
)

TINY = dict(expert_games=6, train_steps=2, expert_rounds=1, round_games=2, round_steps=1, replay=2, dev_limit=6,
            max_steps=20, batch=6)


def settings(base: Path, **changes) -> RecipeSettings:
    return RecipeSettings(base=str(base), **{**TINY, **changes})


@contextmanager
def generated_games():
    """ALFWORLD_DATA unset: the recipe on generated games, as anywhere without ALFWorld data."""
    saved = os.environ.pop("ALFWORLD_DATA", None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ["ALFWORLD_DATA"] = saved


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("recipe") / "tiny"
    tiny_model(folder, chat=True)
    return folder


@pytest.fixture(scope="module")
def recipe(tiny, tmp_path_factory):
    """The recipe on generated games (ALFWORLD_DATA unset), run once, and its printed output."""
    out = tmp_path_factory.mktemp("run") / "agent"
    with generated_games():
        train_agent(settings(tiny), out)
    return out


def games_of(folder: Path) -> tuple[set[str], set[str]]:
    refs = find_games(folder)
    return {r.name for r in refs}, {game_digest(str(r.path)) for r in refs}


def test_each_stage_writes_its_output_and_the_card_gives_the_one_command(recipe, tiny):
    for path in ("games/dev", "games/expert", "stage-0/data.jsonl", "stage-0/model/sparse_react.json",
                 "stage-0/dev/episodes.jsonl", "stage-1/games", "stage-1/round-1/data.jsonl",
                 "stage-1/round-1/model/sparse_react.json", "stage-1/dev/episodes.jsonl", "adapter/sparse_react.json",
                 "recipe.md", "recipe.json"):
        assert (recipe / path).exists(), path
    assert len(find_games(recipe / "games" / "dev")) == 6
    card = json.loads((recipe / "adapter" / "sparse_react.json").read_text())
    assert card["commands"] == [recipe_command(settings(tiny), recipe)]
    assert card["commands"][0].startswith(f"sparse-react train --base {tiny} --rhythm sparse ")
    assert card["recipe"]["kept"] in ("stage-0", "stage-1") and set(card["recipe"]["dev"]) == {"stage-0", "stage-1"}
    assert "Dev split" in (recipe / "recipe.md").read_text() and "Test sets" not in (recipe / "recipe.md").read_text()
    game = find_games("valid_unseen")[0]
    episode = sr.run_episode(sr.HouseholdEnv([game]), sr.load_policy(recipe / "adapter", device="cpu"), game, "sparse",
                             rules=sr.LoopRules(max_steps=2))
    assert episode.error is None


def test_the_cards_command_parses_into_the_same_settings(recipe, tiny):
    from typer.main import get_command

    command = json.loads((recipe / "adapter" / "sparse_react.json").read_text())["commands"][0]
    args = command.split()[2:]
    context = get_command(app).commands["train"].make_context("train", args)
    values = {k: v for k, v in context.params.items() if k != "out"}
    parsed = from_flat(RecipeSettings, {**values, "test_sets": ()})
    assert parsed == settings(tiny) and context.params["out"] == recipe


def test_a_rerun_skips_every_stage(recipe, tiny, capsys):
    card = (recipe / "adapter" / "sparse_react.json").read_bytes()
    with generated_games():
        train_agent(settings(tiny), recipe)
    ran = [line for line in capsys.readouterr().out.splitlines() if line.startswith("$ ")]
    assert ran and all(line.endswith("# done, skipped") for line in ran), ran
    assert (recipe / "adapter" / "sparse_react.json").read_bytes() == card


def test_the_dev_split_is_apart_from_the_training_data_and_the_test_sets(recipe):
    dev_names_, dev_digests = games_of(recipe / "games" / "dev")
    trained = [json.loads(line) for data in recipe.glob("stage-*/**/data.jsonl") for line in data.open()]
    assert trained
    assert not dev_names_ & {e["game"] for e in trained} and not dev_digests & {e["game_sha256"] for e in trained}
    for folder in (recipe / "games" / "expert", recipe / "stage-1" / "games"):
        names, digests = games_of(folder)
        assert not dev_names_ & names and not dev_digests & digests
    names, digests = games_of(Path(find_games("valid_unseen")[0].path).parents[2])
    assert not dev_names_ & names and not dev_digests & digests


def test_the_alfworld_dev_split_is_the_committed_draw_apart_from_training_and_valid_seen(valid_seen_games):
    names = dev_names()
    train = find_games("alfworld:train")
    assert len(names) == len(set(names)) == DEV_COUNT and names == draw_dev_names(train)
    assert [g.name for g in alfworld_dev_games(12)] == names[:12]
    assert len({g.task_type for g in alfworld_dev_games(6)}) == 6  # any first N is balanced
    dev_digests = {game_digest(str(g.path)) for g in alfworld_dev_games()}
    training = alfworld_train_games(160) + find_games("train")
    assert not set(names) & {g.name for g in training}
    assert not dev_digests & {game_digest(str(g.path)) for g in training}
    assert not set(names) & {g.name for g in valid_seen_games}
    assert not dev_digests & {game_digest(str(g.path)) for g in valid_seen_games}


def test_a_base_that_is_not_a_causal_lm_is_refused_before_anything_is_written(tmp_path):
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"architectures": ["BertForMaskedLM"], "model_type": "bert"}))
    notes = tmp_path / "notes.txt"
    notes.write_text("not a model")
    for base, words in ((bert, "not a causal language model"), (notes, "not a .gguf model"),
                        (tmp_path / "missing", "not found")):
        with pytest.raises(BaseError, match=words) as caught:
            train_agent(settings(base), tmp_path / "out")
        assert "\n" not in str(caught.value) and not (tmp_path / "out").exists()
    done = subprocess.run([sys.executable, "-m", "sparse_react.cli", "train", "--base", str(bert), "--out",
                           str(tmp_path / "out")], check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0 and "causal" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_folder_of_another_recipe_is_refused_and_left_as_it_was(recipe, tiny):
    before = {p: p.stat().st_mtime_ns for p in recipe.rglob("*")}
    differs = r"another recipe's settings \(round_steps 1 there, 5 here\)"
    with generated_games(), pytest.raises(RecipeError, match=differs) as caught:
        train_agent(settings(tiny, round_steps=5), recipe)
    assert "\n" not in str(caught.value)
    assert {p: p.stat().st_mtime_ns for p in recipe.rglob("*")} == before


def test_a_budget_too_small_for_one_step_is_refused_before_anything_is_written(tiny, tmp_path):
    with pytest.raises(BudgetError, match="too small for one optimizer step") as caught:
        train_agent(settings(tiny, hours=1e-4), tmp_path / "out")
    assert "\n" not in str(caught.value) and not (tmp_path / "out").exists()


def test_hours_scale_every_stages_steps(tiny):
    full = RecipeSettings().steps()
    assert full == [120, 60, 60, 60]
    half = RecipeSettings(hours=2.0).steps()
    assert all(h < f for h, f in zip(half, full)) and abs(half[0] - 2 * half[1]) <= 1


def test_every_command_the_recipe_ran_is_a_command_line_that_parses(recipe):
    from typer.main import get_command

    text = (recipe / "recipe.md").read_text()
    ran = text.split("# which ran:\n")[1].split("```")[0].splitlines()
    assert {line.split()[1] for line in ran} == {"games", "eval", "export", "finetune", "rounds"}
    group = get_command(app)
    for line in ran:
        words = shlex.split(line)[1:]
        command = group.commands[words[0]]
        if words[0] == "games":
            command, words = command.commands[words[1]], words[1:]
        command.make_context(words[0], words[1:])  # an unknown or renamed flag fails here
