"""Reports from real episode records (expert and random agents on bundled games), never re-running a game."""

from __future__ import annotations

import csv

import pytest

from sparse_react.agent import LoopRules, run_episode
from sparse_react.env import HouseholdEnv
from sparse_react.policies.expert import ExpertPolicy
from sparse_react.policies.random_admissible import RandomPolicy
from sparse_react.report import CSV_FIELDS, load_runs, markdown_report, summarize, write_report
from sparse_react.tasks import TaskType
from sparse_react.trajectory import RecordError, append_episode

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dirs(bundled_unseen, tmp_path_factory):
    """Two run folders: `experts` (expert in sparse and act) and `random` (random in act, 8-step budget),
    one game per task type."""
    games = [next(g for g in bundled_unseen if g.task_type is t) for t in TaskType]
    root = tmp_path_factory.mktemp("runs")
    experts, random = root / "experts", root / "random"
    for rhythm in ("sparse", "act"):
        record(experts / "episodes.jsonl", games, ExpertPolicy(), rhythm, LoopRules())
    record(random / "episodes.jsonl", games, RandomPolicy(0), "act", LoopRules(max_steps=8))
    return experts, random


def record(path, games, policy, rhythm, rules):
    """Play each game once and append its episode record, as a batch evaluation does."""
    env = HouseholdEnv(list(games), max_steps=rules.max_steps)
    for game in games:
        append_episode(path, run_episode(env, policy, game, rhythm, 0, rules))


def success_cells(markdown: str, row: str) -> list[str]:
    line = next(line for line in markdown.splitlines() if line.startswith(f"| {row} |"))
    return [cell.strip() for cell in line.strip("|").split("|")][1:]


def test_side_by_side_runs_have_labelled_rows_and_success(run_dirs):
    markdown = markdown_report(load_runs(run_dirs))
    for row in ("experts/sparse", "experts/act"):
        assert success_cells(markdown, row) == ["1/1 (100%)"] * 6 + ["6/6 (100%)"]
    random_all = success_cells(markdown, "random/act")[-1]
    assert random_all.endswith("%)") and random_all != "6/6 (100%)"
    assert "| random/act | random | 6 | – |" in markdown  # no wins: no steps to success


def test_single_run_rows_are_rhythms_and_mixed_policies_are_split(run_dirs, tmp_path):
    experts, random = run_dirs
    assert [g.name for g in summarize(load_runs([experts]))] == ["sparse", "act"]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text((experts / "episodes.jsonl").read_text() + (random / "episodes.jsonl").read_text())
    [(label, episodes)] = load_runs([mixed])
    assert label == "mixed" and len(episodes) == 18
    names = [g.name for g in summarize([(label, episodes)])]
    assert names == ["sparse [expert]", "act [expert]", "act [random]"]


def test_measures_from_records(run_dirs):
    groups = {g.name: g for g in summarize(load_runs(run_dirs))}
    sparse, act, random = groups["experts/sparse"], groups["experts/act"], groups["random/act"]
    assert act.thought_density == 0 and act.thoughts_per_episode == 0
    assert 0 < sparse.thought_density < 0.5 and sparse.thoughts_per_episode > 0
    assert sparse.mean_steps_won > act.mean_steps_won > 0
    assert random.mean_steps_won is None or random.wins["All"] > 0
    losses = random.episodes - random.wins["All"]
    assert losses > 0 and random.failures["budget"] == losses
    assert sum(sparse.failures.values()) == 0
    assert random.invalid_action_rate is not None and 0 <= random.invalid_action_rate <= 1
    assert sparse.tokens_per_episode is None  # the expert counts no tokens
    assert all(g.time_per_episode > 0 for g in groups.values())


def test_write_report_files(run_dirs, tmp_path):
    paths = write_report(load_runs(run_dirs), tmp_path / "out")
    assert set(paths) == {"markdown", "csv", "success_by_task", "thought_density", "steps_to_success"}
    assert "## Success by task type" in paths["markdown"].read_text()

    with paths["csv"].open(newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
    assert tuple(reader.fieldnames) == CSV_FIELDS
    assert [r["group"] for r in rows] == ["experts/sparse", "experts/act", "random/act"]
    by_group = {r["group"]: r for r in rows}
    assert by_group["experts/act"]["All_success_pct"] == "100.0" and by_group["experts/act"]["All_games"] == "6"
    assert float(by_group["random/act"]["All_success_pct"]) < 100
    assert float(by_group["experts/act"]["thought_density"]) == 0
    assert 0 < float(by_group["experts/sparse"]["thought_density"]) < 0.5
    assert by_group["experts/sparse"]["tokens_per_episode"] == ""

    for name in ("success_by_task", "thought_density", "steps_to_success"):
        data = paths[name].read_bytes()
        assert paths[name].name == f"{name}.png"
        assert data.startswith(PNG_MAGIC) and len(data) > 5_000


def test_path_without_episodes_is_named(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(RecordError, match="empty.jsonl.*no episodes"):
        load_runs([empty])
    folder = tmp_path / "no_records"
    folder.mkdir()
    with pytest.raises(ValueError, match="no_records.*no episodes.jsonl"):
        load_runs([folder])
    with pytest.raises(RecordError, match="missing.jsonl"):
        load_runs([tmp_path / "missing.jsonl"])
