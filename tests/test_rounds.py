"""Rounds of learning from the model's own play, as CI can afford them: the tests' tiny model, two
rounds of a few bundled games with a few steps; each round's data grows (DAgger aggregates the
relabelled states), each round's adapter loads, a rerun resumes without redoing anything, and the
bootstrap arm and training on from the last adapter run too."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("peft")
EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"  # experiment code: not in the package
sys.path.insert(0, str(EXPERIMENTS))

from ablation_tables import ship_adapter  # noqa: E402

import sparse_react as sr  # noqa: E402
from sparse_react.cli import app  # noqa: E402
from sparse_react.evaluation import evaluate  # noqa: E402
from sparse_react.household.catalog import find_games  # noqa: E402
from sparse_react.options import from_flat  # noqa: E402
from sparse_react.policies.expert import SearchingExpertPolicy  # noqa: E402
from sparse_react.training.export import export  # noqa: E402
from sparse_react.training.relabel import corrections, relabel_episode  # noqa: E402
from sparse_react.training.rounds import (  # noqa: E402
    RoundsError,
    RoundsSettings,
    read_settings,
    rounds_command,
    rounds_markdown,
    run_rounds,
)
from sparse_react.trajectory import read_episodes  # noqa: E402

from tiny import tiny_model  # noqa: E402


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The tiny model and seed data: the searching expert's won episodes of three bundled train games."""
    root = tmp_path_factory.mktemp("rounds")
    tiny_model(root / "tiny", chat=True)
    evaluate(find_games("train")[:3], SearchingExpertPolicy(), "sparse", run_dir=root / "expert", progress=False)
    export([root / "expert"], root / "seed.jsonl", rhythm="sparse")
    return root


@pytest.fixture(scope="module")
def seed_model(toy):
    """An adapter trained on the seed data: round 0 alone."""
    run_rounds(settings(toy, rounds=0), toy / "zero")
    return toy / "zero" / "round-0" / "model"


def settings(toy, **changes) -> RoundsSettings:
    """Tiny rounds, with `changes` named as the options of `sparse-react rounds` (relabelling and training ones too)."""
    base = dict(rhythm="sparse", seed_data=str(toy / "seed.jsonl"), rounds=2, train_games="train", train_limit=2,
                eval_sets=("valid_unseen",), eval_limit=2, max_steps=4, base=str(toy / "tiny"), train_steps=2,
                lora_rank=4, max_length=8192, batch=2)
    return from_flat(RoundsSettings, {**base, **changes})


def plays(model) -> bool:
    """The trained model loads as a policy and plays three lines of a bundled game without an error."""
    game = find_games("valid_unseen")[0]
    episode = sr.run_episode(sr.HouseholdEnv([game]), sr.load_policy(model, device="cpu"), game, "sparse",
                             rules=sr.LoopRules(max_steps=3))
    return episode.error is None and len(episode.entries) == 3


def lines(path) -> int:
    return len(path.read_text().splitlines())


