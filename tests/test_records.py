"""Records under hostile input and concurrent writers: a line's types are checked when it is read,
a bad line is an error row naming its line and field and costs only itself (in the view, the
report, export, relabel and resume), and every writer appends under one lock that leaves no file."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from test_agent import FollowThoughts

from sparse_react.agent import run_episode
from sparse_react.household.env import HouseholdEnv
from sparse_react.policies.expert import ExpertPolicy
from sparse_react.report import load_runs, markdown_report
from sparse_react.resume import load_episode
from sparse_react.training.export import export
from sparse_react.training.relabel import relabel_runs
from sparse_react.trajectory import RecordError, append_episode, read_episodes, read_records, record_lock
from sparse_react.view import create_app


def _set(path: str, value):
    def change(record: dict) -> str:
        *parents, last = path.split(".")
        target = record
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[last] = value
        return json.dumps(record)
    return change


# each bad line the issue reproduced, and the field its error row must name
BAD_LINES = {
    "nested 100,000 deep": (lambda record: "[" * 100_000 + "]" * 100_000, ""),
    "wall_time a string": (_set("wall_time", "1.5"), "wall_time"),
    "wall_time null": (_set("wall_time", None), "wall_time"),
    "won yes": (_set("won", "yes"), "won"),
    "won null": (_set("won", None), "won"),
    "tokens many": (_set("entries.0.tokens", "many"), "entries[0].tokens"),
    "rhythm null": (_set("rhythm", None), "rhythm"),
    "settings a list": (_set("settings", [1, 2]), "settings"),
    "an entry's text null": (_set("entries.1.text", None), "entries[1].text"),
    "loop_repeats x": (_set("settings.loop_repeats", "x"), "settings.loop_repeats"),
}


@pytest.fixture(scope="module")
def lines(bundled_unseen) -> list[str]:
    """Two real episode lines: the expert on two bundled games."""
    games = bundled_unseen[:2]
    return [json.dumps(run_episode(HouseholdEnv(games), ExpertPolicy(), game, "sparse").to_dict()) for game in games]


def bad_run(folder: Path, lines: list[str], bad: bytes) -> Path:
    folder.mkdir(parents=True)
    (folder / "episodes.jsonl").write_bytes(lines[0].encode() + b"\n" + bad + b"\n" + lines[1].encode() + b"\n")
    return folder


def bad_line(name: str, lines: list[str]) -> tuple[bytes, str]:
    if name == "not UTF-8":
        return lines[0].replace("OK.", "OK\xff.").encode("latin-1", errors="replace"), ""
    make, field = BAD_LINES[name]
    return make(json.loads(lines[0])).encode(), field


@pytest.mark.parametrize("name", [*BAD_LINES, "not UTF-8"])
def test_a_bad_line_is_an_error_row_naming_its_line_and_field_and_the_rest_reads(name, lines, tmp_path):
    bad, field = bad_line(name, lines)
    run = bad_run(tmp_path / "bad", lines, bad)
    good = bad_run(tmp_path / "good", lines, lines[1].encode())
    records = read_records(run / "episodes.jsonl")
    assert records.lines == [1, 3] and [b.line for b in records.bad] == [2]
    assert records.bad[0].field == field and str(records.bad[0]).startswith(f"{run / 'episodes.jsonl'}, line 2: ")
    if name == "not UTF-8":
        assert "not UTF-8" in records.bad[0].message
    with pytest.raises(RecordError, match=re.escape(f"line 2: {field}")):
        read_episodes(run / "episodes.jsonl")

    client = TestClient(create_app([run, good]), base_url="http://127.0.0.1")
    for url in ("/", "/episodes", "/episodes?run=0", "/episodes?q=OK", "/runs/0/episodes/1", "/runs/1/episodes/2",
                "/compare/0/0/0/1"):
        assert client.get(url).status_code in (200, 400), url  # 400: side by side of two games, a refusal
    listed = client.get("/episodes?run=0").text
    assert f"bad, line 2: {field + ': ' if field else ''}" in listed and listed.count("episode-row") == 2
    assert client.get("/episodes?run=1").text.count("episode-row") == 3  # the other run is untouched

    skipped: list = []
    runs = load_runs([run, good], skipped)
    assert [len(episodes) for _, episodes in runs] == [2, 3] and [(b.line, b.field) for b in skipped] == [(2, field)]
    assert "## Lines that are not episodes (left out)" in markdown_report(runs, skipped)


def test_report_export_relabel_and_resume_leave_a_bad_line_out_and_name_it(lines, tmp_path):
    run = bad_run(tmp_path / "bad", lines, _set("won", "yes")(json.loads(lines[0])).encode())
    report = subprocess.run([sys.executable, "-m", "sparse_react.cli", "report", str(run), "--out", str(tmp_path / "r")],
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    assert "left out:" in report.stderr and "line 2: won: Input should be a valid boolean" in report.stderr
    assert "2/2 (100%)" in report.stdout and "| 2 | won | Input should be a valid boolean" in (tmp_path / "r" / "report.md").read_text()

    exported = export([run], tmp_path / "data.jsonl", exclude=[])
    assert exported.examples == 2 and [(b.line, b.field) for b in exported.skipped] == [(2, "won")]
    relabelled = relabel_runs([run], tmp_path / "relabelled.jsonl", exclude=[])
    assert relabelled.episodes == 2 and [(b.line, b.field) for b in relabelled.skipped] == [(2, "won")]
    assert load_episode(run / "episodes.jsonl", 1).game == json.loads(lines[1])["game"]  # episodes count past it


APPENDER = """
import sys
from sparse_react.trajectory import append_episode, parse_episode
episode = parse_episode(sys.stdin.readline())
print("ready", flush=True)
append_episode(sys.argv[1], episode)
"""


def test_an_append_waits_for_the_lock_and_a_cut_off_line_is_dropped(lines, tmp_path):
    record = tmp_path / "run" / "episodes.jsonl"
    record.parent.mkdir()
    record.write_text(lines[0] + "\n" + lines[1][:200])  # a writer died mid-line
    with record_lock(record):
        assert record.read_text() == lines[0] + "\n"
        writer = subprocess.Popen([sys.executable, "-c", APPENDER, str(record)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        writer.stdin.write(lines[1] + "\n")
        writer.stdin.flush()
        assert writer.stdout.readline() == "ready\n"
        time.sleep(1)
        assert writer.poll() is None and record.read_text() == lines[0] + "\n"  # still waiting for the lock
    assert writer.wait(timeout=60) == 0
    assert [e.game for e in read_episodes(record)] == [json.loads(line)["game"] for line in lines]
    assert list(record.parent.iterdir()) == [record]  # no lock file beside it


def test_eval_and_steering_together_interleave_no_line_and_lose_none(bundled_unseen, tmp_path):
    run = tmp_path / "run"
    games = 24
    evaluation = subprocess.Popen([sys.executable, "-m", "sparse_react.cli", "eval", "--games", "valid_unseen",
                                   "--policy", "expert", "--limit", str(games), "--out", str(run)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    record = run / "episodes.jsonl"
    deadline = time.monotonic() + 300
    while not (record.is_file() and read_records(record).episodes) and time.monotonic() < deadline:
        time.sleep(0.2)
    client = TestClient(create_app([run], policy_for=lambda run, episode: FollowThoughts(["think: plan: look"] * 30)),
                        base_url="http://127.0.0.1")
    steered = []
    for n in range(4):
        response = client.post("/runs/0/episodes/0/steer", data={"step": "1", "thought": f"plan: look {n}",
                                                                  "mode": "edit"}, follow_redirects=False)
        assert response.status_code == 303, response.text
        steered.append(int(response.headers["location"].rsplit("/", 1)[1]))
    assert evaluation.wait(timeout=600) == 0, evaluation.stderr.read()
    records = read_records(record)
    assert records.bad == [] and len(records.episodes) == games + 4
    assert [records.episodes[i].entries[0].text for i in steered] == [f"plan: look {n}" for n in range(4)]
    assert sum(not e.steered for e in records.episodes) == games
    assert sorted(p.name for p in run.iterdir()) == ["episodes.jsonl", "settings.json"]  # no lock file left
