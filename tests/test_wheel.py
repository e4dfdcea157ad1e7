"""The package as a user installs it: a built wheel carries the prompts, the bundled games, the
search ranking and the shipped adapters, and runs from a folder outside the checkout.

The wheel goes into a fresh virtual environment; its dependencies (torch, transformers, alfworld,
...) come from this test run's environment through a path file, so the test builds and installs
only sparse_react itself and needs no network."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from sparse_react.policies.shipped import shipped_rhythms

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel")
    # pip builds in the source tree (build/, *.egg-info): two test workers building at once from the
    # checkout collide, so each builds from its own copy of what is tracked.
    source = root / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(".git", ".venv", "runs", "build", "*.egg-info",
                                                                 "__pycache__", ".pytest_cache", "test-artifacts"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                            "-w", str(root / "dist"), str(source)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = (root / "dist").glob("sparse_react-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # The dependencies from this environment, after the fresh venv's own site-packages; a .pth in
    # a folder named by a .pth line is not run, so this environment's editable sparse_react stays out.
    Path(site, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
                              str(wheel)], capture_output=True, text=True, env=clean_env())
    assert install.returncode == 0, install.stderr[-3000:]
    work = root / "elsewhere"
    work.mkdir()
    return wheel, root / "venv" / "bin", work


def clean_env() -> dict[str, str]:
    """This environment without anything that points Python at the checkout."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SPARSE_REACT_") and k != "PYTHONPATH"}


def run(bin_dir: Path, work: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(bin_dir / args[0]), *args[1:]], cwd=work, env={**clean_env(), "HF_HUB_OFFLINE": "1"},
                          capture_output=True, text=True, timeout=timeout)


def test_the_wheel_carries_the_data(installed):
    wheel, _, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert sum(n.startswith("sparse_react/_bundled/games/valid_unseen/") and n.endswith("game.json")
               for n in names) == 120
    assert sum(n.startswith("sparse_react/_bundled/prompts/") and n.endswith(".yaml") for n in names) == 6
    assert "sparse_react/policies/search_order.json" in names
    assert "sparse_react/training/dev_split.txt" in names  # the dev split `sparse-react train` chooses on
    assert {"sparse_react/view/templates/base.html", "sparse_react/view/templates/style.css"} <= set(names)
    for rhythm in shipped_rhythms():
        assert f"sparse_react/adapters/{rhythm}/adapter_model.safetensors" in names
        assert f"sparse_react/adapters/{rhythm}/sparse_react.json" in names


def test_the_installed_package_runs_outside_the_checkout(installed):
    _, bin_dir, work = installed
    where = run(bin_dir, work, "python", "-c", "import sparse_react.prompts as p; print(p.__file__, p.prompts_dir())")
    assert where.returncode == 0, where.stderr
    assert str(REPO) not in where.stdout and "_bundled/prompts" in where.stdout

    listed = run(bin_dir, work, "sparse-react", "games", "list")
    assert listed.returncode == 0, listed.stderr
    assert "| valid_unseen | 20 | 20 | 20 | 20 | 20 | 20 | 120 |" in listed.stdout

    expert = run(bin_dir, work, "sparse-react", "eval", "--games", "valid_unseen", "--policy", "search-expert",
                 "--task-types", "look_at_obj_in_light,pick_two_obj_and_place", "--limit", "3", "--out", "runs/expert")
    assert expert.returncode == 0, expert.stderr[-3000:]
    assert "3/3 (100%)" in expert.stdout and (work / "runs" / "expert" / "episodes.jsonl").is_file()

    site = run(bin_dir, work, "sparse-react", "view", "runs/expert", "--static", "site")
    assert site.returncode == 0, site.stderr[-3000:]
    assert "3/3 (100%)" in (work / "site" / "index.html").read_text()


@pytest.mark.skipif("sparse" not in shipped_rhythms(), reason="no shipped sparse adapter in this checkout")
def test_the_installed_package_plays_the_shipped_sparse_agent(installed):
    _, bin_dir, work = installed
    played = run(bin_dir, work, "sparse-react", "run", "valid_unseen", "--index", "0", "--max-steps", "8",
                 "--out", "runs/one.jsonl")
    assert played.returncode == 0, played.stderr[-3000:]
    assert "sparse · hf" in played.stdout and "steps" in played.stdout
    record = (work / "runs" / "one.jsonl").read_text()
    assert '"rhythm": "sparse"' in record and '"error": null' in record


def test_the_readmes_python_quickstart_prints_a_table_from_the_installed_wheel(installed):
    from test_docs import python_blocks

    _, bin_dir, work = installed
    [quickstart] = python_blocks(REPO / "README.md")
    (work / "quickstart.py").write_text(quickstart)
    result = run(bin_dir, work, "python", "quickstart.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| expert (sparse) |" in result.stdout and "| sparse vs act |" in result.stdout
    assert "True" in result.stdout.splitlines()[-1]  # the expert won its episode
