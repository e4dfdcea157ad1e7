"""notebooks/compare_rhythms.ipynb runs top to bottom on a real run folder (expert, bundled games).

The notebook is executed with nbclient in jupyter_client's native `python3` kernel, which must be
this interpreter (a venv with ipykernel installed needs no user kernelspec).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebook test needs the test extras (nbformat)")
nbclient = pytest.importorskip("nbclient", reason="the notebook test needs the test extras (nbclient)")
pytest.importorskip("ipykernel", reason="the notebook test needs the test extras (ipykernel)")

from sparse_react.evaluation import RunSettings, evaluate  # noqa: E402
from sparse_react.household.tasks import TaskType  # noqa: E402
from sparse_react.policies.expert import ExpertPolicy  # noqa: E402
from sparse_react.trajectory import read_episodes  # noqa: E402
from checks import alfworld_found  # noqa: E402

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOK = NOTEBOOKS / "compare_rhythms.ipynb"
RHYTHMS = ("sparse", "dense", "act")
EXAMPLES_HEADING = "## Example trajectories"


def execute(nb, timeout: int = 300):
    """Run every cell in a fresh `python3` kernel, with notebooks/ as the working folder."""
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    return nb


def texts(cells) -> list[str]:
    """Every text an output carries: streams, and text/plain, text/markdown, text/html of rich outputs."""
    found = []
    for cell in cells:
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                found.append(output.text)
            for mime in ("text/plain", "text/markdown", "text/html"):
                if mime in output.get("data", {}):
                    found.append(output.data[mime])
    return found


@pytest.fixture(scope="module")
def run_dir(bundled_unseen, tmp_path_factory):
    """An expert run: one bundled valid_unseen game per task type, in sparse, dense and act."""
    games = [next(g for g in bundled_unseen if g.task_type is t) for t in TaskType]
    run = tmp_path_factory.mktemp("runs") / "expert"
    evaluate(games, ExpertPolicy(), RHYTHMS, run_dir=run,
             settings=RunSettings("valid_unseen", "expert", RHYTHMS), progress=False)
    return run


def test_the_native_python3_kernel_is_found_and_runs_this_interpreter():
    from jupyter_client.kernelspec import KernelSpecManager

    assert "python3" in KernelSpecManager().find_kernel_specs()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import sys; print(sys.prefix); print(sys.executable)")])
    prefix, executable = texts(execute(nb, timeout=60).cells)[0].split()
    assert (prefix, executable) == (sys.prefix, sys.executable), "the python3 kernel is another interpreter"


def test_notebook_is_stored_clean():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
    assert "parameters" in code[0].metadata.get("tags", []) and "RUN_DIRS = [" in code[0].source


def test_notebook_runs_on_a_run_folder(run_dir, monkeypatch):
    monkeypatch.setenv("SPARSE_REACT_RUNS", str(run_dir))
    nb = execute(nbformat.read(NOTEBOOK, as_version=4))

    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, "\n".join(f"{o.ename}: {o.evalue}" for o in errors)
    outputs = "\n".join(texts(nb.cells))
    assert f"{run_dir.name}: 18 episodes" in outputs
    for rhythm in RHYTHMS:  # the expert wins everything
        assert f"| {rhythm} | " + " | ".join(["1/1 (100%)"] * 6) + " | 6/6 (100%) |" in outputs
    assert "| thought density |" in outputs  # the behaviour table
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 5  # the report's three plots, then where thoughts go: kinds by rhythm, timelines
    assert "| dense | 6 |" in outputs  # the anatomy table, with the few-shot examples where ALFWorld's games are
    assert ("| few-shot examples (sparse) | 18 |" in outputs) == alfworld_found()

    # The sparse-vs-dense section shows a trajectory, marking a dense-only thought of a shown game.
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.startswith(EXAMPLES_HEADING))
    shown = "\n".join(texts(nb.cells[start:]))
    assert "Example 1: " in shown and "No game was played" not in shown
    episodes = read_episodes(run_dir / "episodes.jsonl")
    game = next(e.settings["game_name"] for e in episodes if f"Example 1: {e.settings['game_name']} " in shown)
    sparse, dense = (next(e for e in episodes if e.settings["game_name"] == game and e.rhythm == r)
                     for r in ("sparse", "dense"))
    dense_only = [t.text for t in dense.thoughts if t.text not in {s.text for s in sparse.thoughts}]
    assert dense_only and any(f"dense  think: {text}" in shown for text in dense_only)
    assert ">>" in shown and "◆" in shown  # the dense-only turns are marked (text and HTML)
    assert all(a.text in shown for a in sparse.actions)
