"""The three seams and what crosses them: one policy protocol for one or many live episodes, one
transcript for playing and training, a run identity that tells runs apart, errors that say whose
they are, and imports that run one way."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

import textworld.envs.pddl.logic as pddl_logic  # noqa: E402
import textworld.envs.pddl.textgen as textgen  # noqa: E402

from sparse_react.agent import Context, LoopRules, run_episode, versions  # noqa: E402
from sparse_react.evaluation import RunFolderError, RunSettings, evaluate  # noqa: E402
from sparse_react.household.engine import Engine  # noqa: E402
from sparse_react.household.env import HouseholdEnv  # noqa: E402
from sparse_react.household.game_files import GameFileError, load_game_data  # noqa: E402
from sparse_react.household.tasks import TaskType  # noqa: E402
from sparse_react.lines import Kind  # noqa: E402
from sparse_react.policies.expert import ExpertPolicy, SearchingExpertPolicy  # noqa: E402
from sparse_react.policies.hf import HFPolicy  # noqa: E402
from sparse_react.policies.random_admissible import RandomPolicy  # noqa: E402
from sparse_react.policies.scripted import ScriptedPolicy  # noqa: E402
from sparse_react.resume import resume  # noqa: E402
from sparse_react.rhythms import get_rhythm  # noqa: E402
from sparse_react.training.export import episode_messages  # noqa: E402
from sparse_react.training.finetune import tokenize_example  # noqa: E402
from sparse_react.trajectory import Failure, append_episode  # noqa: E402

from tiny import tiny_model  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
# Every module of the package, lowest first: a module imports only modules before it.
LAYERS = [
    "errors", "household", "training", "schema", "lines", "household.tasks", "bundled", "household.disk_cache",
    "transcript", "trajectory", "claims", "rhythms", "training.cards", "household.game_files",
    "household.engine_cache", "household.catalog", "household.engine", "anatomy", "prompts", "report",
    "thought_report", "household.env", "household.planner", "household.generate", "policies.search_order",
    "agent",
    "models.backend", "models.loading", "models.attention", "models.kv_cache", "models.layers", "models.batch", "models.trie",
    "models.writing", "models.local", "models.recompute", "models.served", "models",
    "policies.base", "policies.expert.task", "policies.expert.reading", "policies.expert.knowledge",
    "policies.expert.phrases", "policies.expert.search", "policies.expert.thoughts", "policies.expert.policy",
    "policies.expert.relabelling", "policies.expert", "policies.random_admissible", "policies.scripted", "policies.react",
    "policies.hf", "policies.shipped", "policies.served", "policies",
    "options", "evaluation", "api", "resume",
    "training.export", "training.relabel", "training.packing", "training.finetune", "training.stages", "training.rounds",
    "training.dev_split", "training.budget", "training.recipe",
    "view.links", "view.records", "view.pages", "view.render", "view.steer", "view.app", "view.serve", "view.static", "view",
    "cli_options", "cli", "",
]
LAZY = {  # modules that import parts of the package inside functions, and why
    "api": "importing the package loads no model library: policies and the batch runner load when called",
    "cli": "each command loads only what it runs (torch for a model, not for `games list`)",
    "policies": "torch and transformers load only when a model policy is asked for",
    "training.rounds": "torch loads only for a round's training, and only the child process that trains needs it",
    "training.recipe": "torch loads only for a stage's training, in the child process that trains",
    "models.served": "a served model needs no torch: transformers loads only for a local chat template",
}


@pytest.fixture(scope="module")
def games(bundled_unseen):
    return [next(g for g in bundled_unseen if g.task_type is t) for t in TaskType]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny") / "tiny-chat"
    tiny_model(folder, chat=True)
    return folder


def _plain(episodes):
    """What an episode is, without its timings."""
    return [[(e.kind, e.text, e.observation, e.mode, e.tokens) for e in ep.entries] + [ep.won, ep.failure]
            for ep in episodes]


def _imports(path: Path) -> tuple[set[str], set[str]]:
    """The package modules a file imports at its top level and inside functions."""
    top, inner = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sparse_react":
            names = {node.module}
        elif isinstance(node, ast.Import):
            names = {a.name for a in node.names if a.name.split(".")[0] == "sparse_react"}
        else:
            continue
        (top if node.col_offset == 0 else inner).update(n.removeprefix("sparse_react").lstrip(".") for n in names)
    return top, inner


def test_imports_run_one_way():
    files = {".".join(p.relative_to(REPO / "sparse_react").with_suffix("").parts).removesuffix("__init__").rstrip("."): p
             for p in (REPO / "sparse_react").rglob("*.py")}
    assert sorted(files) == sorted(LAYERS), "every module has a place in LAYERS"
    for module, path in files.items():
        top, inner = _imports(path)
        upward = [m for m in top | inner if LAYERS.index(m) >= LAYERS.index(module)]
        assert not upward, f"{module} imports {upward}, which are not below it"
        assert not inner or module in LAZY, f"{module} imports {sorted(inner)} inside a function"


def test_line_policies_batched_play_the_same_episodes_as_one_at_a_time(games):
    for policy in (SearchingExpertPolicy(), RandomPolicy(seed=3), ScriptedPolicy(["look", "inventory"] * 3)):
        alone = evaluate(games, policy, ["sparse", "act"], rules=LoopRules(max_steps=12), progress=False)
        together = evaluate(games, policy, ["sparse", "act"], rules=LoopRules(max_steps=12), progress=False, batch=5)
        assert _plain(together) == _plain(alone), policy.name
        assert any(e.won for e in alone) == (policy.name == "search-expert"), policy.name  # only it wins in 12 steps


def test_two_workers_with_batches_play_the_same_episodes_as_one_process(games):
    one = evaluate(games, ExpertPolicy(), ["dense", "act"], progress=False)
    two = evaluate(games, ExpertPolicy(), ["dense", "act"], progress=False, workers=2, batch=3)
    assert _plain(two) == _plain(one) and all(e.won for e in two)


def test_the_expert_needs_no_environment_only_what_the_context_shows(games):
    game = games[1]
    env = HouseholdEnv([game])
    observation, info = env.reset(options={"game": game})
    context = Context.start(get_rhythm("sparse"), game.task_type, info["task"], observation, game=game)
    expert = ExpertPolicy()
    expert.start(context)
    while not info["won"] and len(context.turns) < 50:
        (decision,) = expert.decide([(context, info["admissible_commands"])])
        observation, _, _, _, info = env.step(decision.line) if not decision.line.startswith("think:") \
            else ("OK.", 0, False, False, info)
        context.append(decision.line, observation)
    expert.end(context)
    assert info["won"] and context.turns[0][0].startswith("think: ")


def test_playing_and_training_render_an_episode_to_the_same_tokens(games, tiny):
    """Before each of its lines, the model plays with exactly the tokens it was trained on there."""
    policy = HFPolicy(model=tiny, device="cpu", dtype="float32", shots=0)
    episode = run_episode(HouseholdEnv(games), SearchingExpertPolicy(), games[2], "sparse")
    assert episode.won and episode.thoughts
    trained = tokenize_example(policy.tokenizer, episode_messages(episode), policy.chat, max_length=100_000)
    starts = [i for i, label in enumerate(trained["labels"]) if label != -100 and trained["labels"][i - 1] == -100]
    assert len(starts) == len(episode.entries)
    context = Context.start(get_rhythm("sparse"), games[2].task_type, episode.task, episode.initial_observation,
                            game=games[2])
    policy.start(context)
    for entry, start in zip(episode.entries, starts):
        played = policy.backend.encode(policy.prompt(context).text)
        assert played == trained["input_ids"][:start], f"step {entry.step}"
        context.append(f"think: {entry.text}" if entry.kind is Kind.THOUGHT else entry.text, entry.observation)
    policy.end(context)


def test_a_resumed_model_episode_keeps_its_token_counts_and_the_human_thought(games, tiny, tmp_path):
    policy = HFPolicy(model=tiny, device="cpu", dtype="float32", max_thought_tokens=6)
    record = tmp_path / "run.jsonl"
    old = run_episode(HouseholdEnv(games), policy, games[0], "sparse", rules=LoopRules(max_steps=6, loop_repeats=0))
    assert all(e.tokens for e in old.entries)
    append_episode(record, old)
    new, _ = resume(record, 0, 4, "the apple is in the fridge", policy, insert=True)
    assert [(e.text, e.tokens) for e in new.entries[:3]] == [(e.text, e.tokens) for e in old.entries[:3]]
    assert [e.mode for e in new.entries[:4]] == ["replay"] * 3 + ["human"]
    assert new.entries[3].text == "the apple is in the fridge" and all(e.tokens for e in new.entries[4:])
    assert new.policy_spec == old.policy_spec and new.policy_spec["model"] == str(tiny)


def test_a_run_records_the_policy_spec_and_refuses_another_one(games, tiny, tmp_path):
    run = tmp_path / "run"
    rules = LoopRules(max_steps=3, loop_repeats=0)
    policy = HFPolicy(model=tiny, device="cpu", dtype="float32")
    settings = RunSettings("valid_unseen", "hf", ("act",), rules=dict(max_steps=3, thoughts_count=True, loop_repeats=0),
                           policy_spec=policy.spec())
    [episode] = evaluate(games[:1], policy, "act", rules=rules, run_dir=run, settings=settings, progress=False)
    stored = json.loads((run / "settings.json").read_text())
    spec = stored["policy_spec"]
    assert spec["model"] == str(tiny) and len(spec["weights_sha256"]) == 64 and spec["dtype"] == "float32"
    assert spec["device"] == "cpu" and spec["action_mode"] == "scored" and episode.policy_spec == spec
    assert {"torch", "transformers", "textworld"} <= set(stored["versions"]) and episode.versions == versions()
    moved = {**spec, "model": "/elsewhere/tiny-chat"}  # the same weights elsewhere: resumes, nothing replayed
    again = evaluate(games[:1], policy, "act", rules=rules, run_dir=run, progress=False,
                     settings=RunSettings(**{**settings.__dict__, "policy_spec": moved}))
    assert again[0].wall_time == episode.wall_time
    shipped = {"kind": "shipped", "rhythms": {"act": moved}}  # the shipped policy, the same weights: resumes
    again = evaluate(games[:1], policy, "act", rules=rules, run_dir=run, progress=False,
                     settings=RunSettings(**{**settings.__dict__, "policy": "hf:elsewhere", "policy_spec": shipped}))
    assert again[0].wall_time == episode.wall_time
    retrained = {"kind": "shipped", "rhythms": {"act": {**spec, "weights_sha256": "0" * 64}}}
    with pytest.raises(RunFolderError, match=r"policy_spec\.weights_sha256"):
        evaluate(games[:1], policy, "act", rules=rules, run_dir=run, progress=False,
                 settings=RunSettings(**{**settings.__dict__, "policy_spec": retrained}))
    other = HFPolicy(model=tiny, device="cpu", dtype="bfloat16")
    with pytest.raises(RunFolderError, match=r"policy_spec\.dtype: 'float32' → 'bfloat16'"):
        evaluate(games[:1], other, "act", rules=rules, run_dir=run, progress=False,
                 settings=RunSettings(**{**settings.__dict__, "policy_spec": other.spec()}))
    assert (run / "episodes.jsonl").read_text().count("\n") == 1


def test_an_episode_error_keeps_its_traceback(games):
    episode = run_episode(HouseholdEnv(games), ScriptedPolicy(["look"]), games[0], "act")
    assert episode.failure is Failure.ERROR and episode.error.startswith("ScriptExhausted: ")
    assert "Traceback" in episode.traceback and "scripted.py" in episode.traceback


def test_a_bug_prints_its_traceback_and_says_so():
    program = ("import sys\nfrom sparse_react import cli\n"
               "def broken(*args, **kwargs):\n    return max([])\n"
               "cli.count_by_task = broken\nsys.argv = ['sparse-react', 'games', 'list']\ncli.main()\n")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "ValueError: max() arg is an empty sequence" in result.stderr
    assert "this is a bug in sparse_react" in result.stderr


def test_textworld_is_put_back_after_an_engine_call_that_raised(tmp_path, games):
    engine = Engine()
    originals = (pddl_logic.fast_downward, textgen._parse_and_convert, textgen.copy_context)
    data = load_game_data(games[0].path)
    broken = {**data, "pddl_problem": data["pddl_problem"].replace("(:init", "(:init (nonsense", 1)}
    with pytest.raises(GameFileError, match="could not be loaded"):
        engine.load(tmp_path / "broken.tw-pddl", broken)
    assert (pddl_logic.fast_downward, textgen._parse_and_convert, textgen.copy_context) == originals
