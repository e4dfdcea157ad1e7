"""The relabelling expert on real episodes of the shipped sparse model (tests/data/model_episodes.jsonl:
five lost bundled valid_unseen episodes, most ending in a cycle, one Look episode claiming a laptop
that was never seen, and two won ones): handed control at their states it wins, and its labels
name nothing the history has not shown."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sparse_react.agent import run_episode
from sparse_react.household.env import HouseholdEnv
from sparse_react.lines import Kind
from sparse_react.options import RelabelOptions
from sparse_react.policies.expert import Label
from sparse_react.policies.scripted import ScriptedPolicy
from sparse_react.training.export import episode_messages
from sparse_react.training.relabel import (
    RelabelError,
    corrections,
    hand_over,
    relabel_episode,
    relabel_runs,
    relabelled_examples,
)
from sparse_react.trajectory import Episode, read_episodes

from checks import assert_never_walks_to_hidden_objects

DATA = Path(__file__).parent / "data" / "model_episodes.jsonl"
ENTITY = re.compile(r"\b([a-z]+ \d+)\b")


@pytest.fixture(scope="module")
def episodes() -> list[Episode]:
    return read_episodes(DATA)


@pytest.fixture(scope="module")
def labelled(episodes):
    return [(episode, relabel_episode(episode)) for episode in episodes]


def named(episodes, game_part: str) -> Episode:
    return next(e for e in episodes if game_part in e.settings["game_name"])


def test_fixture_is_real_model_records(episodes):
    assert len(episodes) == 7 and {e.policy for e in episodes} == {"hf"}
    lost = [e for e in episodes if not e.won]
    assert len(lost) == 5 and all(len(e.entries) == 50 for e in lost)


def test_handed_control_at_states_of_lost_episodes_the_expert_wins(episodes):
    for episode in (e for e in episodes if not e.won):
        every = 2 if "Plate-None-FloorLamp" in episode.settings["game_name"] else 9  # most states of an A–B cycle
        for step in range(1, len(episode.entries) + 1, every):
            handed = hand_over(episode, step)
            assert handed.settings["handed_over"]["mismatches"] == []
            assert handed.won, f"{episode.settings['game_name']} handed over at step {step}: {handed.failure}"
            expert_lines = handed.entries[step - 1:]
            assert all(e.mode == "relabel-expert" for e in expert_lines)


def test_no_label_names_an_object_the_history_has_not_shown(labelled):
    checked = 0
    for episode, states in labelled:
        assert [s.step for s in states] == [e.step for e in episode.entries]
        for state in states:
            shown = episode.initial_observation + "".join(e.observation for e in episode.entries[: state.step - 1])
            for line in state.lines:
                for name in ENTITY.findall(line):
                    assert re.search(rf"\b{name}\b", shown), f"step {state.step}: {line!r} names unseen {name}"
                    checked += 1
    assert checked > 300


def test_labels_correct_a_false_claim_and_replan_after_detours(episodes, labelled):
    laptop = named(episodes, "Laptop-None-DeskLamp-g303")
    states = next(s for e, s in labelled if e is laptop)
    claim = laptop.entries[10]
    assert claim.kind is Kind.THOUGHT and "laptop 1" in claim.text and "laptop" not in laptop.entries[9].observation
    after = states[11].label  # the state after the claim and one more action
    assert after.thought.startswith("I was wrong: I have not found a laptop") and "laptop 1" not in after.thought
    replanned = {e.settings["game_name"]: relabel_episode(e, replan_detours=True) for e in episodes}
    plate = named(episodes, "Plate-None-FloorLamp")
    cycle = [e.text for e in plate.actions[-4:]]
    assert cycle[:2] == cycle[2:] and cycle[0] != cycle[1]  # the record ends going A–B–A–B
    last = replanned[plate.settings["game_name"]][-1].label
    assert last.thought.startswith("I have seen the floorlamp (floorlamp 1) in/on the armchair 2")
    assert last.action == "go to armchair 2" and last.action not in cycle
    assert next(s for e, s in labelled if e is plate)[-1].label == Label(None, last.action)  # by default: act
    pencil = named(episodes, "Pencil-None-FloorLamp")
    last = replanned[pencil.settings["game_name"]][-1].label
    assert "I have already looked in/on armchair 1" in last.thought and last.action not in [e.text for e in pencil.actions[-6:]]
    thoughts = {rule: sum(bool(s.label.thought) for s in states) for rule, states in
                (("replan", [s for v in replanned.values() for s in v]), ("act", [s for _, v in labelled for s in v]))}
    assert thoughts["act"] < thoughts["replan"] / 2, thoughts
    won = named(episodes, "AlarmClock")  # the model followed the search expert's plan, its opening garbled
    states = next(s for e, s in labelled if e is won)
    assert [s.recorded for s in states[1:]] == [s.lines[0] for s in states[1:]]
    assert "sidetable 9" in states[0].recorded and states[0].label.thought.endswith("starting with desk 1.")


def test_labels_follow_the_rhythm(episodes):
    """An act episode (the model's actions replayed without thoughts) gets actions only; a dense one
    a thought before each action; both hand over to wins."""
    lost = named(episodes, "ButterKnife")
    actions = [e.text for e in lost.actions][:12]
    game = relabel_game(lost)
    for rhythm, lines in (("act", actions), ("dense", [l for a in actions for l in (f"think: I'll {a}.", a)])):
        record = run_episode(HouseholdEnv([game]), ScriptedPolicy(lines), game, rhythm)
        states = relabel_episode(record, game)
        if rhythm == "act":
            assert all(s.label.thought is None for s in states)
        else:
            after_action = [s for s in states if s.step > 1 and record.entries[s.step - 2].kind is Kind.ACTION]
            assert after_action and all(s.label.thought for s in after_action)
        assert hand_over(record, len(record.entries) // 2 + 1, game).won


def relabel_game(episode):
    from sparse_react.training.relabel import episode_game

    return episode_game(episode)


def test_examples_train_only_on_labels(episodes, labelled):
    episode, states = next((e, s) for e, s in labelled if not e.won)
    examples = relabelled_examples(episode, states, "model")
    assert len(examples) == len(states) == 50
    recorded = episode_messages(episode)
    for example, state in zip(examples, states):
        messages = example["messages"]
        context = messages[: 1 + 2 * (state.step - 1)]
        assert [m["content"] for m in context] == [m["content"] for m in recorded[: len(context)]]
        assert all(m["train"] is False for m in context if m["role"] == "assistant")
        label = [m for m in messages[len(context):] if m["role"] == "assistant"]
        assert [m["content"] for m in label] == state.lines and all(m["train"] for m in label)
        assert example["policy"] == "relabel-expert" and example["state_step"] == state.step


def test_relabel_command_writes_data_and_refuses_evaluation_games(tmp_path):
    out = tmp_path / "data.jsonl"
    cli = [sys.executable, "-m", "sparse_react.cli", "relabel", str(DATA), "--out", str(out)]
    refused = subprocess.run(cli, capture_output=True, text=True)
    assert refused.returncode == 2 and "evaluation games" in refused.stderr and not out.exists()
    done = subprocess.run([*cli, "--exclude", "", "--lost-only"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 250 and f"wrote 250 examples from 5 episodes" in done.stdout


def test_a_record_whose_game_is_gone_is_named(episodes, tmp_path):
    data = episodes[0].to_dict()
    data["game"], data["settings"]["game_name"] = str(tmp_path / "nowhere" / "game.json"), "no-such-game/trial_1"
    (tmp_path / "gone.jsonl").write_text(json.dumps(data) + "\n")
    summary = relabel_runs([tmp_path / "gone.jsonl"], tmp_path / "out.jsonl", exclude=())
    assert summary.examples == 0 and len(summary.unlabelled) == 1 and summary.unlabelled[0].count("no-such-game") == 1
    with pytest.raises(RelabelError, match="nowhere.*no-such-game"):
        relabel_episode(Episode.from_dict(data))


def test_finetune_learns_only_the_label_lines(episodes, labelled, tmp_path):
    pytest.importorskip("torch")
    from transformers import AutoTokenizer

    from sparse_react.training.finetune import tokenize_example

    from tiny import tiny_model

    tiny_model(tmp_path / "tiny", chat=True)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tiny")
    episode, states = next((e, s) for e, s in labelled if not e.won)
    for example, state in list(zip(relabelled_examples(episode, states), states))[10:13]:
        row = tokenize_example(tokenizer, example["messages"], chat=True, max_length=100_000)
        learned = tokenizer.decode([t for t, label in zip(row["input_ids"], row["labels"]) if label != -100])
        assert learned.split() == " ".join(state.lines).split()


def test_packed_states_train_exactly_what_the_states_train_one_by_one(labelled, tmp_path):
    """An episode's relabelled states packed into rows (the record once, each label a branch) give
    the same summed loss over the same label tokens as the states run one at a time."""
    torch = pytest.importorskip("torch")
    from sparse_react.models.loading import load_model
    from sparse_react.training.finetune import _Collator, agent_line_loss, tokenize_example
    from sparse_react.training.packing import pack_rows

    from tiny import tiny_model

    tiny_model(tmp_path / "tiny", chat=True)
    loaded = load_model(tmp_path / "tiny", device="cpu", dtype=torch.float32)
    with torch.no_grad():  # a random model attends almost evenly and its logits are almost flat: sharpen both,
        for layer in loaded.model.model.layers:  # so that a branch one position off moves the loss by 3e-5
            for projection in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj,
                               layer.self_attn.o_proj):
                projection.weight.mul_(4)
        loaded.model.lm_head.weight.mul_(30)
    episode, states = next((e, s) for e, s in labelled if not e.won)
    examples = relabelled_examples(episode, states)
    rows = [tokenize_example(loaded.tokenizer, e["messages"], True, 100_000) for e in examples]
    width = max(map(len, (r["input_ids"] for r in rows)))
    packs = pack_rows(examples, rows, limit=width + 200)  # room for a few branches beyond the longest state
    assert 1 < len(packs) < len(rows) // 4 and all(len(p["input_ids"]) <= width + 200 for p in packs)
    collate = _Collator(loaded.tokenizer.pad_token_id or 0)
    with torch.no_grad():
        alone = [agent_line_loss(loaded.model, collate([row])) for row in rows]
        packed = [agent_line_loss(loaded.model, collate([pack])) for pack in packs]
        padded = agent_line_loss(loaded.model, collate(packs[:2]))  # two packs of unequal length in one batch
    assert sum(count for _, count in packed) == sum(count for _, count in alone)
    assert torch.allclose(sum(total for total, _ in packed), sum(total for total, _ in alone), rtol=2e-6)
    assert torch.allclose(padded[0], packed[0][0] + packed[1][0], rtol=2e-6)
    seed_like = {k: v for k, v in examples[0].items() if k != "state_step"}  # an exported episode is never packed
    assert pack_rows([seed_like], rows[:1], limit=width) == rows[:1]


def test_a_record_made_elsewhere_finds_its_game_by_name(episodes):
    from sparse_react.training.relabel import episode_game

    moved = Episode.from_dict(episodes[0].to_dict())
    moved.game = str(Path("/elsewhere") / episodes[0].settings["game_name"] / Path(episodes[0].game).name)
    assert episode_game(moved).name == episodes[0].settings["game_name"] and episode_game(moved).path.is_file()


def test_real_alfworld_model_episode_relabels_and_hands_over(alfworld_json):
    """Lost ALFWorld valid_seen episodes of the shipped model (one cycling between two places, one
    claiming objects it never saw, one in a room whose desk holds its drawers), their games found
    under ALFWORLD_DATA by name."""
    from sparse_react.claims import contradicted_claims
    from sparse_react.trajectory import ending_cycle

    cycling, claiming, shared_spot = read_episodes(Path(__file__).parent / "data" / "model_episodes_alfworld.jsonl")
    assert len(ending_cycle(cycling)) == 2 and len(contradicted_claims(claiming)) == 5
    # a drawer inside the desk: from drawer 1 the game offers `take cd 2 from desk 1` but no `go to desk 1`
    assert shared_spot.entries[9].text == "go to drawer 1" and "cd 2" in shared_spot.entries[3].observation
    assert relabel_episode(shared_spot)[11].label.action == "take cd 2 from desk 1"
    for record in (cycling, claiming):
        record.game = str(Path("/elsewhere") / record.settings["game_name"] / Path(record.game).name)
        states = relabel_episode(record)
        assert len(states) == len(record.entries) and not record.won
        for step in (1, len(record.entries) // 2, len(record.entries)):
            assert hand_over(record, step).won, (record.settings["game_name"], step)


def test_a_record_the_expert_cannot_go_on_from_is_reported_once_by_name(alfworld_json, tmp_path):
    """A model took a paper towel roll for a hand towel in an ALFWorld train game whose rules let it
    be put down nowhere: no label exists after that, so the record is reported, not half relabelled."""
    from sparse_react.household.catalog import game_ref

    name = "pick_and_place_simple-HandTowel-None-Toilet-427/trial_T20190907_173931_537125"
    game = game_ref(alfworld_json / "train" / name / "game.tw-pddl")
    record = run_episode(HouseholdEnv([game]), ScriptedPolicy(["go to toilet 1", "take papertowelroll 1 from toilet 1",
                                                               "go to countertop 1"]), game, "sparse")
    assert record.entries[2].observation.startswith("You arrive at countertop 1") and not record.won
    (tmp_path / "took.jsonl").write_text(json.dumps(record.to_dict()) + "\n")
    summary = relabel_runs([tmp_path / "took.jsonl"], tmp_path / "out.jsonl", exclude=())
    [problem] = summary.unlabelled
    assert summary.examples == 0 and problem.count(name) == 1 and "cannot put down the papertowelroll 1" in problem


@pytest.mark.parametrize("rhythm", ["sparse", "dense", "im", "act"])
def test_relabel_expert_plays_whole_games_from_what_it_has_seen(rhythm):
    from sparse_react.evaluation import evaluate
    from sparse_react.household.catalog import find_games
    from sparse_react.household.tasks import TaskType
    from sparse_react.policies import make_policy

    games = [g for t in TaskType for g in find_games("train", task_types=[t])[:2]]
    played = evaluate(games, make_policy("relabel-expert"), rhythm, progress=False)
    assert [e.settings["game_name"] for e in played if not e.won] == []
    for episode in played:
        assert_never_walks_to_hidden_objects(episode)


def test_an_object_the_task_does_not_need_is_put_down_first(episodes):
    """An act episode that took the wrong thing (a book for an alarm clock task), on the real game."""
    won = named(episodes, "AlarmClock")
    game = relabel_game(won)
    record = run_episode(HouseholdEnv([game]), ScriptedPolicy(["go to desk 1", "take book 1 from desk 1"]), game, "sparse")
    assert record.entries[-1].observation == "You pick up the book 1 from the desk 1."
    state = relabel_episode(record, game)[-1]
    assert state.label.action == "take alarmclock 1 from desk 1"  # before the mistake: the alarm clock is the one
    handed = hand_over(record, len(record.entries) + 1, game)  # after the mistake
    after = [e.text for e in handed.entries[len(record.entries):] if e.kind is Kind.ACTION]
    assert handed.won and after[0] == "move book 1 to desk 1" and "take alarmclock 1 from desk 1" in after


def test_relabelling_many_states_loads_the_planner_library_once(episodes):
    """Each new engine maps its own copy of fast-downward's 33 MB library, freed only when the
    process ends: thousands of hand-overs once filled the disk."""
    maps = Path("/proc/self/maps")
    if not maps.exists():
        pytest.skip("no /proc/self/maps on this system")

    def copies() -> int:
        # a mapped file's path (`... /tmp/tmpXXXX/libdownward.so (deleted)`) is the sixth field
        return len({line.split(maxsplit=5)[-1] for line in maps.read_text().splitlines() if "libdownward" in line})

    lost = [e for e in episodes if not e.won]
    hand_over(lost[0], 1)
    before = copies()
    for episode in lost:
        relabel_episode(episode)
        hand_over(episode, 25)
    assert copies() == before


def test_corrections_are_the_states_where_the_label_differs_in_more_than_taste(labelled, tmp_path):
    """In lost cycling episodes the expert corrects returns to searched places and missed steps; two
    thoughts in other words, or two unvisited places to search next, are not corrections;
    `--corrections-only` writes just the corrections."""
    found = [(e, s, corrections(e, s)) for e, s in labelled]
    kept = [s for _, _, c in found for s in c]
    assert 0 < len(kept) < sum(len(s) for _, s, _ in found)
    for episode, states, chosen in found:
        for state in states:
            visited = {e.text for e in episode.entries[: state.step - 1] if e.text.startswith("go to ")}
            taste = state.recorded == state.lines[0] or all(l.startswith("think:") for l in (state.recorded, state.lines[0])) \
                or all(l.startswith("go to ") and l not in visited for l in (state.recorded, state.lines[0]))
            assert (state in chosen) is not taste, (episode.settings["game_name"], state)
    assert any(s.recorded.startswith("go to ") and s.lines[0].startswith("go to ") for s in kept)  # a return
    summary = relabel_runs([DATA], tmp_path / "corrections.jsonl", exclude=(), options=RelabelOptions(corrections_only=True))
    rows = [json.loads(line) for line in summary.path.read_text().splitlines()]
    assert summary.examples == len(rows) == len(kept) and not any(row["agreed"] for row in rows)


def test_corrections_without_go_to_keep_every_other_correction(labelled, tmp_path):
    """`--without-go-to` leaves out exactly the corrections whose label walks; with none of the
    corrections asked for it is refused, naming the flag it needs."""
    walks = [s for e, states in labelled for s in corrections(e, states) if s.lines[0].startswith("go to ")]
    rest = [s for e, states in labelled for s in corrections(e, states, without_go_to=True)]
    assert walks and rest and not any(s.lines[0].startswith("go to ") for s in rest)
    assert len(walks) + len(rest) == sum(len(corrections(e, s)) for e, s in labelled)
    summary = relabel_runs([DATA], tmp_path / "rest.jsonl", exclude=(),
                           options=RelabelOptions(corrections_only=True, without_go_to=True))
    rows = [json.loads(line) for line in summary.path.read_text().splitlines()]
    assert sorted((r["game"], r["state_step"]) for r in rows) == sorted(
        (e.game_name, s.step) for e, states in labelled for s in corrections(e, states, without_go_to=True))
    with pytest.raises(RelabelError, match="give --corrections-only with them"):
        relabel_runs([DATA], tmp_path / "none.jsonl", exclude=(), options=RelabelOptions(without_go_to=True))


def test_each_once_keeps_the_first_state_a_label_corrects(labelled):
    """In a loop the same correction is due at every turn; `each_once` keeps it at the first."""
    repeated = 0
    for episode, states in labelled:
        every, once = corrections(episode, states), corrections(episode, states, each_once=True)
        first = {}
        for state in every:
            first.setdefault(tuple(state.lines), state)
        assert once == list(first.values())
        repeated += len(every) - len(once)
    assert repeated > 0


def test_each_correction_once_counts_a_correcting_thought_by_what_it_corrects(labelled, tmp_path):
    """A false claim is corrected at every later turn, each label naming the places searched so far
    and the next action: `each_correction_once` keeps that correction once."""
    fewer = 0
    for episode, states in labelled:
        once = corrections(episode, states, each_once=True)
        by_correction = corrections(episode, states, each_correction_once=True)
        corrected = [state.lines[0].split(". ")[0] for state in by_correction]
        assert len(corrected) == len(set(corrected)) and all(state in once for state in by_correction)
        fewer += len(once) - len(by_correction)
    assert fewer > 0
    with pytest.raises(RelabelError, match="give --corrections-only with them"):
        relabel_runs([DATA], tmp_path / "none.jsonl", exclude=(), options=RelabelOptions(each_correction_once=True))
