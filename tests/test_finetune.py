"""The fine-tuning pipeline at toy scale: expert episodes → export (no evaluation game may leak) →
a few optimizer steps on a tiny real model (the loss goes down, checkpoints resume) → the saved
folder loads as a policy and plays a real game zero-shot. Bad input gets a clear message."""

from __future__ import annotations

import json
import os
import shutil

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")
from transformers import TrainerCallback  # noqa: E402

from sparse_react.agent import LoopRules, run_episode  # noqa: E402
from sparse_react.evaluation import evaluate  # noqa: E402
from sparse_react.household.catalog import find_games  # noqa: E402
from sparse_react.household.env import HouseholdEnv  # noqa: E402
from sparse_react.models.loading import load_model  # noqa: E402
from sparse_react.options import TrainOptions  # noqa: E402
from sparse_react.policies.expert import ExpertPolicy  # noqa: E402
from sparse_react.policies.hf import HFPolicy  # noqa: E402
from sparse_react.policies.random_admissible import RandomPolicy  # noqa: E402
from sparse_react.training.export import ExportError, export  # noqa: E402
from sparse_react.training.finetune import (  # noqa: E402
    ELAPSED,
    FinetuneError,
    _Collator,
    agent_line_loss,
    finetune,
    read_examples,
    tokenize_example,
)

from tiny import tiny_model  # noqa: E402

TOY = dict(max_steps=12, learning_rate=3e-3, batch_size=2, grad_accum=1, save_steps=6, max_length=1024)


@pytest.fixture(scope="module")
def expert_data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sft")
    games = find_games("train")[::10][:6]  # one game per task type
    evaluate(games, ExpertPolicy(), "sparse", run_dir=folder / "run", progress=False)
    summary = export([folder / "run"], folder / "data.jsonl")
    return summary, folder / "data.jsonl"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-base")
    tiny_model(folder, chat=True)
    return folder


def test_export_writes_chat_messages_with_the_agents_lines_as_assistant(expert_data):
    summary, path = expert_data
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert summary.examples == len(records) == 6 and summary.by_rhythm == {"sparse": 6}
    for record in records:
        roles = [m["role"] for m in record["messages"]]
        assert roles[0] == "user" and roles[1::2] == ["assistant"] * (len(roles) // 2)
        assert "Your turn" not in record["messages"][0]["content"]  # zero-shot: no examples
        assert record["game_sha256"] and record["rhythm"] == "sparse"
    assert any(m["content"].startswith("think:") for r in records for m in r["messages"] if m["role"] == "assistant")


def test_export_gives_the_same_file_whatever_order_the_episodes_finished_in(expert_data, tmp_path):
    _, path = expert_data
    run = path.parent / "run" / "episodes.jsonl"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "episodes.jsonl").write_text("".join(reversed(run.read_text().splitlines(keepends=True))))
    export([tmp_path / "run"], tmp_path / "data.jsonl")
    assert (tmp_path / "data.jsonl").read_bytes() == path.read_bytes()


def test_labels_cover_only_the_agents_lines(expert_data, tiny):
    _, path = expert_data
    loaded = load_model(tiny, device="cpu")
    messages = read_examples(path)[0]["messages"]
    row = tokenize_example(loaded.tokenizer, messages, chat=True, max_length=100_000)
    learned = loaded.tokenizer.decode([t for t, label in zip(row["input_ids"], row["labels"]) if label != -100])
    agent = "".join(f" {m['content']}\n" for m in messages if m["role"] == "assistant")
    assert learned.split() == agent.split()
    assert messages[2]["content"].split()[0] not in learned.split()[:3]


def test_the_agent_line_loss_equals_the_models_own_loss(expert_data, tiny):
    _, path = expert_data
    loaded = load_model(tiny, device="cpu", dtype=torch.float32)
    rows = [tokenize_example(loaded.tokenizer, e["messages"], True, 4096) for e in read_examples(path)[:3]]
    batch = _Collator(loaded.tokenizer.pad_token_id or 0)(rows)
    total, count = agent_line_loss(loaded.model, batch)
    assert count == sum(sum(label != -100 for label in r["labels"][1:]) for r in rows)
    assert torch.allclose(total / count, loaded.model(**batch).loss, atol=1e-5)


