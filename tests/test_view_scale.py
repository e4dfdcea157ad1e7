"""`sparse-react view` at the scale users run (issue 53 §6): pages of the Episodes list whose links
keep the filters and the sort, records read once and again when the file changes, search over game
names, actions and observations, sorting by a column, a bounded list of episodes to compare with,
and a static export that refuses a folder in use and names no folder of this machine.

Real records (the expert on bundled games, through `evaluate`), copied line for line into a larger
run; the real app through Starlette's TestClient (one test clicks through it in Chromium). Page
times are measured in benchmarks/bench_view.py, never here."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from sparse_react.evaluation import RunSettings, evaluate
from sparse_react.policies.expert import ExpertPolicy
from sparse_react.trajectory import read_episodes
from sparse_react.view import create_app
from sparse_react.view import records as view_records
from sparse_react.view.pages import OTHERS_SHOWN, PAGE_SIZE

REPO = Path(__file__).resolve().parents[1]
RHYTHMS = ("sparse", "dense", "act")
ROW = re.compile(r'<tr class="episode-row">(.*?)</tr>', re.S)
CELL = re.compile(r"<td>(.*?)</td>", re.S)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparse_react.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO)


def rows(page: str) -> list[list[str]]:
    """The Episodes table's rows, each as its cells' text."""
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in CELL.findall(r)] for r in ROW.findall(page)]


def links(page: str, css_class: str = "") -> list[str]:
    """The targets of the page's links (of those with `css_class`, when given)."""
    pattern = f'<a class="{css_class}" href="([^"]+)"' if css_class else r'<a (?:[^>]*\s)?href="([^"]+)"'
    return [html.unescape(h) for h in re.findall(pattern, page)]


@pytest.fixture(scope="module")
def expert_run(bundled_unseen, tmp_path_factory):
    """The expert on four bundled games in three rhythms: an `eval` run folder of 12 real records."""
    folder = tmp_path_factory.mktemp("scale") / "experts"
    settings = RunSettings("valid_unseen", "expert", RHYTHMS, policy_spec=ExpertPolicy().spec())
    evaluate(bundled_unseen[:4], ExpertPolicy(), RHYTHMS, run_dir=folder, settings=settings, progress=False)
    return folder


def copied_run(expert_run: Path, folder: Path, episodes: int) -> Path:
    """A run folder of `episodes` episodes: the real records' lines, copied in turn."""
    folder.mkdir()
    lines = (expert_run / "episodes.jsonl").read_text().splitlines()
    (folder / "episodes.jsonl").write_text("".join(lines[n % len(lines)] + "\n" for n in range(episodes)))
    shutil.copy(expert_run / "settings.json", folder)
    return folder


@pytest.fixture
def big_run(expert_run, tmp_path):
    """330 episodes: 110 of each rhythm, over 80 of each game."""
    return copied_run(expert_run, tmp_path / "big", 330)


def client_for(*folders: Path) -> TestClient:
    return TestClient(create_app(list(folders)), base_url="http://127.0.0.1")


def test_the_episodes_list_comes_in_pages_whose_links_keep_the_filters(big_run):
    episodes = read_episodes(big_run / "episodes.jsonl")
    act = [str(i) for i, e in enumerate(episodes) if e.rhythm == "act"]
    assert len(act) > PAGE_SIZE
    client = client_for(big_run)
    first = client.get("/episodes?rhythm=act&sort=-steps").text
    assert [r[1] for r in rows(first)] != [] and len(rows(first)) == PAGE_SIZE
    assert f"<b>{len(act)}</b> of {len(episodes)} episodes" in first
    following = [h for h in links(first) if "page=2" in h]
    assert following and all("rhythm=act" in h and "sort=-steps" in h for h in following), following
    second = client.get(following[0]).text
    shown = [r[1] for r in rows(first)] + [r[1] for r in rows(second)]
    assert sorted(shown, key=int) == act  # page 2 holds the rest, and nothing twice
    assert all(r[4] == "act" for r in rows(second))
    back = [h for h in links(second) if "page=" not in h and "rhythm=act" in h and "sort=-steps" in h]
    assert back, "page 2 links back to page 1 with the same filters"
    assert len(rows(client.get("/episodes?rhythm=act&sort=-steps&page=99").text)) == len(act) - PAGE_SIZE


