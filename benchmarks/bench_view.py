"""The browser view at the scale users run: page times over a 10,000-episode run, cold and warm.

Builds one run folder from real records: the expert plays a few dozen bundled games in three
rhythms, the committed model records (tests/data) join them, and their lines are copied (with
varied game names, outcomes, times and token counts) up to --episodes. Then it asks the view's
pages through Starlette's TestClient:

- cold: the first request to a fresh app, which reads the record;
- warm: the median of --repeat later requests (the record unchanged, so not read again);
- cache off: today's pages with the cache disabled (every request reads the record);
- before: the view as it was at --baseline (a git revision: no cache, no pagination, thoughts-only
  search, no sort), on the same record, when git can show it.

    python benchmarks/bench_view.py [--episodes 10000] [--repeat 5] [--baseline e189aad]

Goal (issue 53): a page of a 10,000-episode run in under 300 ms warm on two cores.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from starlette.testclient import TestClient

REPO = Path(__file__).resolve().parents[1]
FIXTURES = [REPO / "tests" / "data" / "model_episodes.jsonl", REPO / "tests" / "data" / "model_episodes_alfworld.jsonl"]
BASELINE = "e189aad"  # the view before pagination, the record cache, wider search and sorting
RHYTHMS = ("sparse", "dense", "act")
GOAL_MS = 300


def real_lines(games: int) -> list[dict]:
    """Records the package writes: the expert on `games` bundled games in three rhythms, then the
    committed model records."""
    from sparse_react.evaluation import RunSettings, evaluate
    from sparse_react.household.catalog import find_games
    from sparse_react.policies.expert import ExpertPolicy

    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder) / "expert"
        settings = RunSettings("valid_unseen", "expert", RHYTHMS, policy_spec=ExpertPolicy().spec())
        evaluate(find_games("valid_unseen")[:games], ExpertPolicy(), RHYTHMS, run_dir=run, settings=settings,
                 progress=False)
        lines = (run / "episodes.jsonl").read_text().splitlines()
    for fixture in FIXTURES:
        lines += fixture.read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def build_run(folder: Path, episodes: int, games: int) -> tuple[Path, int]:
    """A run folder of `episodes` copies of real records; each copy round is a new set of games (its
    game names carry the round), and about a third of the copies lose, by budget, loop or cycle.
    Returns the folder and the record's size in bytes."""
    from sparse_react.household.tasks import game_name

    base = real_lines(games)
    folder.mkdir(parents=True, exist_ok=True)
    failures = ("budget", "loop", "cycle")
    with (folder / "episodes.jsonl").open("w") as record:
        for n in range(episodes):
            line = dict(base[n % len(base)])
            copy = n // len(base)
            name = line.get("settings", {}).get("game_name") or game_name(line["game"])
            line["settings"] = {**line.get("settings", {}), "game_name": f"{name}-copy{copy:04d}"}
            if copy and n % 3 == 0:
                line["won"], line["failure"] = False, failures[n % len(failures)]
            line["wall_time"] = round(float(line.get("wall_time") or 0.0) * (1 + (n % 17) / 10), 3)
            line["entries"] = [{**e, "tokens": (e["tokens"] + n % 50) if e.get("tokens") is not None else None}
                               for e in line["entries"]]
            record.write(json.dumps(line) + "\n")
    (folder / "settings.json").write_text(json.dumps({"policy": "expert", "games": "valid_unseen"}))
    return folder, (folder / "episodes.jsonl").stat().st_size


