"""`experiments/final_ablation.py`: the four rhythms under both budget rules, each (rule, set, rhythm)
its own run folder, the finished runs kept as compact records the tables are printed from. Played here by the
searching expert with a budget of 12, where a thought's step is felt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparse_react.trajectory import EPISODES_FILE, read_episodes

SCRIPT = Path(__file__).parents[1] / "experiments" / "final_ablation.py"


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    if not SCRIPT.is_file():
        pytest.skip("needs a source checkout (experiments/)")
    root = tmp_path_factory.mktemp("final")
    args = [sys.executable, str(SCRIPT), "--sets", "valid_unseen", "--limit", "6", "--max-steps", "12",
            "--policy", "search-expert", "--out", str(root / "runs"), "--records", str(root / "records")]
    first = subprocess.run(args, capture_output=True, text=True, check=True)
    again = subprocess.run(args, capture_output=True, text=True, check=True)
    return root, first.stdout, again.stdout


def wins(records: Path, rule: str) -> dict[str, int]:
    """Rhythm → games won, from the records of one rule."""
    out: dict[str, int] = {}
    for path in records.glob(f"{rule}-valid_unseen-*.jsonl"):
        for r in map(json.loads, path.read_text().splitlines()):
            out[r["rhythm"]] = out.get(r["rhythm"], 0) + r["won"]
    return out


def test_each_rule_and_rhythm_is_its_own_run_and_act_plays_once(played):
    root, _, _ = played
    steps, actions = wins(root / "records", "steps"), wins(root / "records", "actions")
    assert set(steps) == {"sparse", "dense", "im", "act"} and set(actions) == {"sparse", "dense", "im"}
    for record in (root / "records").glob("*.jsonl"):
        episodes = read_episodes(root / "runs" / record.stem / EPISODES_FILE)
        recorded = [json.loads(line) for line in record.read_text().splitlines()]
        assert len(recorded) == 6 and [(e.rhythm, e.game_name, e.won, len(e.entries)) for e in episodes] == [
            (r["rhythm"], r["game"], r["won"], r["lines"]) for r in recorded]
    # Half of dense's 12 steps go to thoughts under the paper's rule; with 12 actions it plays as act does.
    assert steps["dense"] < actions["dense"] == steps["act"]


def test_the_tables_come_from_the_records_and_a_rerun_plays_nothing(played):
    root, first, again = played
    assert "dense steps vs dense actions" in first and "sparse actions vs im actions" in first
    assert "act steps vs act actions" not in first
    assert again.count("# done, skipped") == 7 and first.count("# done, skipped") == 0
    assert first.split("# The four rhythms")[1] == again.split("# The four rhythms")[1]
    assert (root / "records" / "final-ablation.md").read_text() in again
