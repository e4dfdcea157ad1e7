"""One think-or-act rule over any backend: a model double with fixed scores (a double for a model;
the games and the loop are real) decides the same through the local policy's constructor and the
served policy's, and the rule's cases come out as the policy's docstring says."""

from __future__ import annotations

import zlib

import pytest

from sparse_react.agent import Context, LoopRules
from sparse_react.evaluation import evaluate
from sparse_react.household.tasks import TaskType
from sparse_react.lines import Kind
from sparse_react.models.backend import Backend, Generation, Scores
from sparse_react.policies.hf import HFPolicy
from sparse_react.policies.react import ReActPolicy
from sparse_react.policies.served import ServedPolicy
from sparse_react.rhythms import get_rhythm

THINK_SCORE = -0.45


class FixedScores:
    """A model whose scores are fixed by each candidate's text (` think:` gets THINK_SCORE, a command a
    number in [-1, 0) from its hash), and whose every line is fixed: `thought` after a forced
    ` think:`, `line` otherwise. Each call costs 1 token per request."""

    wants_messages = False
    card: dict = {}

    def __init__(self, line: str = "think: go to desk 1", thought: str = "the pen is on the desk",
                 can_score: bool = True) -> None:
        self.line, self.thought, self.can_score = line, thought, can_score
        self.stats = {"scored": 0, "written": 0}
        self.committed: list[str] = []

    def frame(self, prefix):
        return prefix

    def prefill(self, prompts):
        return [None] * len(prompts)

    def score(self, requests):
        self.stats["scored"] += len(requests)
        return [Scores([THINK_SCORE if c == " think:" else command_score(c.strip()) for c in r.candidates], 1)
                for r in requests]

    def generate(self, requests):
        self.stats["written"] += len(requests)
        return [Generation(f" {self.thought}" if r.forced else self.line, 1) for r in requests]

    def commit(self, key, continuation):
        self.committed.append(continuation)

    def release(self, key):
        pass

    def identity(self):
        return {"model": "fixed-scores"}


def both_paths(settings: dict, **double) -> list[ReActPolicy]:
    return [HFPolicy(backend=FixedScores(**double), **settings),
            ServedPolicy("http://127.0.0.1:9", "fixed-scores", backend=FixedScores(**double), **settings)]


@pytest.fixture(scope="module")
def sample(bundled_unseen):
    return [next(g for g in bundled_unseen if g.task_type is t) for t in TaskType][:4]


def test_the_double_is_a_backend():
    assert isinstance(FixedScores(), Backend)


@pytest.mark.parametrize("settings", [
    dict(action_mode="scored"),
    dict(action_mode="scored", temperature=0.8, seed=3),
    dict(action_mode="free"),
    dict(action_mode="free", shots=0, window=3),
], ids=["scored", "scored-sampled", "free", "free-zero-shot-window"])
def test_the_local_and_served_policies_decide_the_same(sample, settings):
    played = []
    for policy in both_paths(settings):
        episodes = evaluate(sample, policy, ["sparse", "dense", "act"], rules=LoopRules(max_steps=12, loop_repeats=0),
                            progress=False, batch=len(sample))
        assert all(e.error is None for e in episodes), [e.error for e in episodes]
        played.append([[(e.kind, e.text, e.mode, e.tokens) for e in ep.entries] for ep in episodes])
        if settings["action_mode"] == "free":  # the double writes `think: go to desk 1` whenever an action is due
            assert policy.free_actions == sum(e.mode == "free" for ep in episodes for e in ep.entries) > 0
    local, served = played
    assert local == served
    entries = [entry for episode in local for entry in episode]
    assert {mode for *_, mode, _ in entries} == {"think", settings["action_mode"]}
    assert all(text == "the pen is on the desk" for kind, text, *_ in entries if kind is Kind.THOUGHT)
    if settings["action_mode"] == "free":
        assert {text for kind, text, *_ in entries if kind is Kind.ACTION} == {"go to desk 1"}


def _context(rhythm: str = "sparse") -> Context:
    return Context.start(get_rhythm(rhythm), TaskType.PICK, "put a pen in the drawer", "You are in the middle of a room.")


def _decide(policy: ReActPolicy, admissible: list[str], rhythm: str = "sparse"):
    context = _context(rhythm)
    policy.start(context)
    (decision,) = policy.decide([(context, admissible)])
    return decision


def command_score(command: str) -> float:
    return -(zlib.crc32(f" {command}\n".encode()) % 1000 + 1) / 1000


@pytest.mark.parametrize("path", [0, 1], ids=["local", "served"])
def test_the_rule_case_by_case(path):
    def policy(settings: dict, **double) -> ReActPolicy:
        return both_paths(settings, **double)[path]

    worst, best = "go to drawer 1", "inventory"
    assert command_score(worst) < THINK_SCORE < command_score(best) == max(map(command_score, ["look", best, worst]))
    # scored: the best command, with the tokens of every call; a thought when it outscores every command
    decision = _decide(policy({}), ["look", "inventory", worst], "act")
    assert (decision.line, decision.mode, decision.tokens) == (best, "scored", 1)
    decision = _decide(policy({}), [worst])
    assert (decision.line, decision.mode, decision.tokens) == ("think: the pen is on the desk", "think", 2)
    assert _decide(policy({}), []).line == "think: the pen is on the desk"  # nothing admissible: think
    assert _decide(policy({}), [], "act").line == "look"  # nothing admissible, no thought: look
    # free: the scores choose between thinking and acting; a `think:` label where an action is due is dropped
    assert _decide(policy({"action_mode": "free"}), [worst]).mode == "think"
    decision = _decide(policy({"action_mode": "free"}), ["look", worst], "act")
    assert (decision.line, decision.mode) == ("go to desk 1", "free")
    # free on a backend that cannot score: the model's own line decides
    decision = _decide(policy({"action_mode": "free"}, can_score=False), ["look"])
    assert (decision.line, decision.mode) == ("think: go to desk 1", "think")
    decision = _decide(policy({"action_mode": "free"}, line="> Take pen 1.", can_score=False), ["look"])
    assert (decision.line, decision.mode) == ("Take pen 1", "free")
    # a thought due (dense): written after ` think:` without scoring
    double = policy({})
    assert _decide(double, ["look"], "dense").line == "think: the pen is on the desk"
    assert double.backend.stats == {"scored": 0, "written": 1}
    assert double.backend.committed == [" think: the pen is on the desk\n"]


def test_scored_sampling_follows_the_temperature():
    low, high = (ReActPolicy(FixedScores(), temperature=t, seed=0) for t in (0.01, 100.0))
    admissible = [f"go to shelf {i}" for i in range(1, 9)]
    greedy = _decide(ReActPolicy(FixedScores()), admissible, "act").line
    assert {_decide(low, admissible, "act").line for _ in range(20)} == {greedy}
    assert len({_decide(high, admissible, "act").line for _ in range(40)}) > 3