def test_two_dagger_rounds_grow_the_data_and_each_model_loads(toy, capsys):
    out = toy / "dagger"
    table = run_rounds(settings(toy, train_filter="trial_g1000[{round}3]"), out)
    sizes = [lines(out / f"round-{k}" / "data.jsonl") for k in range(3)]
    assert sizes[0] == lines(toy / "seed.jsonl") and sizes[0] < sizes[1] < sizes[2]
    for k in (1, 2):
        new = [json.loads(line) for line in (out / f"round-{k}" / "new.jsonl").read_text().splitlines()]
        played = [json.loads(line) for line in (out / f"round-{k}" / "play" / "episodes.jsonl").read_text().splitlines()]
        assert len(played) == 2 and sizes[k] - sizes[k - 1] == len(new) == sum(len(e["entries"]) for e in played)
        assert all(re.search(f"trial_g1000[{k}3]", e["settings"]["game_name"]) for e in played)
        for example in new:  # the model's own lines are context; only the expert's label (1 or 2 lines) is trained
            flags = [m.get("train") for m in example["messages"] if m["role"] == "assistant"]
            assert flags[-1] is True and set(flags[:-2]) <= {False} and flags.count(True) in (1, 2)
    for k in range(3):
        card = json.loads((out / f"round-{k}" / "model" / "sparse_react.json").read_text())
        assert card["examples"] == sizes[k] and card["steps"] == 2
        # each episode's relabelled states train in one packed row (sparse_react.training.packing); records
        # of one game that two rounds played alike may share it
        assert sizes[0] < card["rows"] <= sizes[0] + 2 * k if k else card["rows"] == sizes[0]
        assert plays(out / f"round-{k}" / "model")
        assert lines(out / f"round-{k}" / "eval-valid_unseen" / "episodes.jsonl") == 2
    text = table.read_text()
    assert text.count("| valid_unseen |") == 3 + 2 and "sparse-react relabel" in text  # 3 rounds, 2 pairs
    for k in (1, 2):
        trained = [m["content"] for line in (out / f"round-{k}" / "new.jsonl").read_text().splitlines()
                   for m in json.loads(line)["messages"] if m.get("train")]
        row = next(line for line in text.splitlines() if line.startswith(f"| {k} |")).split(" | ")
        assert row[3] == f"{sum(t.startswith('think:') for t in trained) / len(trained):.0%}"
    won = [{e["game"]: e["won"] for e in map(json.loads, (out / f"round-{k}" / "eval-valid_unseen" / "episodes.jsonl")
                                              .read_text().splitlines())} for k in range(3)]
    for k in (1, 2):
        cells = next(line for line in text.splitlines() if line.startswith(f"| round {k - 1} → round {k} |")).split(" | ")
        pairs = [(won[k - 1][g], won[k][g]) for g in won[k]]
        assert cells[2:6] == ["2", *(str(pairs.count(w)) for w in ((True, True), (True, False), (False, True)))]
    games = [{e["game"] for e in map(json.loads, (out / f"round-{k}" / "play" / "episodes.jsonl").read_text()
                                     .splitlines())} for k in (1, 2)]
    assert games[0] != games[1]  # `{round}` in the filter: each round played its own selection
    capsys.readouterr()
    run_rounds(settings(toy, train_filter="trial_g1000[{round}3]"), out)  # everything is there: every step skipped
    assert "$ sparse-react" in (printed := capsys.readouterr().out) and printed.count("# done, skipped") == printed.count("$ ")
    with pytest.raises(RoundsError, match="other settings.*arm"):
        run_rounds(settings(toy, train_filter="trial_g1000[{round}3]", arm="bootstrap"), out)


def test_bootstrap_and_continued_training_run_a_round_from_a_seed_model(toy, seed_model, tmp_path):
    out = toy / "bootstrap"
    table = run_rounds(settings(toy, rounds=1, arm="bootstrap", retrain="continue", seed_model=str(seed_model),
                                train_filter="Newspaper"), out)
    assert (out / "round-0" / "model" / "sparse_react.json").read_text() == (seed_model / "sparse_react.json").read_text()
    assert "copied" in table.read_text() and table.read_text().count("sparse-react finetune") == 1
    assert table.read_text().startswith("# Rounds: bootstrap, sparse rhythm, trained on from the last round's adapter")
    played = [json.loads(line) for line in (out / "round-1" / "play" / "episodes.jsonl").read_text().splitlines()]
    assert len(played) == 2 and all("Newspaper" in e["settings"]["game_name"] for e in played)
    assert lines(out / "round-1" / "new.jsonl") == sum(e["won"] for e in played)
    assert lines(out / "round-1" / "data.jsonl") == lines(out / "round-0" / "data.jsonl") + sum(e["won"] for e in played)
    card = json.loads((out / "round-1" / "model" / "sparse_react.json").read_text())
    assert card["settings"]["init_adapter"] == str(out / "round-0" / "model") and card["kind"] == "lora"
    assert plays(out / "round-1" / "model")

    unevaluated = rounds_markdown(out, replace(read_settings(out), eval_sets=()), [])  # as `--eval-sets ''` writes it
    assert [row.split(" | ")[:2] for row in unevaluated.splitlines() if row.startswith(("| 0 |", "| 1 |"))] == \
        [["| 0", str(lines(out / "round-0" / "data.jsonl"))], ["| 1", str(lines(out / "round-1" / "data.jsonl"))]]

    line = rounds_command(read_settings(out), out)  # what a shipped card gives as the command that made it
    assert "--seed-model" in line and "--arm bootstrap" in line and line.startswith("sparse-react rounds ")
    resumed = CliRunner().invoke(app, shlex.split(line)[1:])
    assert resumed.exit_code == 0, resumed.output  # the same settings: the folder accepts it, nothing is redone
    assert resumed.output.count("$ sparse-react") == resumed.output.count("# done, skipped") > 0

    shipped = ship_adapter(out / "round-1" / "model", [line], [out / "round-1" / "eval-valid_unseen"], tmp_path)
    made = json.loads((shipped / "sparse_react.json").read_text())
    sources = made["data_sources"]
    assert sources.pop("search-expert") == lines(toy / "seed.jsonl") and sum(sources.values()) == sum(e["won"] for e in played)
    seed_card = json.loads((seed_model / "sparse_react.json").read_text())
    assert made["continued_from"]["steps"] == seed_card["steps"] and made["steps"] == 2
    assert made["results"]["valid_unseen"]["All"][1] == 2 and made["commands"] == [line]
    assert "training on from an adapter trained 2 optimizer steps" in (shipped / "README.md").read_text()


