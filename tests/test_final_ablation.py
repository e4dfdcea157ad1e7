"""`experiments/final_ablation.py`: the four rhythms under both budget rules, each (rule, set, rhythm)
its own run folder, the finished runs kept as compact records, in a folder per adapter named by its weights'
hash, that the tables are printed from. Played here by the searching expert with a budget of 12, where a
thought's step is felt."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sparse_react.errors import UserError
from sparse_react.trajectory import EPISODES_FILE, read_episodes

EXPERIMENTS = Path(__file__).parents[1] / "experiments"
SCRIPT = EXPERIMENTS / "final_ablation.py"
sys.path.insert(0, str(EXPERIMENTS))


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
    for path in records.glob(f"search-expert/{rule}-valid_unseen-*.jsonl"):
        for r in map(json.loads, path.read_text().splitlines()):
            out[r["rhythm"]] = out.get(r["rhythm"], 0) + r["won"]
    return out


def test_each_rule_and_rhythm_is_its_own_run_and_act_plays_once(played):
    root, _, _ = played
    steps, actions = wins(root / "records", "steps"), wins(root / "records", "actions")
    assert set(steps) == {"sparse", "dense", "im", "act"} and set(actions) == {"sparse", "dense", "im"}
    # An expert has no weights: its records are keyed by its name, and no row names an adapter.
    assert [p.name for p in (root / "records").iterdir() if p.is_dir()] == ["search-expert"]
    for record in (root / "records").glob("*/*.jsonl"):
        episodes = read_episodes(root / "runs" / record.stem / EPISODES_FILE)
        recorded = [json.loads(line) for line in record.read_text().splitlines()]
        assert len(recorded) == 6 and [(e.rhythm, e.game_name, e.won, len(e.entries), None) for e in episodes] == [
            (r["rhythm"], r["game"], r["won"], r["lines"], r["adapter"]) for r in recorded]
    # Half of dense's 12 steps go to thoughts under the paper's rule; with 12 actions it plays as act does.
    assert steps["dense"] < actions["dense"] == steps["act"]


def test_the_tables_come_from_the_records_and_a_rerun_plays_nothing(played):
    root, first, again = played
    assert "dense search-expert steps vs dense search-expert actions" in first
    assert "sparse search-expert actions vs im search-expert actions" in first
    assert "act search-expert steps vs act search-expert actions" not in first
    assert again.count("# done, skipped") == 7 and first.count("# done, skipped") == 0
    assert first.split("# The four rhythms")[1] == again.split("# The four rhythms")[1]
    assert (root / "records" / "final-ablation.md").read_text() in again


def test_a_record_is_keyed_by_the_hash_of_the_weights_that_played_it(tmp_path):
    from final_ablation import adapter_sha256, record_key, write_record

    one, other = "ab" * 32, "cd" * 32
    shipped = SimpleNamespace(rhythm="im", policy_spec={"kind": "shipped", "rhythms": {
        "act": {"kind": "hf", "weights_sha256": other}, "im": {"kind": "hf", "weights_sha256": one}}})
    model = SimpleNamespace(rhythm="act", policy_spec={"kind": "hf", "weights_sha256": other})
    expert = SimpleNamespace(rhythm="act", policy_spec={"kind": "search-expert"})
    assert [adapter_sha256(e) for e in (shipped, model, expert)] == [one, other, None]
    assert record_key(one, "hf") == "abababababab" and record_key(None, "scripted:a/b.txt") == "scripted_a_b.txt"

    row = {"policy": "hf", "adapter": one}
    assert write_record([row, row], tmp_path, "steps-valid_unseen-im", "abababababab") == "abababababab"
    assert (tmp_path / "abababababab" / "steps-valid_unseen-im.jsonl").read_text().count(one) == 2
    with pytest.raises(UserError, match="abababababab, cdcdcdcdcdcd"):  # a run resumed across two adapters
        write_record([row, {**row, "adapter": other}], tmp_path, "steps-valid_unseen-im", None)
    with pytest.raises(UserError, match="not by cdcdcdcdcdcd"):  # the adapter shipped since the run began
        write_record([row], tmp_path, "actions-valid_unseen-im", "cdcdcdcdcdcd")
    assert not (tmp_path / "cdcdcdcdcdcd").exists()


def test_the_committed_records_are_keyed_by_their_adapters_and_the_shipped_ones_have_theirs():
    from final_ablation import RECORDS, RHYTHMS, planned_key

    folders = [p for p in RECORDS.iterdir() if p.is_dir()]
    assert folders and all(re.fullmatch(r"[0-9a-f]{12}|unknown-.+", p.name) for p in folders)
    for folder in folders:
        rows = [json.loads(line) for path in folder.glob("*.jsonl") for line in path.read_text().splitlines()]
        assert rows and len({r["rhythm"] for r in rows}) == 1, folder
        if not folder.name.startswith("unknown-"):
            assert {r["adapter"][:12] for r in rows} == {folder.name} and all(len(r["adapter"]) == 64 for r in rows)
    for rhythm in RHYTHMS:
        assert (RECORDS / planned_key(None, rhythm) / f"steps-valid_unseen-{rhythm}.jsonl").is_file(), rhythm
