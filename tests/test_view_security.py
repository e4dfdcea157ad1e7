"""The viewer and resume under hostile records and beyond loopback: a record's endpoint never gets
the user's key, a bind beyond loopback needs a flag and a token, and Host/Origin checks hold there.

The listeners are real HTTP servers on loopback that note every request's Authorization header;
they answer like an OpenAI-compatible server just enough for the policy to start."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from sparse_react.agent import LoopRules, run_episode
from sparse_react.household.env import HouseholdEnv
from sparse_react.policies.expert import ExpertPolicy
from sparse_react.trajectory import append_episode, read_episodes
from sparse_react.view import create_app

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-test-never-leak-0123456789"


class Listener:
    """A loopback HTTP server that records (method, path, Authorization) of every request and
    answers /v1/models with model `m`; anything else gets a 400."""

    def __init__(self) -> None:
        seen = self.seen = []

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                seen.append((self.command, self.path, self.headers.get("Authorization")))
                if self.path.endswith("/models"):
                    body, status = json.dumps({"data": [{"id": "m", "owned_by": "test"}]}).encode(), 200
                else:
                    body, status = b"{}", 400  # a client error: not retried
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listeners():
    made = [Listener(), Listener()]
    yield made
    for listener in made:
        listener.close()


@pytest.fixture
def served_record(bundled_unseen, tmp_path, listeners):
    """A run folder whose one episode (played by the expert) claims a served model at the first
    listener, as a shared or hostile record may."""
    game = bundled_unseen[0]
    episode = run_episode(HouseholdEnv([game]), ExpertPolicy(), game, "sparse", rules=LoopRules(max_steps=8))
    episode.policy = "served"
    episode.policy_spec = {"kind": "served", "endpoint": listeners[0].url, "model": "m", "action_mode": "free",
                           "api": "chat"}
    record = tmp_path / "run" / "episodes.jsonl"
    append_episode(record, episode)
    return record


def cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "sparse_react.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, **(env or {})})


def test_resume_never_sends_the_key_to_a_records_endpoint(served_record, listeners, tmp_path):
    before = served_record.read_bytes()
    refused = cli("resume", str(served_record), "--episode", "0", "--edit", "1", "the egg may be in the fridge",
                  env={"OPENAI_API_KEY": KEY})
    assert refused.returncode == 2 and "never contacted" in refused.stderr and "--endpoint URL" in refused.stderr
    assert "Traceback" not in refused.stderr and served_record.read_bytes() == before
    assert listeners[0].seen == []

    out = tmp_path / "resumed.jsonl"
    named = cli("resume", str(served_record), "--episode", "0", "--edit", "1", "the egg may be in the fridge",
                "--endpoint", listeners[1].url, "--out", str(out), env={"OPENAI_API_KEY": KEY})
    assert listeners[0].seen == [], "the record's endpoint was contacted"
    assert listeners[1].seen and all(auth == f"Bearer {KEY}" for _, _, auth in listeners[1].seen), named.stderr
    assert served_record.read_bytes() == before


def test_the_view_shows_who_carries_on_and_never_sends_the_key_to_a_records_endpoint(served_record, listeners,
                                                                                   monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    before = served_record.read_bytes()
    client = TestClient(create_app([served_record.parent]), base_url="http://127.0.0.1")
    page = client.get("/runs/0/episodes/0").text
    assert "never contacted" in page and "--endpoint URL" in page and "edit this thought and resume" not in page
    for _ in range(3):
        steered = client.post("/runs/0/episodes/0/steer", data={"step": "1", "thought": "look", "mode": "edit"},
                              follow_redirects=False)
        assert steered.status_code == 400 and "never contacted" in steered.text
    assert listeners[0].seen == [] and served_record.read_bytes() == before

    named = TestClient(create_app([served_record.parent], endpoint=listeners[1].url), base_url="http://127.0.0.1")
    page = named.get("/runs/0/episodes/0").text
    assert f"at {listeners[1].url}, the server named with --endpoint" in page and "edit this thought" in page
    named.post("/runs/0/episodes/0/steer", data={"step": "1", "thought": "look", "mode": "edit"})
    assert listeners[0].seen == [] and listeners[1].seen
    assert {auth for _, _, auth in listeners[1].seen} == {f"Bearer {KEY}"}


def free_port(family: int = socket.AF_INET, host: str = "127.0.0.1") -> int:
    with socket.socket(family) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def start_view(*args: str) -> tuple[subprocess.Popen, str]:
    """`sparse-react view ARGS` in a child process, and the URL it printed once it answers."""
    process = subprocess.Popen([sys.executable, "-m", "sparse_react.cli", "view", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=REPO)
    line = process.stdout.readline()
    match = re.search(r"(http://\S+)", line)
    assert match, (line, process.stderr.read() if process.poll() is not None else "")
    return process, match.group(1)


def test_a_bind_beyond_loopback_needs_the_flag(served_record):
    refused = cli("view", str(served_record.parent), "--host", "0.0.0.0", "--port", "0")
    assert refused.returncode == 2 and "--allow-remote" in refused.stderr and "http://" not in refused.stdout


def test_beyond_loopback_the_token_and_the_host_check_stay_in_force(bundled_unseen, tmp_path):
    game = bundled_unseen[0]
    record = tmp_path / "run" / "episodes.jsonl"
    append_episode(record, run_episode(HouseholdEnv([game]), ExpertPolicy(), game, "sparse",
                                       rules=LoopRules(max_steps=8)))
    process, url = start_view(str(record.parent), "--host", "0.0.0.0", "--port", "0", "--allow-remote")
    try:
        token = re.search(r"token=([\w-]+)", url).group(1)
        port = int(re.search(r":(\d+)/", url).group(1))
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        while True:
            try:
                httpx.get(base + "/")
                break
            except httpx.TransportError:
                assert time.time() < deadline and process.poll() is None
                time.sleep(0.2)
        steer = {"step": "1", "thought": "the egg may be in the fridge", "mode": "edit"}
        assert httpx.get(base + "/").status_code == 403  # no token
        assert httpx.post(base + "/runs/0/episodes/0/steer", data=steer).status_code == 403  # from the LAN, no Origin
        rebinding = httpx.post(base + "/runs/0/episodes/0/steer", data=steer, cookies={"sparse_react_token": token},
                               headers={"Host": "evil.example", "Origin": "http://evil.example"})
        assert rebinding.status_code == 400
        foreign = httpx.post(base + "/runs/0/episodes/0/steer", data=steer, cookies={"sparse_react_token": token},
                             headers={"Origin": "http://evil.example"})
        assert foreign.status_code == 403
        assert len(read_episodes(record)) == 1
        opened = httpx.get(f"{base}/?token={token}")
        assert opened.status_code == 303 and opened.headers["location"] == "/"
        assert opened.cookies.get("sparse_react_token") == token
        with httpx.Client(base_url=base, cookies=opened.cookies) as browser:
            assert browser.get("/").status_code == 200
            assert browser.post("/runs/0/episodes/0/steer", data=steer, timeout=120).status_code == 303
        assert len(read_episodes(record)) == 2
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert "warning: listening on 0.0.0.0" in process.stderr.read()


def test_ipv6_loopback_prints_a_url_that_opens(served_record):
    try:
        port = free_port(socket.AF_INET6, "::1")
    except OSError:
        pytest.skip("this machine has no IPv6 loopback")
    process, url = start_view(str(served_record.parent), "--host", "::1", "--port", str(port))
    try:
        assert url == f"http://[::1]:{port}/"
        deadline = time.time() + 60
        while True:
            try:
                assert httpx.get(url).status_code == 200
                break
            except httpx.TransportError:
                assert time.time() < deadline and process.poll() is None
                time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_port_in_use_fails_before_any_url_is_printed(served_record):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = cli("view", str(served_record.parent), "--port", str(port))
    assert result.returncode == 2 and f"cannot listen on 127.0.0.1 port {port}" in result.stderr
    assert "http://" not in result.stdout
