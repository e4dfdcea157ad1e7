"""Property-based tests (hypothesis) of what reads files a user or a stranger hands over: the record
reader, the game-file loader and the prompt files either give well-typed values or an error that
names the file; the view's routes over generated records never answer 500 and escape every text."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import markupsafe
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from sparse_react.household.game_files import COMPACT_FORMAT, GameFileError, load_game_data
from sparse_react.household.tasks import TaskType
from sparse_react.lines import Kind
from sparse_react.prompts import PromptError, load_examples
from sparse_react.rhythms import RHYTHMS
from sparse_react.trajectory import Entry, Episode, Failure, append_episode, read_records
from sparse_react.view import create_app

EXAMPLES = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=8)
REPO = Path(__file__).resolve().parents[1]


def paths_of(value, prefix=()) -> list[tuple]:
    """Every key path into a JSON value."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in [(*prefix, k), *paths_of(v, (*prefix, k))]]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in [(*prefix, i), *paths_of(v, (*prefix, i))]]
    return []


def replaced(value, path: tuple, new):
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = replaced(value[path[0]], path[1:], new)
    return copy


@st.composite
def mutations(draw, original: dict):
    """`original` with one value anywhere in it replaced by arbitrary JSON."""
    path = draw(st.sampled_from(paths_of(original)))
    return replaced(original, path, draw(JSON))


@pytest.fixture(scope="module")
def record_line() -> dict:
    return json.loads((REPO / "tests" / "data" / "model_episodes.jsonl").read_text().splitlines()[0])


def check_typed(episode: Episode) -> None:
    assert isinstance(episode.won, bool) and isinstance(episode.rhythm, str) and isinstance(episode.settings, dict)
    assert isinstance(episode.wall_time, float | int) and not isinstance(episode.wall_time, bool)
    for entry in episode.entries:
        assert isinstance(entry.kind, Kind) and isinstance(entry.text, str) and isinstance(entry.observation, str)
        assert entry.tokens is None or type(entry.tokens) is int


@EXAMPLES
@given(data=st.data())
def test_the_record_reader_gives_typed_episodes_or_names_each_bad_line(record_line, data):
    lines = data.draw(st.lists(st.one_of(st.binary(max_size=60).filter(lambda b: b"\n" not in b),
                                         mutations(record_line).map(lambda r: json.dumps(r).encode()),
                                         st.just(json.dumps(record_line).encode())), min_size=1, max_size=6))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "episodes.jsonl"
        path.write_bytes(b"".join(line + b"\n" for line in lines))
        records = read_records(path)
    filled = [n for n, line in enumerate(lines, start=1) if line.strip()]
    assert sorted(records.lines + [b.line for b in records.bad]) == filled
    for episode in records.episodes:
        check_typed(episode)
    for bad in records.bad:
        assert str(bad).startswith(f"{path}, line {bad.line}: ") and bad.message


@EXAMPLES
@given(data=st.data())
def test_the_game_loader_gives_a_game_or_an_error_naming_the_file(data):
    compact = json.loads(next((REPO / "games" / "valid_unseen").rglob("game.json")).read_text())
    assert compact["format"] == COMPACT_FORMAT
    content = data.draw(st.one_of(st.binary(max_size=80), JSON.map(lambda v: json.dumps(v).encode()),
                                  mutations(compact).map(lambda g: json.dumps(g).encode())))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "game.json"
        path.write_bytes(content)
        try:
            game = load_game_data(path)
        except GameFileError as exc:
            assert str(path) in str(exc)
            return
    assert all(isinstance(game[k], str) for k in ("pddl_domain", "grammar", "pddl_problem"))
    assert isinstance(game["walkthrough"], list) and all(isinstance(step, str) for step in game["walkthrough"])


@EXAMPLES
@given(data=st.data())
def test_a_prompt_file_gives_three_typed_examples_or_an_error_naming_it(data):
    original = yaml.safe_load((REPO / "prompts" / "pick_and_place_simple.yaml").read_text())
    content = data.draw(st.one_of(st.binary(max_size=80), JSON.map(lambda v: yaml.safe_dump(v).encode()),
                                  mutations(original).map(lambda p: yaml.safe_dump(p).encode())))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "pick_and_place_simple.yaml"
        path.write_bytes(content)
        try:
            examples = load_examples(TaskType.PICK, Path(folder))
        except PromptError as exc:
            assert str(path) in str(exc)
            return
        finally:
            load_examples.cache_clear()
    assert len(examples) == 3
    for example in examples:
        assert isinstance(example.game, str) and isinstance(example.observation, str)
        for turn in example.turns:
            assert isinstance(turn.action, str) and isinstance(turn.observation, str)
            assert all(isinstance(k, str) and isinstance(v, str) for k, v in turn.thoughts.items())


TEXT = st.text(alphabet="ab <>&\"'/=;", max_size=16).map(lambda s: f"¤{s}¤")  # ¤: in no template


@st.composite
def episodes(draw) -> Episode:
    entries = [Entry(step, kind, draw(TEXT), draw(TEXT), draw(st.floats(0, 10)), draw(st.none() | st.integers(0, 99)))
               for step, kind in enumerate(draw(st.lists(st.sampled_from(Kind), max_size=5)), start=1)]
    won = draw(st.booleans())
    return Episode(game=draw(TEXT), task_type=draw(st.sampled_from([t.value for t in TaskType]) | TEXT),
                   task=draw(TEXT), rhythm=draw(st.sampled_from(sorted(RHYTHMS)) | TEXT), policy=draw(TEXT),
                   initial_observation=draw(TEXT), settings={"game_name": draw(TEXT)}, entries=entries, won=won,
                   failure=None if won else draw(st.sampled_from(Failure)), error=draw(st.none() | TEXT),
                   wall_time=draw(st.floats(0, 100)))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(played=st.lists(episodes(), min_size=1, max_size=4), query=TEXT)
def test_the_views_routes_never_fail_on_generated_records_and_escape_every_text(played, query):
    with tempfile.TemporaryDirectory() as folder:
        record = Path(folder) / "run" / "episodes.jsonl"
        for episode in played:
            append_episode(record, episode)
        client = TestClient(create_app([record.parent]), base_url="http://127.0.0.1")
        pages = {url: client.get(url) for url in ["/", "/episodes", f"/episodes?q={query}", "/episodes?outcome=won",
                                                  *(f"/runs/0/episodes/{i}" for i in range(len(played))),
                                                  f"/compare/0/0/0/{len(played) - 1}"]}
    for url, response in pages.items():
        assert response.status_code in (200, 400), (url, response.status_code)  # 400: a pair of different games
    for i, episode in enumerate(played):
        page = pages[f"/runs/0/episodes/{i}"].text
        shown = [episode.initial_observation, episode.rhythm, episode.policy, *(e.text for e in episode.entries),
                 *(e.observation for e in episode.actions)]
        for text in shown:
            assert str(markupsafe.escape(text)) in page
            assert not set("<>&\"'") & set(text) or text not in page