def pages(record: Path) -> list[tuple[str, str]]:
    """The pages timed: (what, URL)."""
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    games: dict[str, list[int]] = {}
    for i, line in enumerate(lines):
        games.setdefault(line["settings"]["game_name"], []).append(i)
    middle = next(i for i in range(len(lines) // 2, len(lines)) if len(games[lines[i]["settings"]["game_name"]]) > 1)
    pair = next(i for i in games[lines[middle]["settings"]["game_name"]] if i != middle)
    action = next(e["text"] for e in lines[middle]["entries"] if e["kind"] == "action")
    return [
        ("runs page", "/"),
        ("episodes, page 1", "/episodes"),
        ("episodes, middle page", f"/episodes?page={max(1, len(lines) // 200)}"),
        ("search (an action)", "/episodes?q=" + action.replace(" ", "+")),
        ("search (no match)", "/episodes?q=zzz+no+such+words"),
        ("sort by steps, desc.", "/episodes?sort=-steps"),
        ("filter + sort + page 3", "/episodes?rhythm=act&outcome=lost&sort=game&page=3"),
        ("an episode", f"/runs/0/episodes/{middle}"),
        ("side by side", f"/compare/0/{min(middle, pair)}/0/{max(middle, pair)}"),
    ]


def old_view(revision: str, into: Path):
    """The view package as it was at `revision`, importable as `old_view` (its own modules and
    templates; the rest of the package is today's); None when git cannot show it."""
    try:
        names = subprocess.run(["git", "ls-tree", "-r", "--name-only", revision, "sparse_react/view"], cwd=REPO,
                               capture_output=True, text=True, check=True).stdout.split()
        package = into / "old_view"
        for name in names:
            text = subprocess.run(["git", "show", f"{revision}:{name}"], cwd=REPO, capture_output=True, text=True,
                                  check=True).stdout
            target = package / Path(name).relative_to("sparse_react/view")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text.replace("sparse_react.view", "old_view"))
    except (OSError, subprocess.CalledProcessError):
        return None
    sys.path.insert(0, str(into))
    return importlib.import_module("old_view.app")


def clear_caches() -> None:
    """The page-level memories a fresh process would not have (the plots and the Runs page)."""
    from sparse_react.view import pages as view_pages

    view_pages._PLOT_CACHE.clear()
    view_pages._RUNS_PAGE.clear()


def timed(client: TestClient, url: str) -> tuple[float, int, int]:
    start = time.perf_counter()
    response = client.get(url)
    elapsed = (time.perf_counter() - start) * 1000
    assert response.status_code == 200, (url, response.status_code, response.text[-500:])
    return elapsed, len(response.content), response.text.count('class="episode-row"')


def measure(make_app, urls: list[tuple[str, str]], repeat: int) -> list[tuple[float, float, int, int]]:
    """Per page: (cold ms, warm median ms, bytes, rows), the cold one from a fresh app."""
    results = []
    for _, url in urls:
        clear_caches()
        client = TestClient(make_app(), base_url="http://127.0.0.1")
        cold, size, rows = timed(client, url)
        warm = statistics.median(timed(client, url)[0] for _ in range(repeat))
        results.append((cold, warm, size, rows))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--games", type=int, default=16, help="bundled games the expert plays for the real records")
    parser.add_argument("--repeat", type=int, default=5, help="warm requests per page (the median is shown)")
    parser.add_argument("--baseline", default=BASELINE, help="git revision of the view to compare with ('' for none)")
    args = parser.parse_args()

    from sparse_react.view import create_app

    with tempfile.TemporaryDirectory() as scratch:
        start = time.perf_counter()
        run, size = build_run(Path(scratch) / "big", args.episodes, args.games)
        print(f"built {args.episodes} episodes ({size / 1e6:.1f} MB) in {time.perf_counter() - start:.0f} s")
        urls = pages(run / "episodes.jsonl")
        now = measure(lambda: create_app([run]), urls, args.repeat)
        off = measure(lambda: create_app([run], cache=False), urls, 1)
        old = old_view(args.baseline, Path(scratch)) if args.baseline else None
        before = measure(lambda: old.create_app([run]), urls, 1) if old else None

    print(f"\n{args.episodes:,} episodes, one run; ms per page through TestClient (warm: median of {args.repeat})\n")
    head = "| page | cold | warm | rows, KB | cache off | " + (f"before ({args.baseline}) | rows, KB |" if before else "")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for n, (what, _) in enumerate(urls):
        cold, warm, size, rows = now[n]
        line = f"| {what} | {cold:.0f} | {warm:.0f} | {rows}, {size / 1024:.0f} | {off[n][1]:.0f} |"
        if before:
            line += f" {before[n][1]:.0f} | {before[n][3]}, {before[n][2] / 1024:.0f} |"
        print(line)
    worst = max(warm for _, warm, _, _ in now)
    print(f"\nslowest warm page: {worst:.0f} ms (goal: under {GOAL_MS} ms) -> {'met' if worst < GOAL_MS else 'NOT met'}")


if __name__ == "__main__":
    main()