def test_a_record_is_read_once_and_again_when_it_changes(expert_run, tmp_path, monkeypatch):
    run = shutil.copytree(expert_run, tmp_path / "growing")
    reads = []
    real = view_records.read_run
    monkeypatch.setattr(view_records, "read_run", lambda index, source: reads.append(index) or real(index, source))
    client = client_for(run)
    count = len(read_episodes(run / "episodes.jsonl"))
    for path in ("/episodes", "/", "/episodes?q=desk", "/runs/0/episodes/0", "/episodes"):
        assert client.get(path).status_code == 200
    assert len(reads) == 1, "an unchanged record is read once"
    line = (run / "episodes.jsonl").read_text().splitlines()[0]
    with (run / "episodes.jsonl").open("a") as handle:  # a running evaluation appends an episode
        handle.write(line + "\n")
    page = client.get("/episodes").text
    assert f"<b>{count + 1}</b> of {count + 1} episodes" in page and len(rows(page)) == count + 1
    assert client.get(f"/runs/0/episodes/{count}").status_code == 200
    assert len(reads) == 2


def test_search_finds_an_action_an_observation_and_a_game_name(expert_run):
    episodes = read_episodes(expert_run / "episodes.jsonl")
    thoughts = " ".join(t.text.lower() for e in episodes for t in e.thoughts)

    def fields(e):
        return [e.game_name, e.task] + [x for entry in e.entries for x in (entry.text, entry.observation)]

    def only_in(texts):  # a text no thought holds that some, not all, episodes hold
        for text in texts:
            text = text.lower()
            holders = {str(i) for i, e in enumerate(episodes) if any(text in f.lower() for f in fields(e))}
            if text not in thoughts and 0 < len(holders) < len(episodes):
                return text, holders
        raise AssertionError("no such text in the records")

    client = client_for(expert_run)
    for kind, texts in [("action", [a.text for e in episodes for a in e.actions]),
                        ("observation", [a.observation for e in episodes for a in e.actions]),
                        ("game name", [e.game_name for e in episodes])]:
        query, expected = only_in(texts)
        page = client.get("/episodes", params={"q": query.upper()}).text
        assert {r[1] for r in rows(page)} == expected, (kind, query)


def test_sorting_by_a_column_orders_the_rows_and_keeps_the_filters(big_run):
    episodes = read_episodes(big_run / "episodes.jsonl")
    steps = [len(e.entries) for e in episodes]
    assert steps != sorted(steps)
    client = client_for(big_run)
    page = client.get("/episodes?rhythm=sparse").text
    header = [h for h in links(page, "sort") if "sort=steps" in h]
    assert header == ["/episodes?rhythm=sparse&sort=steps"]
    ascending = rows(client.get(header[0]).text)
    expected = sorted((i for i, e in enumerate(episodes) if e.rhythm == "sparse"), key=lambda i: steps[i])
    assert [int(r[1]) for r in ascending] == expected[:PAGE_SIZE]  # stable: ties stay in file order
    again = client.get(header[0]).text
    assert "/episodes?rhythm=sparse&sort=-steps" in links(again, "sort")  # a second click sorts descending
    descending = rows(client.get("/episodes?rhythm=sparse&sort=-steps").text)
    assert [int(r[6]) for r in descending] == sorted((steps[i] for i in expected), reverse=True)[:PAGE_SIZE]
    by_game = rows(client.get("/episodes?sort=game").text)
    assert [r[2] for r in by_game] == sorted(r[2] for r in by_game)


def test_an_episode_links_to_a_bounded_list_of_the_same_game(big_run):
    episodes = read_episodes(big_run / "episodes.jsonl")
    same = [i for i, e in enumerate(episodes) if e.game_name == episodes[0].game_name]
    assert len(same) - 1 > OTHERS_SHOWN
    client = client_for(big_run)
    page = client.get("/runs/0/episodes/0").text
    assert len(links(page, "compare-link")) == OTHERS_SHOWN
    assert f"and {len(same) - 1 - OTHERS_SHOWN} more" in page
    listing = client.get(links(page, "same-game")[0]).text
    assert f"<b>{len(same)}</b> of {len(episodes)}" in listing
    assert all(r[2] == episodes[0].game_name for r in rows(listing))


