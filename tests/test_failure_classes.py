"""The failure classes the shipped model's episodes show, read from real records
(tests/data/model_episodes.jsonl) and from scripted episodes on a real game: an ending that goes
round a cycle (A–B–A–B, missed by the three-repeats loop rule), and a thought claiming an object
found that no observation showed; both per rhythm in the report."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from sparse_react.agent import LoopRules, run_episode
from sparse_react.claims import FoundClaim, contradicted_claims, found_claims
from sparse_react.household.env import HouseholdEnv
from sparse_react.policies.scripted import ScriptedPolicy
from sparse_react.report import load_runs, markdown_report, summarize, write_report
from sparse_react.training.relabel import episode_game
from sparse_react.trajectory import Failure, append_episode, ending_cycle, failure_class, read_episodes
from sparse_react.view.pages import entry_views

DATA = Path(__file__).parent / "data" / "model_episodes.jsonl"


@pytest.fixture(scope="module")
def episodes():
    return {e.settings["game_name"].split("-")[1]: e for e in read_episodes(DATA)}


def test_recorded_budget_endings_are_cycles(episodes):
    assert ending_cycle(episodes["Plate"]) == ["go to diningtable 2", "go to diningtable 1"]
    assert ending_cycle(episodes["Pencil"]) == ["go to diningtable 1", "go to sidetable 1", "go to coffeetable 1"]
    every = read_episodes(DATA)
    lost = [e for e in every if not e.won]
    assert {e.failure for e in lost} == {Failure.BUDGET}  # as recorded, before the class existed
    assert [failure_class(e) for e in lost] == [Failure.CYCLE] * 5
    assert [failure_class(e) for e in every if e.won] == [None, None]


def test_the_episode_page_marks_the_rounds_of_an_ending_cycle(episodes):
    from sparse_react.view.records import RunSet

    (run,) = RunSet([DATA]).runs()  # the view reads records by today's classes
    plate = next(e for e in run.episodes if e.settings["game_name"] == episodes["Plate"].settings["game_name"])
    assert plate.failure is Failure.CYCLE
    marked = [v.entry.text for v in entry_views(plate) if v.in_loop]
    assert marked == [a.text for a in plate.actions[-4:]] and set(marked) == {"go to diningtable 1", "go to diningtable 2"}


def test_found_claims_the_record_contradicts(episodes):
    assert found_claims("Now I find a laptop (laptop 1) in/on the shelf 7. Next, I take it.") == \
        [FoundClaim("laptop", "laptop 1", "shelf 7")]
    lost_laptop = next(e for e in read_episodes(DATA) if e.settings["game_name"].endswith("g303/trial_g300058"))
    claims = contradicted_claims(lost_laptop)
    assert claims[0] == (11, FoundClaim("laptop", "laptop 1", "shelf 7"))
    assert {c.name for _, c in claims} == {"laptop 1", "desklamp 2"}
    bread = contradicted_claims(episodes["Bread"])
    assert bread[0] == (10, FoundClaim("bread", "bread 2", "fridge 1")) and len(bread) == 11
    assert contradicted_claims(episodes["Pencil"]) == [] and contradicted_claims(episodes["AlarmClock"]) == []
    won_look = episodes["Laptop"]  # the won Look episode claimed its lamp before seeing it, then found it
    assert won_look.won and contradicted_claims(won_look) == [(5, FoundClaim("desklamp", "desklamp 1", None))]


def test_the_loop_ends_an_alternating_walk_as_a_cycle_and_a_repeat_as_a_loop(episodes, tmp_path):
    game = episode_game(episodes["Plate"])
    walk = ["go to diningtable 1", "go to diningtable 2"] * 4
    rules = LoopRules(max_steps=8)
    cycle = run_episode(HouseholdEnv([game]), ScriptedPolicy(walk), game, "act", 0, rules)
    assert not cycle.won and cycle.failure is Failure.CYCLE and cycle.repeated_actions == 0
    repeat = run_episode(HouseholdEnv([game]), ScriptedPolicy(["go to diningtable 1", "look", "look", "look"]),
                         game, "act", 0, rules)
    assert repeat.failure is Failure.LOOP
    append_episode(tmp_path / "act.jsonl", cycle)


def test_report_counts_both_per_rhythm(episodes, tmp_path):
    game = episode_game(episodes["Plate"])
    walk = ["go to diningtable 1", "go to diningtable 2"] * 4
    act = tmp_path / "act" / "episodes.jsonl"
    append_episode(act, run_episode(HouseholdEnv([game]), ScriptedPolicy(walk), game, "act", 0, LoopRules(max_steps=8)))
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(DATA.read_text() + act.read_text())
    groups = {g.name: g for g in summarize(load_runs([mixed]))}
    assert groups["sparse [hf]"].failures["cycle"] == 5 and groups["sparse [hf]"].failures["budget"] == 0
    assert groups["sparse [hf]"].false_claims == 2  # the lost laptop and bread episodes
    assert groups["act [scripted]"].failures["cycle"] == 1 and groups["act [scripted]"].false_claims == 0
    markdown = markdown_report(load_runs([mixed]))
    behaviour = markdown.split("## Behaviour")[1].splitlines()
    header = next(l for l in behaviour if "| cycle |" in l)
    row = next(l for l in behaviour if l.startswith("| sparse [hf] |"))
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")]))
    assert len(header.split("|")) == len(row.split("|")), (header, row)
    assert cells["cycle"] == "5" and cells["false claim"] == "2" and cells["budget"] == "0"
    paths = write_report(load_runs([mixed]), tmp_path / "report")
    with paths["csv"].open(newline="") as handle:
        rows = {r["group"]: r for r in csv.DictReader(handle)}
    assert rows["act [scripted]"]["failures_cycle"] == "1" and rows["sparse [hf]"]["false_claims"] == "2"
