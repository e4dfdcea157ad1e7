"""Thought anatomy: the classifier recovers, from the record and a replay of the game alone, the
moments the experts think at by construction (each expert thought's template says which moment it
is), on episodes of every task type; and its measures count what they say."""

from __future__ import annotations


from collections import Counter, defaultdict

import pytest

from sparse_react.agent import run_episode
from sparse_react.anatomy import ThoughtKind as K
from sparse_react.anatomy import Trigger, episode_anatomy, summarize_anatomy
from sparse_react.household.env import HouseholdEnv
from sparse_react.lines import Kind
from sparse_react.policies.expert import ExpertPolicy, SearchingExpertPolicy
from sparse_react.trajectory import Entry
from checks import alfworld_found

SUBGOAL_OPENINGS = ("Now I have the", "I have the", "One ", "Now I find", "The ")
REASONS = ("I'll ", "There is the", "I'm at the")


def expected_kinds(text: str, previous_im: str | None) -> frozenset[K]:
    """The moment an expert thought is written at, by the template that wrote it."""
    if text.startswith("Goal: "):  # im: the goal, and the current subgoal (a new one after a subgoal is done)
        subgoal = text.partition("Current subgoal: ")[2]
        if previous_im is None:
            return frozenset({K.DECOMPOSITION})
        return frozenset({K.SUBGOAL if subgoal != previous_im.partition("Current subgoal: ")[2] else K.OTHER})
    guess = {K.LOCATION} if "likely" in text or "probably" in text else set()
    if text.startswith("To solve this"):
        return frozenset({K.DECOMPOSITION, *guess})
    if text.startswith("That did nothing"):
        return frozenset({K.EXCEPTION})
    if text.startswith(REASONS) or " is closed; " in text or " is here; " in text:
        return frozenset({K.OTHER})
    assert text.startswith(SUBGOAL_OPENINGS), text
    return frozenset({K.SUBGOAL, *guess})


@pytest.fixture(scope="module")
def two_per_task_type(bundled_unseen):
    by_type = defaultdict(list)
    for game in bundled_unseen:
        by_type[game.task_type].append(game)
    return [game for games in by_type.values() for game in games[:2]]


@pytest.mark.parametrize("policy", [SearchingExpertPolicy, ExpertPolicy])
def test_the_classifier_recovers_the_experts_own_moments_on_every_task_type(policy, two_per_task_type, capsys):
    agreement: dict[str, Counter] = defaultdict(Counter)
    misses = []
    for rhythm in ("sparse", "dense", "im"):
        for game in two_per_task_type:
            episode = run_episode(HouseholdEnv([game]), policy(), game, rhythm)
            assert episode.won
            previous_im = None
            for thought in episode_anatomy(episode, game).thoughts:
                want = expected_kinds(thought.text, previous_im)
                previous_im = thought.text if thought.text.startswith("Goal: ") else None
                agreement[rhythm][thought.kinds == want] += 1
                if thought.kinds != want:
                    misses.append((rhythm, game.task_type.column, sorted(thought.kinds), sorted(want), thought.text[:60]))
    with capsys.disabled():
        print(f"\n{policy.name}: classifier agrees with the expert's own moments on",
              ", ".join(f"{r} {c[True]}/{c[True] + c[False]}" for r, c in agreement.items()))
        for miss in misses[:8]:
            print("   differs:", miss)
    # Where it cannot agree, by construction: the experts never react to a search that ran out of the
    # guessed places (a dense reason written there lands on that exception), and the planning expert
    # walks straight to the object, so seeing it is no phase of its own (the dense reason or the im
    # restatement right after reads as a subgoal thought). Nothing else may differ.
    searching = policy is SearchingExpertPolicy
    allowed = ("dense", [K.EXCEPTION]) if searching else ("dense im", [K.SUBGOAL])
    assert all(rhythm in allowed[0] and got == allowed[1] and want == [K.OTHER]
               for rhythm, _, got, want, _ in misses), misses
    assert agreement["sparse"][False] == 0 and (agreement["im"][False] == 0 or not searching)
    assert all(c[True] > 2 * c[False] for c in agreement.values())


