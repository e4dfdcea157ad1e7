"""A model on a real OpenAI-compatible server as the policy: `transformers serve` with the tests' tiny
model (free mode, the completions and chat APIs, faults) and llama.cpp's server from
llama-cpp-python with the embedded model (free mode; its prompt log-probabilities come back one
token late, which the scored mode must refuse). Servers run on this machine's loopback address;
nothing is mocked."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from sparse_react.agent import Context, LoopRules, run_episode  # noqa: E402
from sparse_react.evaluation import evaluate  # noqa: E402
from sparse_react.household.env import HouseholdEnv  # noqa: E402
from sparse_react.household.tasks import TaskType  # noqa: E402
from sparse_react.lines import Kind  # noqa: E402
from sparse_react.models.served import ServerError, mean_logprob  # noqa: E402
from sparse_react.policies import make_policy, policy_from_spec  # noqa: E402
from sparse_react.policies.base import PolicyError  # noqa: E402
from sparse_react.policies.served import Retry, ServedPolicy  # noqa: E402
from sparse_react.rhythms import get_rhythm  # noqa: E402
from sparse_react.trajectory import Failure, read_episodes  # noqa: E402

from tiny import tiny_model  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TRANSFORMERS_SERVE = shutil.which("transformers", path=str(Path(sys.executable).parent))
KEY = "sk-test-never-recorded-4242"
NO_LLAMA_CPP = "llama.cpp's server is not installed: pip install 'llama-cpp-python[server]' (bash .ci/run does)"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """A server process on loopback, started by `command` (with {port}), ready once /v1/models answers."""

    def __init__(self, command: list[str], port: int | None = None, log: Path | None = None) -> None:
        self.command, self.port, self.log = command, port or free_port(), log
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self, wait: float = 180) -> "Server":
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        self.process = subprocess.Popen([part.format(port=self.port) for part in self.command], stdout=out,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.command[0]} exited with {self.process.returncode}; see {self.log}")
            try:
                if httpx.get(self.url + "/v1/models", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.5)
        raise RuntimeError(f"{self.command} did not answer within {wait} s")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def transformers_serve(model: Path, log: Path) -> Server:
    """`transformers serve` with `model` on loopback, started (the test skips where it is not installed)."""
    if TRANSFORMERS_SERVE is None:
        pytest.skip("transformers serve is not installed: pip install -e '.[test]'")
    return Server([TRANSFORMERS_SERVE, "serve", str(model), "--host", "127.0.0.1", "--port", "{port}",
                   "--device", "cpu"], log=log).start()


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-served")
    tiny_model(folder, chat=True)
    return folder


@pytest.fixture(scope="module")
def hf_server(tiny_folder, tmp_path_factory):
    """`transformers serve` with the tests' tiny model."""
    server = transformers_serve(tiny_folder, tmp_path_factory.mktemp("logs") / "serve.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def sample(bundled_unseen):
    return [next(g for g in bundled_unseen if g.task_type is t) for t in TaskType][:3]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    """llama.cpp's server (llama-cpp-python) with the embedded SmolLM2-135M GGUF, echoing prompt log-probabilities."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip(NO_LLAMA_CPP)
    from sparse_react.models.loading import default_model_path

    server = Server([sys.executable, "-m", "llama_cpp.server", "--model", str(default_model_path()), "--model_alias",
                     "smollm2", "--logits_all", "true", "--n_ctx", "4096", "--host", "127.0.0.1", "--port", "{port}"],
                    log=tmp_path_factory.mktemp("logs") / "llama.log").start()
    yield server
    server.stop()


def served(server, model, **settings) -> ServedPolicy:
    return make_policy("served", endpoint=server.url, model=str(model), **settings)


def test_free_mode_plays_records_and_never_writes_the_key(hf_server, tiny_folder, sample, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    policy = served(hf_server, tiny_folder, action_mode="free", shots=0)
    episodes = evaluate(sample, policy, ["sparse", "act"], rules=LoopRules(max_steps=6), run_dir=tmp_path / "run",
                        progress=False, batch=4)
    assert len(episodes) == 6 and not [e.error for e in episodes if e.error]
    for episode in episodes:
        assert episode.entries and all(e.mode in ("free", "think") for e in episode.entries)
        assert episode.rhythm == "sparse" or not episode.thoughts
    assert policy.stats["requests"] >= sum(len(e.entries) for e in episodes)
    assert policy.free_actions == sum(len(e.actions) for e in episodes)
    spec = episodes[0].policy_spec
    assert spec["kind"] == "served" and spec["model"] == str(tiny_folder) and spec["endpoint"] == hf_server.url + "/v1"
    assert spec["server"]["owned_by"] == "local"
    for path in (tmp_path / "run").iterdir():
        assert KEY not in path.read_text(), path


def test_chat_api_keeps_the_rhythm_and_a_record_rebuilds_the_policy(hf_server, tiny_folder, sample):
    policy = served(hf_server, tiny_folder, action_mode="free", api="chat")
    episode = run_episode(HouseholdEnv(sample), policy, sample[0], "dense", rules=LoopRules(max_steps=6))
    assert episode.error is None and [e.kind for e in episode.entries] == [Kind.THOUGHT, Kind.ACTION] * 3
    with pytest.raises(PolicyError, match="never contacted.*--endpoint URL"):
        policy_from_spec(episode.policy, episode.policy_spec)  # a record's endpoint is not trusted
    again = policy_from_spec(episode.policy, episode.policy_spec, endpoint=hf_server.url)
    assert isinstance(again, ServedPolicy) and again.spec() == policy.spec()


def test_a_server_that_cannot_score_is_told_apart_at_start(hf_server, tiny_folder):
    with pytest.raises(PolicyError, match="cannot score commands.*--action-mode free"):
        served(hf_server, tiny_folder)


def test_unreachable_server_and_unknown_model_are_clear_errors(hf_server, tiny_folder):
    with pytest.raises(PolicyError, match=r"cannot reach a server at http://127\.0\.0\.1:\d+/v1"):
        make_policy("served", endpoint=f"http://127.0.0.1:{free_port()}", model="m", action_mode="free")
    with pytest.raises(PolicyError, match=f"does not serve 'nope'; it serves: {tiny_folder}"):
        served(hf_server, "nope", action_mode="free")


def play_three(policy: ServedPolicy, sample, run_dir: Path) -> list:
    """The sample's three games played together, four steps each; every one is on record."""
    episodes = evaluate(sample, policy, "sparse", rules=LoopRules(max_steps=4), run_dir=run_dir, progress=False,
                        batch=3)
    assert len(read_episodes(run_dir / "episodes.jsonl")) == 3
    return episodes


def test_a_request_the_server_rejects_ends_its_episode_at_once_and_the_run_goes_on(hf_server, tiny_folder,
                                                                                  sample, tmp_path):
    """A request the server refuses as the client's fault (a 4xx: a negative token limit here) is not
    tried again: its episode ends as an error naming the answer, and the run finishes."""
    policy = served(hf_server, tiny_folder, action_mode="free", max_thought_tokens=-5,
                    retry=Retry(tries=3, backoff=0.1))
    episodes = play_three(policy, sample, tmp_path / "run")
    for episode in episodes:
        assert episode.failure is Failure.ERROR and "/v1/completions answered 400" in episode.error
    assert policy.stats["failed_tries"] == 3


def test_requests_a_server_keeps_failing_are_retried_then_end_their_episodes_and_the_run_goes_on(
        tiny_folder, sample, tmp_path):
    """`transformers serve` whose model process has crashed answers every request with a 503: each is
    tried again with backoff, then its episode ends as an error naming the answer; the run finishes."""
    server = transformers_serve(tiny_folder, tmp_path / "serve.log")
    try:
        policy = served(server, tiny_folder, action_mode="free", retry=Retry(tries=3, backoff=0.1))
        model_process = [child for child in psutil.Process(server.process.pid).children()
                         if "resource_tracker" not in " ".join(child.cmdline())]
        assert len(model_process) == 1, model_process
        model_process[0].kill()
        episodes = play_three(policy, sample, tmp_path / "run")
    finally:
        server.stop()
    for episode in episodes:
        assert episode.failure is Failure.ERROR and "/v1/completions answered 503" in episode.error
        assert "process crashed" in episode.error
    assert policy.stats["failed_tries"] == 3 * 3


def test_requests_that_time_out_end_their_episode_as_an_error(hf_server, tiny_folder, sample):
    """A server that is there but too slow for the client's timeout: the episode ends as an error
    naming the timeout (the run is not stopped, as it is for a server that is gone)."""
    policy = served(hf_server, tiny_folder, action_mode="free", retry=Retry(tries=2, backoff=0.05, timeout=0.001))
    episode = run_episode(HouseholdEnv(sample), policy, sample[0], "act", rules=LoopRules(max_steps=3))
    assert episode.failure is Failure.ERROR and "did not answer within 0.001 s (2 tries; ReadTimeout)" in episode.error


def test_a_server_killed_mid_run_loses_nothing_and_the_rerun_finishes(tiny_folder, bundled_unseen, tmp_path):
    """The CLI's eval against a server killed after a few episodes: it stops with exit 2 and a message
    saying how to resume, keeping every finished episode; after a restart the same command plays
    exactly the rest."""
    server = transformers_serve(tiny_folder, tmp_path / "serve.log")
    out = tmp_path / "run"
    command = [sys.executable, "-m", "sparse_react.cli", "eval", "--games", "valid_unseen", "--limit", "12",
               "--endpoint", server.url, "--model", str(tiny_folder), "--action-mode", "free", "--max-steps", "5",
               "--concurrency", "2", "--out", str(out)]
    try:
        run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        episodes = out / "episodes.jsonl"
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and (not episodes.exists() or len(episodes.read_text().splitlines()) < 3):
            time.sleep(0.2)
        server.stop()
        _, err = run.communicate(timeout=120)
        assert run.returncode == 2, err
        assert "did not answer" in err and "rerun the same command to resume" in err and "Traceback" not in err
        before = read_episodes(episodes)
        assert 3 <= len(before) < 12 and not [e for e in before if e.error]
        server.start()
        again = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=600)
        assert again.returncode == 0, again.stderr
    finally:
        server.stop()
    after = read_episodes(episodes)
    names = [e.settings["game_name"] for e in after]
    assert len(after) == 12 and len(set(names)) == 12
    assert [e.to_dict() for e in after[:len(before)]] == [e.to_dict() for e in before]


