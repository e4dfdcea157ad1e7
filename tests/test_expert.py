"""The expert wins every game from the start, and from states reached by random play; its parts
are seams: the reader is pure, `label` is a query, each rhythm's thought writer writes only where
the rhythm allows, and only `lines.py` says what a thought is."""

from __future__ import annotations

import copy
import random
import re
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from sparse_react.agent import Context, LoopRules, run_episode
from sparse_react.evaluation import evaluate
from sparse_react.household.catalog import BUNDLED_SPLITS, find_games
from sparse_react.household.env import HouseholdEnv, StepBudget
from sparse_react.household.tasks import TaskType
from sparse_react.lines import Kind, thought_line
from sparse_react.policies.expert import (
    ExpertError,
    ExpertPolicy,
    ExpertTask,
    RelabellingExpertPolicy,
    SearchingExpertPolicy,
    read,
)
from sparse_react.policies.expert.thoughts import Moment, write_thought
from sparse_react.policies.random_admissible import RandomPolicy
from sparse_react.report import success_table
from sparse_react.resume import ReplayPolicy
from sparse_react.rhythms import RHYTHMS, get_rhythm
from sparse_react.training.relabel import episode_game
from sparse_react.trajectory import Failure, read_episodes

PACKAGE = Path(__file__).resolve().parents[1] / "sparse_react"
MODEL_EPISODES = Path(__file__).parent / "data" / "model_episodes.jsonl"


def _assert_all_won(episodes):
    lost = [(e.game, len(e.entries), e.failure, e.error) for e in episodes if not e.won]
    assert not lost, lost
    assert all(len(e.actions) <= 50 for e in episodes)


def test_expert_wins_one_valid_seen_game_per_task_type(valid_seen_games):
    sample = [next(g for g in valid_seen_games if g.task_type is t) for t in TaskType]
    _assert_all_won(evaluate(sample, ExpertPolicy(), progress=False))


def test_expert_wins_one_bundled_game_per_task_type(bundled_unseen):
    sample = [next(g for g in bundled_unseen if g.task_type is t) for t in TaskType]
    _assert_all_won(evaluate(sample, ExpertPolicy(), progress=False))


@pytest.mark.slow
@pytest.mark.parametrize("split", BUNDLED_SPLITS)
def test_expert_wins_every_bundled_game(split):
    episodes = evaluate(find_games(split), ExpertPolicy(), progress=False)
    _assert_all_won(episodes)
    assert len(episodes) >= 60


@pytest.mark.slow
def test_expert_wins_every_valid_seen_game(valid_seen_games):
    episodes = evaluate(valid_seen_games, ExpertPolicy(), progress=False)
    assert len(episodes) == 140
    _assert_all_won(episodes)
    assert "140/140 (100%)" in success_table(episodes)