def test_coverage_idle_and_exceptions_count_what_they_say(two_per_task_type):
    game = two_per_task_type[0]
    episode = run_episode(HouseholdEnv([game]), SearchingExpertPolicy(), game, "sparse")
    anatomy = episode_anatomy(episode, game)
    subgoals = [t for t in anatomy.triggers if t.kind is Trigger.SUBGOAL]
    # the sparse expert thinks right after each subgoal; the last, the win, ends the episode: no trigger
    assert subgoals and anatomy.subgoal_steps == (*(t.step for t in subgoals), len(episode.entries))
    assert all(t.covered for t in subgoals)
    assert anatomy.idle == 0

    # the same episode with a refused command and a recap inserted after it: an exception, covered by an idle thought
    entries = list(episode.entries)
    at = next(i for i, e in enumerate(entries) if e.kind is Kind.ACTION)
    extra = [Entry(0, Kind.ACTION, "take nothing 9 from nowhere 9", "Nothing happens."),
             Entry(0, Kind.THOUGHT, "Hmm, let me think again about the task.", "OK.")]
    episode.entries = [Entry(i + 1, e.kind, e.text, e.observation)
                       for i, e in enumerate(entries[:at] + extra + entries[at:])]
    anatomy = episode_anatomy(episode, game)
    refused = next(t for t in anatomy.triggers if t.step == at + 1)
    assert refused.kind is Trigger.EXCEPTION and refused.covered
    recap = next(t for t in anatomy.thoughts if t.step == at + 2)
    assert recap.kinds == {K.EXCEPTION}
    summary = summarize_anatomy("x", [anatomy])
    assert summary.shares[K.EXCEPTION] == pytest.approx(1 / summary.thoughts)
    exceptions = [t.covered for t in anatomy.triggers if t.kind is Trigger.EXCEPTION]
    assert summary.coverage[Trigger.EXCEPTION] == sum(exceptions) / len(exceptions) > 0


def test_the_report_shows_where_thoughts_go_with_the_few_shot_reference_and_pictures(two_per_task_type, tmp_path):
    import subprocess
    import sys

    from sparse_react.trajectory import append_episode

    record = tmp_path / "run" / "episodes.jsonl"
    for rhythm in ("sparse", "act"):
        for game in two_per_task_type[:4]:
            append_episode(record, run_episode(HouseholdEnv([game]), SearchingExpertPolicy(), game, rhythm))
    report = subprocess.run([sys.executable, "-m", "sparse_react.cli", "report", str(record.parent), "--out",
                             str(tmp_path / "report")], capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stderr
    section = report.stdout.split("## Where thoughts go")[1]
    rows = {line.split("|")[1].strip(): line for line in section.splitlines() if line.startswith("| ")}
    if alfworld_found():  # the few-shot examples replay on ALFWorld's games
        assert rows["few-shot examples (sparse)"].split("|")[2].strip() == "18"  # 6 task types x 3 examples
    else:
        assert "few-shot examples (sparse)" not in rows
    assert rows["sparse"].split("|")[2].strip() == "4" and rows["act"].split("|")[3].strip() == "0"
    assert "sparse vs act" not in section  # the searching expert wins all: no split game to pair
    for picture in ("thought_kinds.png", "timelines.png"):
        assert (tmp_path / "report" / picture).stat().st_size > 10_000
    assert "## Where thoughts go" in (tmp_path / "report" / "report.md").read_text()


def test_the_view_shows_each_thoughts_kind_and_filters_by_it(two_per_task_type, tmp_path):
    from starlette.testclient import TestClient

    from sparse_react.trajectory import append_episode
    from sparse_react.view import create_app

    record = tmp_path / "run" / "episodes.jsonl"
    look = next(g for g in two_per_task_type if g.task_type.column == "Look")
    pick = next(g for g in two_per_task_type if g.task_type.column == "Pick")
    append_episode(record, run_episode(HouseholdEnv([look]), SearchingExpertPolicy(), look, "sparse"))
    append_episode(record, run_episode(HouseholdEnv([pick]), SearchingExpertPolicy(), pick, "im"))
    client = TestClient(create_app([record.parent]), base_url="http://127.0.0.1")
    page = client.get("/runs/0/episodes/0").text
    assert page.count('class="badge kind decomposition"') == 1 and page.count('class="badge kind subgoal"') >= 2
    assert 'class="badge kind location"' in page
    assert client.get("/episodes?thought=decomposition").text.count("episode-row") == 2
    location = client.get("/episodes?thought=location").text  # the im thoughts restate the goal and never guess
    assert location.count("episode-row") == 1 and look.name in location and pick.name not in location
