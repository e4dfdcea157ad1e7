"""Pipelines as library calls: the stage runner (printing, skipping, a child process per stage that
loads a model, failures that name their stage), the options dataclasses (declared once, spread into
the command line, written back as command lines), and every stage the pipelines build: its function
accepts its options, and its command line parses into the very same call."""

from __future__ import annotations

import inspect
import os
import shlex
import sys
import typing
from dataclasses import is_dataclass, replace
from pathlib import Path
from unittest import mock

import pytest
import typer
from typer.testing import CliRunner

from sparse_react.api import find_games
from sparse_react.cli import app
from sparse_react.cli_options import with_options
from sparse_react.options import (
    ModelOptions,
    OptionsError,
    RelabelOptions,
    TrainOptions,
    command_line,
    flags,
    from_flat,
    to_flat,
)
from sparse_react.training.rounds import (
    ROUNDS_TRAINING,
    RoundsSettings,
    eval_stage,
    new_data_stage,
    play_stage,
    rounds_command,
    train_stage,
)
from sparse_react.training.stages import Pipeline, Stage, StageFailed

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"  # experiment code: not in the package
sys.path.insert(0, str(EXPERIMENTS))


def _write_pid(path: Path) -> None:
    path.write_text(str(os.getpid()))


def test_a_pipeline_prints_each_stage_skips_what_is_done_and_names_the_stage_that_failed(tmp_path, capsys):
    pipeline = Pipeline()
    first = Stage("write", Path.write_text, (tmp_path / "first.txt", "made"))
    pipeline.run(first)
    pipeline.run(first, done=True)
    failing = Stage("eval", find_games, options={"games": str(tmp_path / "nowhere")})
    with pytest.raises(StageFailed) as failed:
        pipeline.run(failing)
    printed = capsys.readouterr().out
    assert printed.count("$ sparse-react write ") == 2 and printed.count("   # done, skipped") == 1
    assert f"`sparse-react eval --games {tmp_path / 'nowhere'}` failed: " in str(failed.value)
    assert "nowhere" in str(failed.value).split("failed: ")[1] and "run the same command again" in str(failed.value)
    assert (tmp_path / "first.txt").read_text() == "made"  # what the earlier stage wrote is kept
    assert pipeline.commands == [first.line, first.line, failing.line]


def test_an_isolated_stage_runs_in_a_child_process_that_reports_its_error(tmp_path):
    Pipeline().run(Stage("pid", _write_pid, (tmp_path / "pid",), isolated=True))
    assert int((tmp_path / "pid").read_text()) != os.getpid()
    with pytest.raises(StageFailed, match=r"`sparse-react eval --games .*nowhere` failed: .*nowhere"):
        Pipeline().run(Stage("eval", find_games, options={"games": str(tmp_path / "nowhere")}, isolated=True))


def test_options_spread_into_flat_names_and_come_back_whole():
    settings = RoundsSettings(seed_data="seed.jsonl", eval_sets=("valid_unseen", "valid_seen"),
                              relabel=RelabelOptions(corrections_only=True, each_once=True),
                              train=replace(ROUNDS_TRAINING, max_steps=7, pack=False))
    flat = to_flat(settings)
    assert flat["train_steps"] == 7 and "max_steps" in flat and flat["max_steps"] == 50  # the episode budget
    assert from_flat(RoundsSettings, flat) == settings
    assert from_flat(RoundsSettings, {"eval_sets": ["a"]}).eval_sets == ("a",)  # as JSON gives it back
    assert flags(settings) == ["--rhythm", "sparse", "--seed-data", "seed.jsonl", "--rounds", "2",
                               "--eval-sets", "valid_unseen,valid_seen", "--corrections-only", "--each-once",
                               "--train-steps", "7", "--no-pack"]
    with pytest.raises(OptionsError, match="unknown options for RoundsSettings: steps"):
        from_flat(RoundsSettings, {"steps": 3})
    assert command_line("relabel", ([Path("a"), Path("b")],), {"options": RelabelOptions(lost_only=True),
                                                               "out": Path("c d")}) == \
        "sparse-react relabel a b --lost-only --out 'c d'"


def test_two_options_of_one_name_fail_when_the_command_is_made():
    with pytest.raises(TypeError, match="more than one option named seed"):
        @with_options(model=ModelOptions)
        def play(model: ModelOptions = ModelOptions(), seed: int = typer.Option(0)) -> None:
            """A command with a --seed of its own."""