def test_a_corrections_only_round_trains_on_the_states_the_expert_corrects(toy, seed_model):
    out = toy / "corrections"
    run_rounds(settings(toy, rounds=1, retrain="continue", seed_model=str(seed_model), corrections_only=True,
                        train_filter="Newspaper", eval_sets=()), out)
    kept = [s for e in read_episodes(out / "round-1" / "play" / "episodes.jsonl") for s in corrections(e, relabel_episode(e))]
    new = [json.loads(line) for line in (out / "round-1" / "new.jsonl").read_text().splitlines()]
    assert [e["state_step"] for e in new] == [s.step for s in kept]
    assert not any(example["agreed"] for example in new)
    assert lines(out / "round-1" / "data.jsonl") == lines(out / "round-0" / "data.jsonl") + len(new)
    assert "--corrections-only" in rounds_command(read_settings(out), out)
    shipped = ship_adapter(out / "round-1" / "model", [rounds_command(read_settings(out), out)], [], toy / "shipped")
    assert json.loads((shipped / "sparse_react.json").read_text())["data_sources"]["relabel-expert"] == len(new) > 0
    assert f"{len(new)} of `relabel-expert`, states of the model's own play" in (shipped / "README.md").read_text()
    with pytest.raises(RoundsError, match="bootstrap arm relabels nothing"):
        settings(toy, arm="bootstrap", corrections_only=True).check()
    for leaving_out in ("without_go_to", "each_once", "each_correction_once"):
        with pytest.raises(RoundsError, match="without_go_to, each_once and each_correction_once .* need corrections_only"):
            settings(toy, **{leaving_out: True}).check()
    # the same play, relabelled without the `go to` corrections
    walking = toy / "corrections-without-go-to"
    shutil.copytree(out / "round-0", walking / "round-0")
    shutil.copytree(out / "round-1" / "play", walking / "round-1" / "play")
    chosen = dict(without_go_to=True, each_once=True, each_correction_once=True)
    made = read_settings(out)
    table = run_rounds(replace(made, relabel=replace(made.relabel, **chosen)), walking).read_text()
    rest = [json.loads(line) for line in (walking / "round-1" / "new.jsonl").read_text().splitlines()]
    assert [e["state_step"] for e in rest] == [s.step for e in read_episodes(out / "round-1" / "play" / "episodes.jsonl")
                                              for s in corrections(e, relabel_episode(e), **chosen)]
    assert re.search(r"relabel .*--corrections-only --without-go-to --each-once --each-correction-once", table)


def test_a_seed_model_trained_on_other_data_is_refused(toy, seed_model, tmp_path):
    other = tmp_path / "other.jsonl"
    other.write_text((toy / "seed.jsonl").read_text().splitlines()[0] + "\n")
    with pytest.raises(RoundsError, match="trained on other data than .*other.jsonl"):
        run_rounds(settings(toy, seed_data=str(other), seed_model=str(seed_model)), tmp_path / "r")
    with pytest.raises(RoundsError, match="has no sparse_react.json"):
        run_rounds(settings(toy, seed_model=str(tmp_path)), tmp_path / "r")


def test_an_expert_round_on_generated_games_trains_on_its_wins_and_a_fixed_draw_of_the_last_data(toy, seed_model):
    games = toy / "generated"
    made = CliRunner().invoke(app, ["games", "generate", "--out", str(games), "--count", "2", "--seed", "7",
                                    "--task-types", "look_at_obj_in_light", "--split", "train"])
    assert made.exit_code == 0, made.output
    out = toy / "expert"
    chosen = settings(toy, rounds=1, arm="expert", retrain="continue", seed_model=str(seed_model), train_games=str(games),
                      train_limit=None, max_steps=50, replay=1, eval_sets=())
    run_rounds(chosen, out)
    played = read_episodes(out / "round-1" / "play" / "episodes.jsonl")
    assert len(played) == 2 and all(e.won and e.policy == "search-expert" for e in played)
    new = (out / "round-1" / "new.jsonl").read_text().splitlines(keepends=True)
    data = (out / "round-1" / "data.jsonl").read_text().splitlines(keepends=True)
    assert len(new) == 2 and data[:2] == new and len(data) == 3
    assert data[2] in (out / "round-0" / "data.jsonl").read_text().splitlines(keepends=True)
    assert "--arm expert" in (line := rounds_command(read_settings(out), out)) and "--replay 1" in line

    stored = json.loads((out / "rounds.json").read_text())
    del stored["corrections_only"], stored["lost_only"]  # as in a folder made before those settings existed
    (out / "rounds.json").write_text(json.dumps(stored))
    run_rounds(chosen, out)  # a setting the folder does not name was at its default: the folder resumes
    with pytest.raises(RoundsError, match="replay must be 0 or more"):
        replace(chosen, replay=-1).check()


