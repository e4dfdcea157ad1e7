"""Shared fixtures. Real games only: ALFWorld data from ALFWORLD_DATA (or ../shared beside the repo)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_ALFWORLD = REPO.parent / "shared" / "alfworld"

# pytest -n N puts N workers on the same cores; torch in each would take them all (N times too many threads:
# the suite took 22 minutes on 2 cores, 7.5 with this), so each takes its share, as evaluate's workers do.
if workers := os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // int(workers))))

if "ALFWORLD_DATA" not in os.environ and (SHARED_ALFWORLD / "json_2.1.1").is_dir():
    os.environ["ALFWORLD_DATA"] = str(SHARED_ALFWORLD)

NO_ALFWORLD = (
    "ALFWorld data not found: set ALFWORLD_DATA to the folder holding json_2.1.1 "
    "(the official download, or ../shared/alfworld beside this repo) to run these tests"
)


@pytest.fixture(scope="session")
def alfworld_json() -> Path:
    """ALFWorld's json_2.1.1 folder; skips the test with a how-to when it is absent."""
    root = os.environ.get("ALFWORLD_DATA")
    for candidate in (Path(root) / "json_2.1.1", Path(root)) if root else ():
        if (candidate / "valid_seen").is_dir():
            return candidate
    pytest.skip(NO_ALFWORLD)


@pytest.fixture(scope="session")
def valid_seen_games(alfworld_json):
    from sparse_react.household.catalog import find_games

    return find_games("alfworld:valid_seen")


@pytest.fixture(scope="session")
def bundled_unseen():
    from sparse_react.household.catalog import find_games

    return find_games("valid_unseen")

