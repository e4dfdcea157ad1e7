"""`sparse-react view` in a real browser (headless Chromium through Playwright) over run folders the
expert and scripted policies wrote: the report table, filters, one episode, two side by side,
steering an edited thought to a win, escaping, path confinement, bad lines and the static export.

Screenshots of every page go to test-artifacts/view/ (or $SPARSE_REACT_ARTIFACTS). Without Chromium or
Playwright the browser tests skip with the reason; the ones that need no browser still run."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from sparse_react.agent import LoopRules, run_episode
from sparse_react.evaluation import RunSettings, evaluate
from sparse_react.household.env import HouseholdEnv
from sparse_react.household.game_files import load_game_data
from sparse_react.household.tasks import TaskType
from sparse_react.policies.expert import ExpertPolicy
from sparse_react.trajectory import Failure, append_episode, read_episodes

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("SPARSE_REACT_ARTIFACTS", REPO / "test-artifacts")) / "view"
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
LAPTOP = {"width": 1366, "height": 800}
HOSTILE = "<script>window.hacked = 1</script><b>bold?</b>"

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # the test extra is not installed
    sync_playwright = None

NO_BROWSER = "browser tests need Playwright (pip install -e '.[test]') and Debian's chromium (apt-get install chromium)"


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparse_react.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


@pytest.fixture(scope="module")
def sample(bundled_unseen):
    return [next(g for g in bundled_unseen if g.task_type is t) for t in TaskType]


@pytest.fixture(scope="module")
def run_dirs(sample, tmp_path_factory):
    """`experts`: the expert in sparse, dense and act on one game per task type (an eval run folder);
    `scripted`: `sparse-react eval` with a scripted file that thinks, sends a command the game refuses,
    then looks until the loop check ends the episode."""
    root = tmp_path_factory.mktemp("view-runs")
    experts = root / "experts"
    rhythms = ("sparse", "dense", "act")
    settings = RunSettings("valid_unseen", "expert", rhythms, policy_spec=ExpertPolicy().spec())
    evaluate(sample, ExpertPolicy(), rhythms, run_dir=experts, settings=settings, progress=False)
    script = root / "script.txt"
    script.write_text("think: I should look around the room first\nfly to the moon\nlook\nlook\nlook\n")
    scripted = root / "scripted"
    result = cli("eval", "--games", "valid_unseen", "--limit", "2", "--policy", f"scripted:{script}",
                 "--rhythms", "sparse", "--out", str(scripted))
    assert result.returncode == 0, result.stderr
    return experts, scripted


@pytest.fixture(scope="module")
def hostile_run(run_dirs, tmp_path_factory):
    """A copy of a real record whose first thought and observation carry markup, plus a malformed line."""
    folder = tmp_path_factory.mktemp("hostile") / "hostile"
    folder.mkdir()
    lines = (run_dirs[0] / "episodes.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    record["entries"][0]["text"] = HOSTILE
    record["entries"][1]["observation"] = "<img src=x onerror=\"window.hacked = 2\">"
    (folder / "episodes.jsonl").write_text(json.dumps(record) + "\nthis line is not json\n" + lines[1] + "\n")
    return folder


@pytest.fixture(scope="module")
def steer_run(sample, tmp_path_factory):
    """A thought-following scripted episode that loses: its plan thoughts only look and check the inventory."""
    from test_agent import FollowThoughts

    record = tmp_path_factory.mktemp("steer") / "steer" / "episodes.jsonl"
    script = ["think: plan: look", "think: plan: inventory"] * 10
    env = HouseholdEnv([sample[1]])
    episode = run_episode(env, FollowThoughts(script), sample[1], "sparse", rules=LoopRules(max_steps=12))
    assert not episode.won
    append_episode(record, episode)
    return record.parent, script


@pytest.fixture(scope="module")
def server(run_dirs, hostile_run, steer_run):
    """The app over four runs (experts, scripted, hostile, steer), served by uvicorn on a free
    loopback port; the steer run carries on with the thought-following script (a model stand-in)."""
    import uvicorn
    from test_agent import FollowThoughts

    from sparse_react.view import create_app

    steer_folder, script = steer_run
    app = create_app([*run_dirs, hostile_run, steer_folder], policy_for=lambda run, episode: FollowThoughts(script))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
    instance = uvicorn.Server(config)
    thread = threading.Thread(target=instance.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not (instance.started and instance.servers):
        assert time.time() < deadline, "the app did not start"
        time.sleep(0.05)
    port = instance.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    instance.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser():
    if sync_playwright is None or CHROMIUM is None:
        pytest.skip(NO_BROWSER)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport=LAPTOP)
    yield context.new_page()
    context.close()


def shot(page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def cells(table) -> list[list[str]]:
    return [[c.strip() for c in row] for row in table.locator("tbody tr").evaluate_all(
        "rows => rows.map(r => [...r.children].map(c => c.innerText))")]


def test_runs_page_shows_the_reports_table(server, page, run_dirs, tmp_path):
    report = cli("report", *map(str, run_dirs), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    success_md, rest = (tmp_path / "report" / "report.md").read_text().split("## Game by game")
    pairs_md, behaviour_md = rest.split("## Where thoughts go")[0].split("## Behaviour")
    page.goto(server + "/")
    for table, markdown in ((page.locator("#success"), success_md), (page.locator("#pairs"), pairs_md),
                            (page.locator("#measures"), behaviour_md)):
        expected = [[c.strip() for c in line.strip("|").split("|")] for line in markdown.splitlines()
                    if line.startswith("| ") and not line.startswith(("| ---", "|  |", "| pair |"))]
        shown = cells(table)
        assert expected
        # the page shows every run it was given; the report got the first two
        assert [row for row in shown if {n.split("/")[0] for n in row[0].split(" vs ")} <= {"experts", "scripted"}] \
            == expected
    assert ["experts/sparse", *["1/1 (100%)"] * 6, "6/6 (100%)"] in cells(page.locator("#success"))
    names = page.locator("#measures thead th").all_inner_texts()
    measures = {row[0]: row for row in cells(page.locator("#measures"))}
    assert measures["scripted/sparse"][names.index("loop")] == "2"  # both scripted episodes looped
    assert page.locator(".plots img").count() == 3
    shot(page, "runs")


def test_filters_narrow_the_list(server, page, run_dirs):
    records = [e for folder in run_dirs for e in read_episodes(folder / "episodes.jsonl")]
    page.goto(server + "/episodes")
    total = page.locator("tr.episode-row").count()
    assert total >= len(records)
    page.select_option("select[name=rhythm]", "act")
    page.click("button[type=submit]")
    expect(page.locator("tr.episode-row")).to_have_count(sum(e.rhythm == "act" for e in records))
    page.select_option("select[name=rhythm]", "")
    page.select_option("select[name=failure]", "loop")
    page.click("button[type=submit]")
    looped = [e for e in records if e.failure is Failure.LOOP]
    assert len(looped) == 2
    expect(page.locator("tr.episode-row")).to_have_count(len(looped))
    page.select_option("select[name=failure]", "")
    page.select_option("select[name=run]", label="experts")
    page.select_option("select[name=task]", label="Heat")
    page.click("button[type=submit]")
    expect(page.locator("tr.episode-row")).to_have_count(3)
    expect(page.locator("#counts")).to_contain_text("3 of")
    shot(page, "episodes-filtered")
    page.goto(server + "/episodes?q=LOOK+AROUND")
    rows = page.locator("tr.episode-row")
    assert rows.count() == 2 and all("scripted" in t for t in rows.all_inner_texts())


def test_episode_page_shows_every_entry_with_marks(server, page, run_dirs):
    episode = read_episodes(run_dirs[1] / "episodes.jsonl")[0]
    assert episode.failure is Failure.LOOP
    page.goto(server + "/episodes?run=1")
    page.locator("tr.episode-row a").first.click()
    entries = page.locator("#trajectory .entry")
    expect(entries).to_have_count(len(episode.entries))
    assert entries.evaluate_all("es => es.map(e => e.dataset.step)") == [str(e.step) for e in episode.entries]
    assert page.locator(".entry.thought").count() == len(episode.thoughts)
    expect(page.locator(".entry.thought").first).to_contain_text("I should look around the room first")
    expect(page.locator(".entry.nothing")).to_have_count(1)
    expect(page.locator(".entry.nothing .command")).to_contain_text("fly to the moon")
    expect(page.locator(".entry.loop")).to_have_count(3)
    expect(page.locator(".facts")).to_contain_text("lost: loop")
    shot(page, "episode")


def test_side_by_side_aligns_two_rhythms_of_one_game(server, page, run_dirs):
    episodes = read_episodes(run_dirs[0] / "episodes.jsonl")
    sparse = next(i for i, e in enumerate(episodes) if e.rhythm == "sparse")
    act = next(i for i, e in enumerate(episodes) if e.rhythm == "act" and e.game == episodes[sparse].game)
    page.goto(f"{server}/runs/0/episodes/{sparse}")
    page.click(f"a.compare-link:has-text('act #{act}')")
    rows = page.locator("#compare tbody tr")
    left = [e for e in episodes[sparse].entries]
    expect(rows).to_have_count(len(left))  # the expert acts alike in both rhythms: every action has its pair
    for n, entry in enumerate(left):
        row = rows.nth(n)
        assert row.locator("td").nth(0).inner_text().startswith(str(entry.step))
        if entry.kind.value == "thought":
            assert row.locator("td").nth(1).inner_text().strip() == "" and "differ" in row.get_attribute("class")
        else:
            assert entry.text in row.locator("td").nth(1).inner_text() and "same" in row.get_attribute("class")
    expect(page.locator("main")).to_contain_text("The action paths are the same")
    shot(page, "side-by-side")


def test_steering_an_edited_thought_turns_a_loss_into_a_win(server, page, sample, steer_run):
    folder, _ = steer_run
    record = folder / "episodes.jsonl"
    walkthrough = load_game_data(sample[1].path)["walkthrough"]
    page.goto(f"{server}/runs/3/episodes/0")
    expect(page.locator(".facts")).to_contain_text("lost")
    thought = page.locator(".entry.thought[data-step='3']")
    thought.locator("summary").click()
    thought.locator("textarea").fill("plan: " + "; ".join(walkthrough))
    shot(page, "steer-edit")
    thought.locator("button").click()
    page.wait_for_url(re.compile(r"/compare/3/0/3/1$"), timeout=120_000)
    header = page.locator("#compare thead th")
    expect(header.nth(0)).to_contain_text("lost")
    expect(header.nth(1)).to_contain_text("won")
    expect(page.locator("tr.parting")).to_have_count(1)
    expect(page.locator(".badge.edited")).to_have_count(1)
    shot(page, "steer-result")
    episodes = read_episodes(record)
    assert len(episodes) == 2 and episodes[1].won and episodes[1].settings["resumed_from"]["step"] == 3
    page.goto(f"{server}/episodes?run=3")
    expect(page.locator("tr.episode-row")).to_have_count(2)
    expect(page.locator("tr.episode-row").nth(1)).to_contain_text("won")


def test_bad_edits_change_no_file_and_two_edits_at_once_both_land(server, page, steer_run):
    record = steer_run[0] / "episodes.jsonl"
    page.goto(f"{server}/runs/3/episodes/0")
    before = record.read_bytes()
    for form, needle in [({"step": "2", "thought": "x", "mode": "edit"}, "is an action"),
                         ({"step": "99", "thought": "x", "mode": "edit"}, "step 99 is out of range"),
                         ({"step": "two", "thought": "x", "mode": "edit"}, "is not a step number"),
                         ({"step": "1", "thought": "  ", "mode": "edit"}, "the new thought is empty")]:
        response = httpx.post(f"{server}/runs/3/episodes/0/steer", data=form)
        assert response.status_code == 400 and needle in response.text, form
    assert httpx.post(f"{server}/runs/3/episodes/7/steer", data={"step": "1", "thought": "x"}).status_code == 404
    foreign = httpx.post(f"{server}/runs/3/episodes/0/steer", headers={"Origin": "http://elsewhere.example"},
                         data={"step": "1", "thought": "plan: look", "mode": "edit"})
    assert foreign.status_code == 403
    assert record.read_bytes() == before
    page.locator("details.insert summary").click()
    page.fill("details.insert textarea", "plan: examine nothing")
    page.locator("details.insert input[name=step]").evaluate("e => e.removeAttribute('max')")
    page.fill("details.insert input[name=step]", "40")
    page.locator("details.insert button").click()
    expect(page.locator(".message")).to_contain_text("step 40 is out of range")
    shot(page, "steer-refused")
    assert record.read_bytes() == before
    count = len(read_episodes(record))
    with ThreadPoolExecutor(2) as pool:
        posts = [pool.submit(httpx.post, f"{server}/runs/3/episodes/0/steer", timeout=120,
                             data={"step": "1", "thought": f"plan: look; inventory {n}", "mode": "edit"})
                 for n in range(2)]
        assert [p.result().status_code for p in posts] == [303, 303]
    episodes = read_episodes(record)
    assert len(episodes) == count + 2
    assert sorted(e.entries[0].text for e in episodes[-2:]) == ["plan: look; inventory 0", "plan: look; inventory 1"]


def test_texts_are_escaped_and_bad_lines_are_error_rows(server, page):
    page.goto(server + "/runs/2/episodes/0")
    expect(page.locator(".entry.thought").first).to_contain_text(HOSTILE)
    assert page.locator(".entry.thought b").count() == 0
    assert page.evaluate("window.hacked") is None
    expect(page.locator(".entry.action .observation").first).to_contain_text("<img src=x")
    shot(page, "escaped")
    page.goto(server + "/episodes?run=2")
    error = page.locator("tr.error-row")
    expect(error).to_have_count(1)
    expect(error).to_contain_text("hostile, line 2: Invalid JSON")
    assert page.locator("tr.episode-row").count() == 2  # the lines around the bad one still show
    page.goto(server + "/")
    expect(page.locator(".sources")).to_contain_text("line 2")


def test_a_reload_shows_what_a_running_eval_wrote_since(server, page, hostile_run, run_dirs):
    record = hostile_run / "episodes.jsonl"
    line = (run_dirs[0] / "episodes.jsonl").read_text().splitlines()[5]
    with record.open("a") as handle:  # an evaluation halfway through writing its next line
        handle.write(line[:100])
    page.goto(server + "/episodes?run=2")
    expect(page.locator("tr.error-row")).to_have_count(2)
    expect(page.locator("tr.error-row").nth(1)).to_contain_text("line 4: unfinished: no end of line yet")
    expect(page.locator("tr.episode-row")).to_have_count(2)
    with record.open("a") as handle:
        handle.write(line[100:] + "\n")
    page.reload()
    expect(page.locator("tr.episode-row")).to_have_count(3)
    expect(page.locator("tr.error-row")).to_have_count(1)


def test_urls_reach_no_file_outside_the_named_runs(server):
    secret = "root:"
    for path in ["/runs/9/episodes/0", "/runs/0/episodes/999", "/runs/..%2F..%2Fetc/episodes/0",
                 "/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/runs/0/episodes/0/..%2F..%2F..%2Fetc%2Fpasswd",
                 "/compare/0/0/9/0", "/episodes/../../etc/passwd"]:
        response = httpx.get(server + path)
        assert response.status_code == 404 and secret not in response.text, path


def test_static_export_writes_the_same_pages_without_steering(run_dirs, tmp_path, page):
    out = tmp_path / "site"
    result = cli("view", *map(str, run_dirs), "--static", str(out))
    assert result.returncode == 0, result.stderr
    assert f"open {out / 'index.html'}" in result.stdout
    page.goto((out / "index.html").as_uri())
    assert ["experts/sparse", *["1/1 (100%)"] * 6, "6/6 (100%)"] in cells(page.locator("#success"))
    page.click("header >> text=Episodes")
    expect(page.locator("tr.episode-row")).to_have_count(20)
    page.locator("tr.episode-row a").first.click()
    expect(page.locator("#trajectory .entry").first).to_be_visible()
    assert page.locator("details.steer").count() == 0
    page.locator("a.compare-link").first.click()
    expect(page.locator("#compare")).to_be_visible()
    shot(page, "static-compare")


def test_view_command_serves_on_loopback_and_steers_with_the_runs_policy(run_dirs, tmp_path):
    experts = shutil.copytree(run_dirs[0], tmp_path / "experts")
    before = read_episodes(experts / "episodes.jsonl")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "sparse_react.cli", "view", str(experts), "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        line = process.stdout.readline()
        assert f"http://127.0.0.1:{port}/" in line
        deadline = time.time() + 60
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/episodes")
                break
            except httpx.TransportError:
                assert time.time() < deadline and process.poll() is None, process.stderr.read()
                time.sleep(0.2)
        assert response.status_code == 200 and "18 of 18 episodes" in response.text.replace("<b>", "").replace("</b>", "")
        assert httpx.get(f"http://127.0.0.1:{port}/", headers={"Host": "attacker.example"}).status_code == 400
        steered = httpx.post(f"http://127.0.0.1:{port}/runs/0/episodes/0/steer", timeout=120,
                             data={"step": "1", "thought": "the alarmclock may be on the desk", "mode": "edit"})
        assert steered.status_code == 303 and steered.headers["location"] == "/compare/0/0/0/18"
    finally:
        process.terminate()
        process.wait(timeout=30)
    after = read_episodes(experts / "episodes.jsonl")
    assert after[:18] == before and len(after) == 19  # the expert, the run's own policy, carried on
    assert after[18].won and after[18].policy == "expert" and after[18].entries[0].mode == "human"
    missing = cli("view", str(run_dirs[0] / "nowhere"))
    assert missing.returncode == 2 and "nowhere: no such run folder" in missing.stderr and "Traceback" not in missing.stderr


def test_steering_a_scripted_run_carries_on_with_the_script_its_settings_name(run_dirs, tmp_path):
    from starlette.testclient import TestClient

    from sparse_react.view import create_app

    scripted = shutil.copytree(run_dirs[1], tmp_path / "scripted")
    client = TestClient(create_app([scripted]), base_url="http://127.0.0.1")
    response = client.post("/runs/0/episodes/1/steer", follow_redirects=False,
                           data={"step": "1", "thought": "the laptop is on the desk", "mode": "edit"})
    assert response.status_code == 303, response.text
    old, new = read_episodes(scripted / "episodes.jsonl")[1:]
    assert new.policy == "scripted" and new.settings["resumed_from"]["episode"] == 1
    assert [(e.text, e.mode) for e in new.entries[:3]] == [("the laptop is on the desk", "human"),
                                                           ("I should look around the room first", "scripted"),
                                                           ("fly to the moon", "scripted")]
    assert new.game == old.game and new.failure is Failure.LOOP
    page = client.get(response.headers["location"])
    assert page.status_code == 200 and "The action paths are the same" in page.text  # the edit is one more thought
    assert page.text.count('<tr class="differ">') == 1 and page.text.count('<tr class="same">') == 5


def test_a_run_that_has_only_begun_shows_its_episodes_as_they_come(run_dirs, tmp_path):
    from starlette.testclient import TestClient

    from sparse_react.view import create_app

    run = tmp_path / "begun"
    run.mkdir()
    shutil.copy(run_dirs[0] / "settings.json", run)  # what `eval --out` writes before its first episode
    client = TestClient(create_app([run]), base_url="http://127.0.0.1")
    assert "No episodes yet: reload while the run is written" in client.get("/").text
    lines = (run_dirs[0] / "episodes.jsonl").read_text().splitlines(keepends=True)
    (run / "episodes.jsonl").write_text("".join(lines[:2]))
    assert "<b>2</b> of 2 episodes" in client.get("/episodes").text
    assert "2/2 (100%)" in client.get("/").text