def test_a_seed_model_without_its_data_replays_from_a_file_of_its_own(toy, seed_model, tmp_path):
    pool = tmp_path / "pool.jsonl"
    pool.write_text("".join((toy / "seed.jsonl").read_text().splitlines(keepends=True)[1:]))
    chosen = settings(toy, seed_data="", rounds=1, arm="bootstrap", retrain="continue", seed_model=str(seed_model),
                      train_filter="Newspaper", replay=1, replay_data=str(pool))
    out = tmp_path / "r"
    table = run_rounds(chosen, out).read_text()
    assert not (out / "round-0" / "data.jsonl").exists()
    new = (out / "round-1" / "new.jsonl").read_text().splitlines(keepends=True)
    data = (out / "round-1" / "data.jsonl").read_text().splitlines(keepends=True)
    assert data[:len(new)] == new and len(data) == len(new) + 1 and data[-1] in pool.read_text().splitlines(keepends=True)
    assert next(row for row in table.splitlines() if row.startswith("| 0 |")).split(" | ")[3] == "—"
    line = rounds_command(read_settings(out), out)
    assert "--seed-data" not in line and f"--replay-data {pool}" in line
    assert CliRunner().invoke(app, shlex.split(line)[1:]).exit_code == 0  # the printed command resumes the folder
    with pytest.raises(RoundsError, match="give the seed data"):
        replace(chosen, seed_model=None).check()
    with pytest.raises(RoundsError, match="is what --replay N draws from"):
        replace(chosen, replay=None).check()
    with pytest.raises(RoundsError, match="replay data .*missing.jsonl not found"):
        replace(chosen, replay_data=str(tmp_path / "missing.jsonl")).check()
    with pytest.raises(RoundsError, match="has no sparse_react.json"):
        replace(chosen, seed_model=str(tmp_path)).check()


def ship_round_script():
    """experiments/ship_round.py as a module (it is a script of the source checkout, not of the package)."""
    import importlib.util

    script = EXPERIMENTS / "ship_round.py"
    if not script.is_file():
        pytest.skip("needs a source checkout (experiments/ship_round.py)")
    spec = importlib.util.spec_from_file_location("ship_round", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ship_round_takes_round_0s_commands_from_the_shipped_adapter_with_its_weights(tmp_path):
    from sparse_react.bundled import ADAPTERS_DIR
    from sparse_react.training.cards import ADAPTER_WEIGHTS, MODEL_CARD

    ship_round = ship_round_script()
    if not (ADAPTERS_DIR / "sparse" / ADAPTER_WEIGHTS).is_file():
        pytest.skip("needs a shipped sparse adapter")
    shipped = json.loads((ADAPTERS_DIR / "sparse" / MODEL_CARD).read_text())
    copy = tmp_path / "round-0"  # a training run's folder: the same weights, a card without commands
    copy.mkdir()
    (copy / ADAPTER_WEIGHTS).write_bytes((ADAPTERS_DIR / "sparse" / ADAPTER_WEIGHTS).read_bytes())
    (copy / MODEL_CARD).write_text(json.dumps({k: v for k, v in shipped.items() if k != "commands"}))
    assert shipped["commands"] and ship_round.seed_commands(copy, "sparse") == shipped["commands"]
    (copy / ADAPTER_WEIGHTS).write_bytes(b"other weights")
    assert ship_round.seed_commands(copy, "sparse") == []


def test_a_seed_model_from_other_rounds_is_traced_to_their_commands(toy, seed_model, tmp_path):
    ship_round = ship_round_script()
    out = tmp_path / "next"  # round 0 alone: the seed model (round 0 of toy/zero) copied
    table = run_rounds(settings(toy, rounds=0, eval_sets=(), seed_model=str(seed_model)), out)
    assert f"a round of {toy / 'zero'}: its rounds.md holds the commands" in table.read_text()
    assert ship_round.made_by(out, ["sparse-react games generate --out g"]) == [
        f"# round 0 of {out} was made and measured by these commands:",
        rounds_command(read_settings(toy / "zero"), toy / "zero"), "# then, from it:",
        "sparse-react games generate --out g", rounds_command(read_settings(out), out)]
