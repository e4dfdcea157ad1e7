"""The documentation a person reads is run as a test: docstring examples, and every Python block of
the README and of docs/ (a page's blocks in order, sharing one namespace, in a fresh folder)."""

from __future__ import annotations

import doctest
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sparse_react
import sparse_react.household.env

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(page: Path) -> list[str]:
    """The ```python blocks of a Markdown page, in order."""
    return BLOCK.findall(page.read_text())


@pytest.mark.parametrize("module", [sparse_react.household.env, sparse_react])
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 2 and result.failed == 0


def test_every_page_with_python_has_blocks_the_test_finds():
    found = {page.name: len(python_blocks(page)) for page in PAGES}
    assert found["README.md"] == 1 and found["index.md"] >= 1, found
    assert sum(found.values()) >= 8, found


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.name)
def test_the_python_blocks_of_a_page_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__docs__"}
    for number, block in enumerate(python_blocks(page), start=1):
        try:
            exec(compile(block, f"{page.name} block {number}", "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"{page.name}, Python block {number} failed: {type(exc).__name__}: {exc}\n{block}")


def test_the_readme_stays_short_and_states_the_two_commands():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert "bash .ci/run" in text and "sparse-react eval --games valid_unseen --out runs/sparse" in text
    ci = (REPO / ".ci" / "run").read_text()
    assert "pip install --quiet torch==2.13.0" in ci and "-e '.[test]'" in ci


@pytest.mark.skipif(shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None,
                    reason="mkdocs is not installed (pip install -e '.[test]')")
def test_the_docs_site_builds_strictly(tmp_path):
    result = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict", "--site-dir",
                             str(tmp_path / "site")], cwd=REPO, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "api" / "index.html").is_file()
