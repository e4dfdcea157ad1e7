"""Reports from real episode records (expert and random agents on bundled games), never re-running a game."""

from __future__ import annotations

import csv
import json
import shutil

import pytest

from sparse_react.agent import LoopRules, run_episode
from sparse_react.household.catalog import game_ref
from sparse_react.household.env import HouseholdEnv
from sparse_react.household.tasks import TaskType
from sparse_react.policies.expert import ExpertPolicy
from sparse_react.policies.random_admissible import RandomPolicy
from sparse_react.report import CSV_FIELDS, PairedComparison, load_runs, markdown_report, summarize, write_report
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
    env = HouseholdEnv(list(games))
    for game in games:
        append_episode(path, run_episode(env, policy, game, rhythm, 0, rules))


def success_cells(markdown: str, row: str) -> list[str]:
    line = next(line for line in markdown.splitlines() if line.startswith(f"| {row} |"))
    return [cell.strip() for cell in line.strip("|").split("|")][1:]


def raw(folder):
    """The run's records as plain JSON: what the report must agree with, read without its code."""
    return [json.loads(line) for line in (folder / "episodes.jsonl").read_text().splitlines()]


def test_side_by_side_runs_have_labelled_rows_and_success(run_dirs):
    markdown = markdown_report(load_runs(run_dirs))
    for row in ("experts/sparse", "experts/act"):
        assert success_cells(markdown, row) == ["1/1 (100%)"] * 6 + ["6/6 (100%)"]
    records = raw(run_dirs[1])
    cells = [f"{sum(r['won'] for r in records if r['task_type'] == t.value)}/1" for t in TaskType]
    wins = sum(r["won"] for r in records)
    assert [c.split(" ")[0] for c in success_cells(markdown, "random/act")] == cells + [f"{wins}/6"]


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
    experts, randoms = raw(run_dirs[0]), raw(run_dirs[1])
    sparse_records = [r for r in experts if r["rhythm"] == "sparse"]
    thoughts = [sum(e["kind"] == "thought" for e in r["entries"]) for r in sparse_records]
    assert act.thought_density == 0 and act.thoughts_per_episode == 0
    assert sparse.thoughts_per_episode == pytest.approx(sum(thoughts) / 6) and sum(thoughts) >= 6
    assert sparse.thought_density == pytest.approx(sum(n / len(r["entries"]) for n, r in zip(thoughts, sparse_records)) / 6)
    assert sparse.mean_steps_won == pytest.approx(sum(len(r["entries"]) for r in sparse_records) / 6)
    assert sparse.mean_steps_won > act.mean_steps_won
    won = [len(r["entries"]) for r in randoms if r["won"]]
    assert random.mean_steps_won == (sum(won) / len(won) if won else None)
    assert random.failures["budget"] == sum(r["failure"] == "budget" for r in randoms) == 6 - len(won)
    assert sum(sparse.failures.values()) == 0
    actions = [e for r in randoms for e in r["entries"] if e["kind"] == "action"]
    assert random.invalid_action_rate == pytest.approx(
        sum(e["observation"] == "Nothing happens." for e in actions) / len(actions))
    assert sparse.tokens_per_episode is None  # the expert counts no tokens
    assert act.time_per_episode == pytest.approx(sum(r["wall_time"] for r in experts if r["rhythm"] == "act") / 6)


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


def test_game_by_game_pairs_rhythms_within_a_run_and_each_rhythm_across_runs(run_dirs):
    markdown = markdown_report(load_runs(run_dirs))
    random_wins = sum(r["won"] for r in raw(run_dirs[1]))
    # Within `experts`, both rhythms won every game; across runs, only act was played by both.
    assert "| experts/sparse vs experts/act | 6 | 6 | 0 | 0 | 1 |" in markdown
    assert (f"| experts/act vs random/act | 6 | {random_wins} | {6 - random_wins} | 0 | "
            f"{PairedComparison('a', 'b', 6, random_wins, 6 - random_wins, 0).p_value:.2g} |") in markdown
    assert "experts/sparse vs random/act" not in markdown and "random/act vs experts" not in markdown
    assert "## Game by game" not in markdown_report(load_runs(run_dirs[1:]))  # one rhythm in one run: no pair


def test_pairs_match_games_by_name_wherever_their_files_sit(run_dirs, bundled_unseen, tmp_path):
    """Two machines (or two ALFWORLD_DATA spellings) hold the same games at different paths: the pairs still meet."""
    originals = [next(g for g in bundled_unseen if g.task_type is t) for t in TaskType]
    moved = []
    for game in originals:
        folder = tmp_path / "elsewhere" / game.name
        shutil.copytree(game.path.parent, folder)
        moved.append(game_ref(folder / game.path.name))
    record(tmp_path / "moved" / "episodes.jsonl", moved, ExpertPolicy(), "act", LoopRules())
    assert {r["game"] for r in raw(tmp_path / "moved")}.isdisjoint(r["game"] for r in raw(run_dirs[0]))
    markdown = markdown_report(load_runs([run_dirs[0], tmp_path / "moved"]))
    assert "| experts/act vs moved/act | 6 | 6 | 0 | 0 | 1 |" in markdown