def test_static_refuses_a_folder_in_use_without_force(expert_run, tmp_path):
    used = tmp_path / "notes"
    used.mkdir()
    (used / "mine.txt").write_text("keep me")
    for folder in (used, expert_run):
        before = sorted(p.name for p in folder.iterdir())
        result = cli("view", str(expert_run), "--static", str(folder))
        assert result.returncode == 2 and str(folder) in result.stderr and "--force" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
        assert sorted(p.name for p in folder.iterdir()) == before  # nothing written
    forced = cli("view", str(expert_run), "--static", str(used), "--force")
    assert forced.returncode == 0, forced.stderr
    assert (used / "index.html").is_file() and (used / "mine.txt").read_text() == "keep me"
    assert cli("view", str(expert_run), "--static", str(tmp_path / "new")).returncode == 0


def test_the_static_export_names_no_folder_of_this_machine(expert_run, tmp_path):
    run = shutil.copytree(expert_run, tmp_path / "shared-run")
    settings = json.loads((run / "settings.json").read_text())
    (run / "settings.json").write_text(json.dumps({**settings, "policy": f"scripted:{run / 'script.txt'}"}))
    with (run / "episodes.jsonl").open("a") as handle:
        handle.write("this line is not json\n")
    out = tmp_path / "site"
    result = cli("view", str(run), "--static", str(out))
    assert result.returncode == 0, result.stderr
    published = {p.name: p.read_text() for p in out.iterdir()}
    assert "episodes.html" in published and any(n.startswith("compare-") for n in published)
    for private in {str(run), str(run.resolve()), str(tmp_path), str(Path.home()), str(REPO)}:
        leaks = [name for name, text in published.items() if private in text]
        assert not leaks, f"{private} is written in {leaks[:5]}"
    assert "shared-run" in published["index.html"]  # the run is named by its label


def test_static_pair_pages_are_those_of_one_game_and_bounded(expert_run, tmp_path):
    from sparse_react.view import export_static

    run = copied_run(expert_run, tmp_path / "run", 150)  # over 35 episodes of each game
    episodes = read_episodes(run / "episodes.jsonl")
    written = export_static([run], tmp_path / "site")
    pairs = [p.name for p in written if p.name.startswith("compare-")]
    for name in pairs:
        _, _, a, _, b = name[: -len(".html")].split("-")
        assert episodes[int(a)].game_name == episodes[int(b)].game_name, name
    assert 0 < len(pairs) <= len(episodes) * OTHERS_SHOWN  # not every pair of 80 episodes of a game
    pages = [p.name for p in written if p.name.startswith("episodes")]
    assert pages == ["episodes.html", "episodes-2.html"]
    second = (tmp_path / "site" / "episodes-2.html").read_text()
    assert len(rows(second)) == len(episodes) - PAGE_SIZE and 'href="episodes.html"' in second


def test_in_a_browser_a_header_sorts_and_the_next_page_keeps_it(big_run):
    from test_view import CHROMIUM, LAPTOP, NO_BROWSER, sync_playwright

    if sync_playwright is None or CHROMIUM is None:
        pytest.skip(NO_BROWSER)
    import threading
    import time

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(create_app([big_run]), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not (server.started and server.servers):
        assert time.time() < deadline, "the app did not start"
        time.sleep(0.05)
    base = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM)
            page = browser.new_context(viewport=LAPTOP).new_page()
            page.goto(base + "/episodes")
            page.select_option("select[name=rhythm]", "dense")
            page.click("button[type=submit]")
            page.click("th[data-column=steps] a")
            page.click("th[data-column=steps] a")  # again: descending
            page.locator("nav.pages a[rel=next]").first.click()
            assert "rhythm=dense" in page.url and "sort=-steps" in page.url and "page=2" in page.url
            cells = page.locator("tr.episode-row").evaluate_all("rs => rs.map(r => [...r.children].map(c => c.innerText))")
            assert cells and all(c[4] == "dense" for c in cells)
            steps = [int(c[6]) for c in cells]
            assert steps == sorted(steps, reverse=True)
            browser.close()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
