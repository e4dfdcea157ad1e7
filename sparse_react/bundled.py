"""Where the data that ships with the package lies: `prompts/` and `games/` at the top of a source
checkout, `sparse_react/_bundled/` in an installed wheel (pyproject.toml maps one onto the other)."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
ADAPTERS_DIR = PACKAGE / "adapters"  # the trained LoRA adapters, one folder per rhythm (policies/shipped.py)


def bundled_dir(name: str) -> Path:
    """The folder `name` (`prompts` or `games`) of the installed package, else of the source checkout."""
    installed = PACKAGE / "_bundled" / name
    return installed if installed.is_dir() else PACKAGE.parent / name