def test_toy_pipeline_trains_saves_loads_and_plays(expert_data, tiny, tmp_path, bundled_unseen):
    _, path = expert_data
    card = finetune(path, tmp_path / "model", TrainOptions(str(tiny), **TOY), progress=False)
    assert card["steps"] == 12 and card["rhythm"] == "sparse" and card["shots"] == 0
    assert card["last_loss"] < card["first_loss"]
    assert (tmp_path / "model" / "model.safetensors").is_file()
    assert card["max_thought_tokens"] > 20  # the expert's first thought is a sentence or two
    assert HFPolicy(model=tmp_path / "model", device="cpu").max_thought_tokens == card["max_thought_tokens"]
    policy = HFPolicy(model=tmp_path / "model", device="cpu", max_thought_tokens=4)
    assert policy.shots == 0
    env = HouseholdEnv(bundled_unseen)
    episode = run_episode(env, policy, bundled_unseen[0], "sparse", rules=LoopRules(max_steps=4, loop_repeats=0))
    assert episode.error is None and len(episode.entries) == 4


class _StopAt(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt


def test_an_interrupted_run_resumes_from_its_checkpoint(expert_data, tiny, tmp_path):
    _, path = expert_data  # in low-memory mode, which changes the allocator, not the arithmetic
    settings = TrainOptions(str(tiny), **{**TOY, "max_steps": 8, "save_steps": 3, "low_memory": True})
    with pytest.raises(KeyboardInterrupt):
        finetune(path, tmp_path / "model", settings, progress=False, callbacks=[_StopAt(5)])
    before = json.loads((tmp_path / "model" / "checkpoints" / "checkpoint-3" / ELAPSED).read_text())["seconds"]
    card = finetune(path, tmp_path / "model", settings, progress=False)
    assert card["resumed_from"] == "checkpoint-3" and card["steps"] == 8
    assert before > 0 and card["seconds"] == pytest.approx(before + card["seconds_this_run"], abs=0.2)
    assert card["settings"]["low_memory"] is True and card["last_loss"] < card["first_loss"]


def test_bad_training_input_is_named(expert_data, tiny, tmp_path):
    _, path = expert_data
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(FinetuneError, match="no examples"):
        finetune(empty, tmp_path / "m", TrainOptions(str(tiny)))
    mixed = tmp_path / "mixed.jsonl"
    lines = path.read_text().splitlines()
    mixed.write_text("\n".join([lines[0], lines[1].replace('"rhythm": "sparse"', '"rhythm": "act"')]) + "\n")
    with pytest.raises(FinetuneError, match="mixes rhythms act, sparse"):
        finetune(mixed, tmp_path / "m", TrainOptions(str(tiny)))
    with pytest.raises(FinetuneError, match="not an exported example"):
        garbage = tmp_path / "garbage.jsonl"
        garbage.write_text("{\"hello\": 1}\n")
        finetune(garbage, tmp_path / "m", TrainOptions(str(tiny)))
    from transformers import T5Config, T5ForConditionalGeneration

    not_causal = tmp_path / "t5"
    T5ForConditionalGeneration(T5Config(vocab_size=600, d_model=16, d_ff=32, num_layers=1, num_heads=2,
                                        d_kv=8)).save_pretrained(not_causal)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny / name, not_causal / name)
    with pytest.raises(FinetuneError, match="base model: cannot load model from .*t5"):
        finetune(path, tmp_path / "m", TrainOptions(str(not_causal)))


def test_export_refuses_evaluation_games_and_empty_runs(tmp_path, bundled_unseen):
    evaluate(bundled_unseen[:1], ExpertPolicy(), "act", run_dir=tmp_path / "leak", progress=False)
    with pytest.raises(ExportError, match=bundled_unseen[0].name.replace("/", ".")):
        export([tmp_path / "leak"], tmp_path / "leak.jsonl")
    assert not (tmp_path / "leak.jsonl").exists()
    evaluate(find_games("train")[:1], RandomPolicy(0), "act", rules=LoopRules(max_steps=3),
             run_dir=tmp_path / "lost", progress=False)
    with pytest.raises(ExportError, match="no won episode"):
        export([tmp_path / "lost"], tmp_path / "lost.jsonl")


def test_the_embedded_gguf_model_fine_tunes_and_saves_as_a_plain_model(expert_data, tmp_path):
    _, path = expert_data
    settings = TrainOptions(None, max_steps=1, batch_size=1, grad_accum=1, max_length=96, save_steps=10)
    card = finetune(path, tmp_path / "model", settings, progress=False)
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert card["steps"] == 1 and "quantization_config" not in config
    assert HFPolicy(model=tmp_path / "model", device="cpu").shots == 0