def _rounds_settings(tmp_path: Path) -> list[RoundsSettings]:
    base = RoundsSettings(seed_data=str(tmp_path / "seed.jsonl"), train_games="train", train_limit=2,
                          train_task_types="Look,Pick", train_filter="trial_{round}", eval_sets=("valid_unseen",
                                                                                              "alfworld:valid_seen"),
                          eval_limit=2, max_steps=4, batch=2,
                          train=replace(ROUNDS_TRAINING, base="tiny", max_steps=2, lora_rank=4, max_length=8192))
    return [base,
            replace(base, retrain="continue", relabel=RelabelOptions(*[True] * 6),  # every relabelling option
                    train=replace(base.train, pack=False, learning_rate=3e-4, epochs=2.0, device="cpu")),
            replace(base, arm="bootstrap", train_limit=None, train_task_types=None, train_filter=None),
            replace(base, arm="expert", retrain="continue", eval_sets=())]


def _pipeline_stages(tmp_path: Path) -> list[Stage]:
    """Every kind of stage the pipelines build: rounds, the four-rhythm ablation and the rhythm ablation."""
    import ablation
    import final_ablation

    stages = []
    for settings in _rounds_settings(tmp_path):
        out = tmp_path / "rounds"
        stages += [play_stage(settings, out, 1), new_data_stage(settings, out, 1), train_stage(settings, out, 0),
                   train_stage(settings, out, 1), *(eval_stage(settings, out, 1, games) for games in settings.eval_sets)]
    for chosen in ([], ["--policy", "search-expert", "--limit", "6", "--dtype", "bfloat16"]):
        args = final_ablation.arguments().parse_args(chosen)
        model, options = final_ablation.model_and_options(args)
        stages += [final_ablation.eval_stage("valid_unseen", rule, "im", tmp_path / rule, model, **options)
                   for rule in final_ablation.RULES]
    for extra in ([], ["--train-per-type", "3", "--lora-rank", "8", "--learning-rate", "3e-4"], ["--train-games", "5"]):
        args = ablation.arguments().parse_args(["--out", str(tmp_path / "ablation"), *extra])
        made = ablation.rhythm_stages(args, "dense")
        stages += [*made.experts, made.export, made.finetune, *made.evals]
    for run in ("eval-dense-valid_unseen", "eval-im-valid_unseen"):  # what the report reads, as evaluation left it
        (tmp_path / "ablation" / run).mkdir(parents=True)
        (tmp_path / "ablation" / run / "settings.json").write_text("{}")
    return [*stages, ablation.report_stage(tmp_path / "ablation")]


def _canonical(function, args, kwargs) -> dict:
    """A call's arguments by name, defaults filled in, in one form: a path as a string, a sequence as a
    tuple of strings (and so a comma-separated string where the default is a sequence)."""
    signature = inspect.signature(function)
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()

    def form(value, default):
        if isinstance(value, str) and isinstance(default, (list, tuple)):
            value = [v for v in value.split(",") if v]
        if isinstance(value, (list, tuple)):
            return tuple(str(form(v, None)) for v in value)
        return str(value) if isinstance(value, Path) else value

    return {name: form(value, signature.parameters[name].default) for name, value in bound.arguments.items()}


def test_every_stage_calls_its_function_with_options_it_accepts_and_its_command_makes_the_same_call(tmp_path):
    stages = _pipeline_stages(tmp_path)
    assert {s.command for s in stages} == {"eval", "relabel", "export", "finetune", "report"}
    runner = CliRunner()
    for stage in stages:
        bound = inspect.signature(stage.function).bind(*stage.arguments, **stage.options)  # a renamed parameter fails here
        types = typing.get_type_hints(stage.function)
        for name, value in bound.arguments.items():
            if is_dataclass(value):
                assert isinstance(value, types[name]), (stage.line, name)
        module = sys.modules[stage.function.__module__]
        with mock.patch.object(module, stage.function.__name__) as called:
            result = runner.invoke(app, shlex.split(stage.line)[1:])  # a renamed flag fails here
        assert result.exit_code == 0, (stage.line, result.output)
        ((args, kwargs),) = [(c.args, c.kwargs) for c in called.mock_calls[:1]]
        assert _canonical(stage.function, args, kwargs) == \
            _canonical(stage.function, stage.arguments, stage.options), stage.line


def test_the_rounds_command_a_card_holds_makes_the_same_settings(tmp_path):
    for settings in _rounds_settings(tmp_path):
        with mock.patch("sparse_react.training.rounds.run_rounds") as run:
            run.return_value.read_text.return_value = ""
            result = CliRunner().invoke(app, shlex.split(rounds_command(settings, tmp_path / "r"))[1:])
        assert result.exit_code == 0, result.output
        assert run.call_args.args == (settings, tmp_path / "r")


def test_model_options_are_one_declaration_for_run_and_eval():
    helps = {name: {p.name: p.help for p in typer.main.get_command(app).commands[name].params} for name in ("run", "eval")}
    for name in to_flat(ModelOptions()):
        assert helps["run"][name] == helps["eval"][name] and helps["run"][name], name
    assert ModelOptions(model="m").label == "hf:m" and not ModelOptions(policy="search-expert").loads_model
    assert TrainOptions().lora_rank == 0 and "--lora-rank" in command_line("finetune", (), {"options": ROUNDS_TRAINING})
