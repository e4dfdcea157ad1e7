"""The ablation view (experiments/ablation_tables.py and notebooks/ablation.ipynb) over a real, tiny ablation
folder: a model card from a real (toy) fine-tuning and two evaluation runs on bundled games, laid out as
experiments/ablation.py lays them out."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"  # experiment code: not in the package
sys.path.insert(0, str(EXPERIMENTS))

from ablation_tables import PairedComparison, _facts, load_ablation, paired, write_ablation_report  # noqa: E402
from test_notebook import NOTEBOOKS, execute, nbformat, texts  # noqa: E402

from sparse_react.evaluation import RunSettings, evaluate  # noqa: E402
from sparse_react.household.catalog import find_games  # noqa: E402
from sparse_react.household.tasks import TaskType  # noqa: E402
from sparse_react.options import TrainOptions  # noqa: E402
from sparse_react.policies.expert import ExpertPolicy  # noqa: E402
from sparse_react.policies.random_admissible import RandomPolicy  # noqa: E402
from sparse_react.training.export import export  # noqa: E402
from sparse_react.training.finetune import finetune  # noqa: E402
from sparse_react.trajectory import RecordError  # noqa: E402

from tiny import tiny_model  # noqa: E402

NOTEBOOK = NOTEBOOKS / "ablation.ipynb"


@pytest.fixture(scope="module")
def ablation_dir(bundled_unseen, tmp_path_factory):
    """model-sparse (2 optimizer steps of a tiny model on two expert episodes of bundled train games),
    eval-sparse-valid_unseen (the expert) and eval-act-valid_unseen (a random policy) on one bundled
    valid_unseen game per task type."""
    root = tmp_path_factory.mktemp("ablation")
    games = [next(g for g in bundled_unseen if g.task_type is t) for t in TaskType]
    for rhythm, policy in (("sparse", ExpertPolicy()), ("act", RandomPolicy(seed=0))):
        evaluate(games, policy, rhythm, run_dir=root / f"eval-{rhythm}-valid_unseen",
                 settings=RunSettings("valid_unseen", policy.name, (rhythm,)), progress=False)
    evaluate(find_games("train")[:2], ExpertPolicy(), "sparse", run_dir=root / "expert", progress=False)
    export([root / "expert"], root / "data.jsonl")
    tiny_model(root / "tiny", chat=True)
    finetune(root / "data.jsonl", root / "model-sparse", TrainOptions(str(root / "tiny"), max_steps=2, batch_size=1,
                                                                      grad_accum=1, max_length=512, save_steps=1),
             progress=False)
    return root


def test_the_rhythms_are_side_by_side_with_their_training(ablation_dir):
    ablation = load_ablation(ablation_dir)
    assert list(ablation.models) == ["sparse"] and ablation.models["sparse"].steps == 2
    (games, groups), = ablation.sets.items()
    assert games == "valid_unseen" and [g.rhythm for g in groups] == ["sparse", "act"]
    text = write_ablation_report(ablation_dir).read_text()
    assert "| sparse | " + " | ".join(["1/1 (100%)"] * 6) + " | 6/6 (100%) |" in text
    act = groups[1]
    assert f"| act | " in text and f"{act.wins['All']}/6" in text and act.thoughts_per_episode == 0
    assert f"Order: sparse 100% > act {act.success('All'):.0f}%." in text
    loss = ablation.models["sparse"]
    assert f"| sparse | 2 | 2 | {loss.first_loss:.3f} → {loss.last_loss:.3f} |" in text  # examples, steps, loss


def test_rhythms_are_compared_game_by_game(ablation_dir):
    ablation = load_ablation(ablation_dir)
    (pair,) = paired(ablation, "valid_unseen")
    act_wins = ablation.sets["valid_unseen"][1].wins["All"]
    assert (pair.first, pair.second, pair.games) == ("sparse", "act", 6)
    assert (pair.both_won, pair.only_first, pair.only_second) == (act_wins, 6 - act_wins, 0)
    assert f"| sparse vs act | 6 | {act_wins} | {6 - act_wins} | 0 | {pair.p_value:.2g} |" in \
        write_ablation_report(ablation_dir).read_text()


def test_an_unfinished_evaluation_is_flagged(ablation_dir, tmp_path):
    shutil.copytree(ablation_dir, tmp_path / "ablation")
    episodes = tmp_path / "ablation" / "eval-act-valid_unseen" / "episodes.jsonl"
    episodes.write_text("".join(episodes.read_text().splitlines(keepends=True)[:3]))
    text = write_ablation_report(tmp_path / "ablation").read_text()
    assert "Not finished: act has played 3 of the 6 episodes" in text and "Not finished: sparse" not in text


def test_the_paired_p_value_is_the_exact_two_sided_sign_test():
    # 18 vs 7 discordant games: 2 * P(X <= 7), X ~ Binomial(25, 1/2) = 2 * 726206 / 2**25
    assert abs(PairedComparison("a", "b", 140, 112, 18, 7).p_value - 0.04329) < 1e-5
    assert PairedComparison("a", "b", 10, 5, 0, 0).p_value == 1.0
    assert PairedComparison("a", "b", 10, 0, 5, 5).p_value == 1.0


def test_a_card_says_when_its_training_time_is_one_sitting_of_several():
    card = {"first_loss": 0.0336, "last_loss": 0.0207, "seconds_this_run": 998.9, "peak_rss_mb_this_run": 5318}
    assert _facts(card, where=" here") == ["loss 0.034 → 0.021", "17 minutes here", "peak memory 5,318 MB"]
    resumed = _facts({**card, "resumed_from": "checkpoint-40"}, where=" here")
    assert resumed[1] == "17 minutes here in the sitting that resumed from checkpoint-40"
    summed = _facts({**card, "resumed_from": "checkpoint-40", "seconds": 2498.9}, where=" here")
    assert summed[1] == "42 minutes here over sittings (resumed from checkpoint-40)"


def test_a_folder_without_runs_is_named(tmp_path):
    with pytest.raises(RecordError, match=str(tmp_path)):
        load_ablation(tmp_path)


def test_the_ablation_notebook_is_stored_clean_and_runs(ablation_dir, monkeypatch):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
    assert "parameters" in code[0].metadata.get("tags", [])
    monkeypatch.setenv("SPARSE_REACT_ABLATION", str(ablation_dir))
    execute(nb)
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, "\n".join(f"{o.ename}: {o.evalue}" for o in errors)
    outputs = "\n".join(texts(nb.cells))
    assert "valid_unseen: sparse (6 episodes), act (6 episodes)" in outputs
    assert "valid_unseen: sparse 100% > act" in outputs and "ReAct (sparse) 71%" in outputs
    assert "sparse vs act: " in outputs and "games only one won, p = " in outputs
    assert sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", [])) == 1