@pytest.mark.parametrize("index", [0, 60, 120])
def test_expert_recovers_after_random_play(valid_seen_games, index):
    game = valid_seen_games[::7][index // 7]
    env = StepBudget(HouseholdEnv([game]), max_steps=50)
    observation, info = env.reset(options={"game": game})
    context = Context(get_rhythm("act"), game.task_type, info["task"], "", game=game)
    rng = random.Random(index)
    for _ in range(6):  # leave the solution path: random admissible commands
        command = rng.choice(info["admissible_commands"])
        observation, _, terminated, _, info = env.step(command)
        context.append(command, observation)
        if terminated:
            break
    expert = ExpertPolicy()  # handed control mid-episode: it knows only what the context says happened
    expert.start(context)
    while not info["won"] and env.steps < 50:
        (decision,) = expert.decide([(context, info["admissible_commands"])])
        observation, _, _, _, info = env.step(decision.line)
        context.append(decision.line, observation)
    assert info["won"], f"expert did not recover in {game.name}"


def test_a_budget_ending_is_a_failure(bundled_unseen):
    env = HouseholdEnv(bundled_unseen)
    episode = run_episode(env, RandomPolicy(seed=1), bundled_unseen[0], "act", rules=LoopRules(max_steps=1))
    assert episode.won is False and episode.failure is Failure.BUDGET and len(episode.entries) == 1


# -- the seams --------------------------------------------------------------------------------
def _turns(episode):
    return [(thought_line(e.text) if e.kind is Kind.THOUGHT else e.text, e.observation) for e in episode.entries]


def _task(episode, game):
    rhythm = get_rhythm(episode.rhythm)
    return ExpertTask.of(Context.start(rhythm, game.task_type, episode.task, episode.initial_observation, game=game))


def test_the_reader_is_pure():
    """Real model episodes (thoughts, false claims, loops): the same turns read the same state,
    whatever was read before, and neither the turns nor the state can change."""
    for episode in read_episodes(MODEL_EPISODES):
        turns, task = _turns(episode), _task(episode, episode_game(episode))
        kept = copy.deepcopy(turns)
        whole = read(turns, task)
        states = [read(turns[:n], task) for n in range(len(turns) + 1)]
        assert states[-1] == whole and read(list(turns), task) == whole
        assert turns == kept
        assert whole.actions == tuple(e.text for e in episode.actions)
        assert whole.last_is_thought is (episode.entries[-1].kind is Kind.THOUGHT)
        with pytest.raises(FrozenInstanceError):
            whole.held = "apple 1"
        with pytest.raises(TypeError):
            whole.seen["apple 1"] = "fridge 1"


class _AskingFirst:
    """Plays as `expert`, but first asks it to label every earlier state in every rhythm."""

    def __init__(self, expert: RelabellingExpertPolicy) -> None:
        self.expert, self.name, self.batched, self.asked = expert, expert.name, False, 0

    def spec(self) -> dict:
        return self.expert.spec()

    def start(self, context: Context) -> None:
        self.task = ExpertTask.of(context)
        self.expert.start(context)

    def end(self, context: Context) -> None:
        self.expert.end(context)

    def decide(self, requests):
        (context, admissible), = requests
        kept = list(context.turns)
        for n in range(len(kept), -1, -1):
            for rhythm in RHYTHMS.values():
                try:
                    first = self.expert.label(self.task, kept[:n], admissible, admissible, rhythm)
                except ExpertError:
                    continue
                assert self.expert.label(self.task, kept[:n], admissible, admissible, rhythm) == first
                self.asked += 1
        assert context.turns == kept
        return self.expert.decide(requests)


def test_label_leaves_the_expert_unchanged():
    """Handed a lost model episode after its false claim, the relabelling expert plays the same
    lines whether or not it was asked for labels of every earlier state before each of them."""
    episode = next(e for e in read_episodes(MODEL_EPISODES) if "Laptop-None-DeskLamp-g303" in e.game)
    game = episode_game(episode)
    played = {}
    for asking in (False, True):
        expert = RelabellingExpertPolicy(replan_detours=True)
        then = _AskingFirst(expert) if asking else expert
        replay = ReplayPolicy(episode.entries[:11], then)
        played[asking] = run_episode(HouseholdEnv([game]), replay, game, episode.rhythm, rules=LoopRules(max_steps=40))
    plain, asked = ([(e.kind, e.text, e.observation) for e in played[k].entries] for k in (False, True))
    assert asked == plain and played[True].won
    assert plain[11][0] is Kind.THOUGHT and plain[11][1].startswith("I was wrong")


# rhythm -> (previous line, a key moment?) -> the thought it writes
_EXPECTED = {
    "sparse": {(None, True): "KEY", (Kind.ACTION, True): "KEY", (Kind.ACTION, False): None,
               (Kind.THOUGHT, True): "KEY", (Kind.THOUGHT, False): None},
    "dense": {(None, True): "KEY", (Kind.ACTION, True): "KEY", (Kind.ACTION, False): "WHY",
              (Kind.THOUGHT, True): None, (Kind.THOUGHT, False): None},
    "im": {(None, True): "GOAL", (Kind.ACTION, True): "GOAL", (Kind.ACTION, False): "GOAL",
           (Kind.THOUGHT, True): None, (Kind.THOUGHT, False): None},
    "act": {case: None for case in [(None, True), (Kind.ACTION, True), (Kind.ACTION, False), (Kind.THOUGHT, True),
                                    (Kind.THOUGHT, False)]},
}


@pytest.mark.parametrize("rhythm", list(RHYTHMS))
def test_each_rhythms_thought_writer_writes_only_where_the_rhythm_allows(rhythm):
    for (previous, key), expected in _EXPECTED[rhythm].items():
        moment = Moment(previous, key=lambda: "KEY" if key else None, why=lambda: "WHY", goal=lambda: "GOAL")
        thought = write_thought(get_rhythm(rhythm), moment)
        assert thought == expected, (previous, key)
        assert thought is None or Kind.THOUGHT in get_rhythm(rhythm).allowed(previous)


@pytest.mark.parametrize("policy", [ExpertPolicy, SearchingExpertPolicy, RelabellingExpertPolicy])
def test_the_experts_think_in_each_rhythms_style(bundled_unseen, policy):
    game = next(g for g in bundled_unseen if g.task_type is TaskType.HEAT)
    expert = policy()
    for name in RHYTHMS:
        episode = run_episode(HouseholdEnv([game]), expert, game, name)
        thoughts, actions = len(episode.thoughts), len(episode.actions)
        assert episode.won, (name, episode.error)
        assert {"sparse": 0 < thoughts < actions, "dense": thoughts == actions, "im": thoughts == actions,
                "act": thoughts == 0}[name], (name, thoughts, actions)
        if name == "im":
            assert all(e.text.startswith("Goal: ") for e in episode.thoughts)


_DECIDES_A_THOUGHT = re.compile(r"""startswith\(\s*(?:THINK|["']think)|==\s*(?:THINK|["']think)|(?:THINK_PREFIX|["']think:["'])\s*==""")


def test_only_lines_says_what_a_thought_is():
    deciding = [f"{path.relative_to(PACKAGE)}:{number}" for path in PACKAGE.rglob("*.py") if path.name != "lines.py"
                for number, text in enumerate(path.read_text().splitlines(), start=1) if _DECIDES_A_THOUGHT.search(text)]
    assert not deciding, f"these decide whether a line is a thought without lines.is_thought: {deciding}"