def test_completions_prompt_is_the_local_policys_text(hf_server, tiny_folder, sample):
    """With the model's tokenizer named, the served prompt is exactly the text the local policy reads,
    and it only grows from turn to turn (what a server's prefix cache needs)."""
    from sparse_react.policies.hf import HFPolicy

    local = HFPolicy(tiny_folder, device="cpu", dtype="float32", shots=0)
    remote = served(hf_server, tiny_folder, action_mode="free", shots=0, tokenizer=str(tiny_folder))
    context = Context.start(get_rhythm("sparse"), sample[0].task_type, "task", "You are in the middle of a room.")
    texts = []
    for line, answer in [("think: first the lamp", "OK."), ("go to desk 1", "On the desk 1, you see a pen 1.")]:
        context.append(line, answer)
        local.start(context)
        assert remote.prompt(context).text == local.prompt(context).text
        texts.append(remote.prompt(context).text)
    assert texts[1].startswith(texts[0].removesuffix(">"))


def test_mean_logprob_covers_the_candidates_tokens_only():
    choice = {"logprobs": {"tokens": ["Hi", ">", " go", " to", "\n", "x"], "token_logprobs": [None, -1.0, -2.0, -4.0, -6.0, -9.0],
                           "text_offset": [0, 2, 3, 6, 9, 10]}}
    assert mean_logprob(choice, 3, 10) == pytest.approx(-4.0)  # " go", " to", "\n"; not the generated "x"
    assert mean_logprob(choice, 4, 10) == pytest.approx(-4.0)  # a token straddling the start counts
    with pytest.raises(ServerError, match="no log-probabilities"):
        mean_logprob({"text": "hi"}, 0, 2)


def test_llama_cpp_serves_the_embedded_model_in_free_mode(llama_server, sample):
    """The embedded model with its chat template (`tokenizer="base"`), two examples, the sparse rhythm:
    whatever it writes becomes a thought or a command, and the game answers every line."""
    policy = served(llama_server, "smollm2", action_mode="free", tokenizer="base")
    episode = run_episode(HouseholdEnv(sample), policy, sample[0], "sparse", rules=LoopRules(max_steps=4))
    assert episode.error is None and len(episode.entries) == 4
    assert all(e.mode in ("free", "think") and e.text for e in episode.entries)
    assert episode.policy_spec["model"] == "smollm2" and episode.policy_spec["server"] == {"owned_by": "me"}


def test_prompt_logprobs_one_token_late_are_refused_for_scoring(llama_server):
    """llama-cpp-python's echo gives each prompt token the log-probability read at its own place (the
    distribution of the token after it): ranking commands by it would be wrong, so scoring is refused."""
    with pytest.raises(PolicyError, match="one place late.*play --action-mode free"):
        served(llama_server, "smollm2", tokenizer="base")
