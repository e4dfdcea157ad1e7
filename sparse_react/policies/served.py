"""A model behind an OpenAI-compatible server (vLLM, SGLang, llama.cpp, Ollama, `transformers serve`)
as a ReAct policy: the same loop, records, rhythms and reports as the local model.

What is sent: with the completions API, the episode rendered by `sparse_react.transcript.render`
(the text the local policy reads, its head under a local tokenizer's chat template when
`tokenizer` names one); with the chat API, `chat_messages` and the server's own template. Both
only grow within an episode, so a server's prefix cache keeps every earlier turn.

Each turn, by action mode:
- `scored`: each admissible command (and ` think:` when the rhythm allows a thought) is appended
  to the transcript and sent with `echo` and `logprobs`; its tokens' mean log-probability ranks
  it, as the local scored mode does. Needs a server that returns prompt log-probabilities
  (vLLM); one that does not, or returns them one token late (llama-cpp-python's server), is told
  apart when the policy starts.
- `free`: the model writes the line; `think: ...` is a thought where the rhythm allows one, anything
  else is normalised into a command (`invalid_rate`: the share not admissible).
A thought is generated to the end of its line. All requests of a turn's episodes go out at once
(at most `max_requests` in flight); timeouts, 429 and 5xx answers are retried with backoff.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import urlsplit, urlunsplit

import httpx

from sparse_react.agent import Context, Decision, PolicyUnavailable, Request
from sparse_react.lines import (
    EMPTY_THOUGHT, MAX_ACTION_TOKENS, MAX_THOUGHT_TOKENS, THINK_PREFIX, Kind, is_thought, normalise_action, thought_line,
    thought_text)
from sparse_react.policies.base import PolicyError
from sparse_react.transcript import chat_messages, render, render_head

APIS = ("completions", "chat")
SERVED_ACTION_MODES = ("scored", "free")
KEY_VARIABLE = "OPENAI_API_KEY"
CONNECT_TIMEOUT = 10.0  # seconds; a server that accepts no connection in that time counts as gone


class ServerError(PolicyError):
    """A server's answer this policy cannot use (an error status, a body that is not the API's
    JSON); the episode that asked ends as an error episode with this message."""


@dataclass(frozen=True)
class Retry:
    """How failed requests are tried again: `tries` in all, waiting `backoff` seconds doubled each
    time (at most `cap`, or what a 429's Retry-After asks), each answer timing out after `timeout`."""

    tries: int = 6
    backoff: float = 0.5
    cap: float = 8.0
    timeout: float = 120.0

    def wait(self, attempt: int, answer: httpx.Response | None) -> float:
        asked = answer.headers.get("retry-after") if answer is not None else None
        if asked and asked.replace(".", "", 1).isdigit():
            return min(float(asked), self.cap)
        return min(self.backoff * 2 ** attempt, self.cap) * (0.75 + random.random() / 2)


def public_url(url: str) -> str:
    """The endpoint without any user name or password in it (what records may show)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


class Client:
    """JSON posts to one server from a private event loop thread, many in flight at once. Made
    again after a fork (worker processes) and never pickled."""

    def __init__(self, endpoint: str, key: str | None, retry: Retry, max_requests: int) -> None:
        base = endpoint.rstrip("/")
        self.base = base if base.endswith("/v1") else base + "/v1"
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.retry, self.max_requests = retry, max_requests
        self._state: tuple[int, asyncio.AbstractEventLoop, httpx.AsyncClient, asyncio.Semaphore] | None = None
        self.stats = {"requests": 0, "failed_tries": 0, "prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_state": None}

    def _loop(self) -> tuple[asyncio.AbstractEventLoop, httpx.AsyncClient, asyncio.Semaphore]:
        if self._state is None or self._state[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="served-policy", daemon=True).start()

            async def make() -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
                limits = httpx.Limits(max_connections=self.max_requests, max_keepalive_connections=self.max_requests)
                timeout = httpx.Timeout(self.retry.timeout, connect=CONNECT_TIMEOUT)
                return (httpx.AsyncClient(headers=self.headers, timeout=timeout, limits=limits),
                        asyncio.Semaphore(self.max_requests))

            self._state = (os.getpid(), loop, *asyncio.run_coroutine_threadsafe(make(), loop).result())
        return self._state[1:]

    def post_all(self, calls: Sequence[tuple[str, dict]]) -> list[dict | ServerError]:
        """The JSON answers of `calls` ((path, body)), in order; an unusable answer
        is its ServerError. PolicyUnavailable when the server could not be reached at all."""
        loop, http, gate = self._loop()

        async def all_of() -> list[Any]:
            return await asyncio.gather(*(self._call(http, gate, path, body) for path, body in calls),
                                        return_exceptions=True)

        answers = asyncio.run_coroutine_threadsafe(all_of(), loop).result()
        for answer in answers:
            if isinstance(answer, BaseException) and not isinstance(answer, ServerError):
                raise answer
        return answers

    async def _call(self, http: httpx.AsyncClient, gate: asyncio.Semaphore, path: str, body: dict) -> dict:
        url = self.base + path
        for attempt in range(self.retry.tries):
            answer = None
            try:
                async with gate:
                    answer = await http.post(url, json=body)
            except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout) as exc:  # there, but slow on this one
                problem: Exception = ServerError(f"{url} did not answer within {self.retry.timeout:g} s "
                                                 f"({self.retry.tries} tries; {type(exc).__name__})")
            except httpx.TransportError as exc:  # refused, reset, disconnected: the server is gone
                problem = PolicyUnavailable(
                    f"the server at {public_url(self.base)} did not answer after {self.retry.tries} tries "
                    f"({type(exc).__name__}: {exc or 'no detail'})")
            else:
                if answer.status_code < 400:
                    try:
                        return answer.json()
                    except ValueError:
                        raise ServerError(f"{url} answered with something that is not JSON: "
                                          f"{answer.text[:200]!r}") from None
                problem = ServerError(f"{url} answered {answer.status_code}: {_error_text(answer)}")
            self.stats["failed_tries"] += 1
            if answer is not None and answer.status_code != 429 and answer.status_code < 500:
                raise problem  # the request itself is wrong: asking again changes nothing
            if attempt + 1 < self.retry.tries:
                await asyncio.sleep(self.retry.wait(attempt, answer))
        raise problem


def _error_text(answer: httpx.Response) -> str:
    try:
        body = answer.json()
    except ValueError:
        return answer.text[:200] or "(empty body)"
    error = body.get("error", body) if isinstance(body, dict) else body
    message = error.get("message") or error.get("detail") if isinstance(error, dict) else None
    return str(message or error)[:300]


class ServedPolicy:
    """A model on an OpenAI-compatible server (see the module docstring).

    `endpoint` is the server's base URL (with or without `/v1`), `model` the name it serves the
    model under; the API key, if any, is read from the environment variable `key_variable` and
    never recorded. `api` is `completions` (the local rendering; `tokenizer`, a local model folder,
    `.gguf` file or `base`, supplies the chat template of the head) or `chat` (the server's
    template; free mode only). `shots` (2 or 0) and `window` as for the local model.
    """

    name = "served"
    batched = True

    def __init__(self, endpoint: str, model: str, action_mode: str | None = None, api: str = "completions",
                 tokenizer: str | None = None, shots: int | None = None, window: int = 0,
                 max_thought_tokens: int | None = None, temperature: float = 0.0, seed: int = 0,
                 key_variable: str = KEY_VARIABLE, retry: Retry = Retry(), max_requests: int = 64) -> None:
        self.action_mode = action_mode or "scored"
        if self.action_mode not in SERVED_ACTION_MODES:
            raise PolicyError(f"action mode {self.action_mode!r} cannot be played on a server; one of "
                              f"{', '.join(SERVED_ACTION_MODES)}")
        if api not in APIS:
            raise PolicyError(f"unknown API {api!r}; one of {', '.join(APIS)}")
        if api == "chat" and self.action_mode == "scored":
            raise PolicyError("the chat API returns no log-probabilities of a prompt: score with --api completions, "
                              "or play --action-mode free")
        self.shots = 2 if shots is None else shots
        if self.shots not in (0, 2):
            raise PolicyError(f"shots must be 0 (no examples) or 2 (the prompt's two examples), not {self.shots}")
        self.model, self.api, self.window, self.temperature, self.seed = model, api, window, temperature, seed
        self.max_thought_tokens = max_thought_tokens or MAX_THOUGHT_TOKENS
        self.tokenizer_source = tokenizer
        self._tokenizer = _load_tokenizer(tokenizer) if tokenizer else None
        chat = bool(getattr(self._tokenizer, "chat_template", None))
        # the chat template rendered once per episode prefix, for every episode that can be in flight
        self._head = functools.lru_cache(maxsize=max_requests)(
            lambda prefix: render_head(self._tokenizer, prefix, chat) if chat else prefix)
        self.client = Client(endpoint, os.environ.get(key_variable), retry, max_requests)
        self.endpoint = public_url(self.client.base)
        self.stats = self.client.stats
        self.invalid_actions = self.free_actions = 0
        self.server = self._server_identity()
        if self.action_mode == "scored":
            self._check_scoring()

    # --- the Policy protocol ---------------------------------------------------------------------

    def spec(self) -> dict:
        """The endpoint (no key), the served model's name, the server's version, and every setting."""
        return {"kind": self.name, "endpoint": self.endpoint, "model": self.model, "server": self.server,
                "api": self.api, "action_mode": self.action_mode, "tokenizer": self.tokenizer_source,
                "shots": self.shots, "window": self.window, "temperature": self.temperature, "seed": self.seed,
                "max_thought_tokens": self.max_thought_tokens}

    def start(self, context: Context) -> None:
        """Nothing to prepare: the server keeps what it caches."""

    def end(self, context: Context) -> None:
        """Nothing to free."""

    @property
    def invalid_rate(self) -> float:
        """Share of freely generated commands that were not admissible (0 before any)."""
        return self.invalid_actions / self.free_actions if self.free_actions else 0.0

    def decide(self, requests: Sequence[Request]) -> list[Decision | Exception]:
        """One decision per request: every request's scoring calls go out together, then every
        line to be written."""
        out: list[Decision | Exception | None] = [None] * len(requests)
        writers: dict[int, str] = {}  # row -> "thought" or "line"
        scored: dict[int, list[str]] = {}
        for row, (context, admissible) in enumerate(requests):
            if Kind.ACTION not in context.allowed:
                writers[row] = "thought"
            elif self.action_mode == "free":
                writers[row] = "line"
            else:
                scored[row] = [f" {c}\n" for c in admissible] + ([" " + THINK_PREFIX] if Kind.THOUGHT in context.allowed else [])
        for row, scores in self._score({r: (requests[r][0], c) for r, c in scored.items()}).items():
            context, admissible = requests[row]
            if isinstance(scores, Exception):
                out[row] = scores
            elif Kind.THOUGHT in context.allowed and (not admissible or scores[-1] > max(scores[:-1])):
                writers[row] = "thought"
            else:
                out[row] = Decision(admissible[max(range(len(admissible)), key=scores.__getitem__)] if admissible
                                    else "look", "scored")
        for row, written in self._write({r: (requests[r][0], how) for r, how in writers.items()}).items():
            out[row] = written if isinstance(written, Exception) else self._line(requests[row], writers[row], *written)
        return out  # type: ignore[return-value]

    # --- turning answers into lines ----------------------------------------------------------------

    def _line(self, request: Request, how: str, text: str, tokens: int | None) -> Decision:
        context, admissible = request
        text = text.split("\n")[0].strip()
        if how == "thought" or (is_thought(text) and Kind.THOUGHT in context.allowed):
            thought = thought_text(text) if is_thought(text) else text
            return Decision(thought_line(thought) if thought else EMPTY_THOUGHT, "think", tokens)
        command = normalise_action(thought_text(text) if is_thought(text) else text) or "look"
        self.free_actions += 1
        self.invalid_actions += command not in admissible
        return Decision(command, "free", tokens)

    # --- requests --------------------------------------------------------------------------------

    def _prefix(self, context: Context) -> str:
        return context.prefix if self.shots else context.zero_shot_prefix

    def _text(self, context: Context) -> str:
        return render(self._head(self._prefix(context)), context.turns, self.window).text

    def _score(self, asked: dict[int, tuple[Context, list[str]]]) -> dict[int, list[float] | Exception]:
        calls, owners = [], []
        for row, (context, candidates) in asked.items():
            text = self._text(context)
            for candidate in candidates:
                calls.append(("/completions", {"model": self.model, "prompt": text + candidate, "max_tokens": 1,
                                               "echo": True, "logprobs": 1, "temperature": 0.0}))
                owners.append((row, len(text), len(text) + len(candidate)))
        answers = self._post(calls)
        out: dict[int, list[float] | Exception] = {row: [] for row in asked}
        for (row, start, end), answer in zip(owners, answers):
            if isinstance(out[row], Exception):
                continue
            try:
                out[row].append(_mean_logprob(_answer(answer), start, end))  # type: ignore[union-attr]
            except ServerError as exc:
                out[row] = exc
        return out

    def _write(self, asked: dict[int, tuple[Context, str]]) -> dict[int, tuple[str, int | None] | Exception]:
        rows, calls = list(asked), []
        for row in rows:
            context, how = asked[row]
            limit = self.max_thought_tokens if how == "thought" or Kind.THOUGHT in context.allowed else MAX_ACTION_TOKENS
            body: dict[str, Any] = {"model": self.model, "max_tokens": limit, "temperature": self.temperature,
                                    "stop": ["\n"], "seed": self.seed}
            if self.api == "chat":
                messages = chat_messages(self._prefix(context), context.turns, self.window)
                calls.append(("/chat/completions", {**body, "messages": messages}))
            else:
                forced = " " + THINK_PREFIX if how == "thought" else ""
                calls.append(("/completions", {**body, "prompt": self._text(context) + forced}))
        out: dict[int, tuple[str, int | None] | Exception] = {}
        for row, answer in zip(rows, self._post(calls)):
            try:
                choice = _answer(answer)
                text = choice["message"].get("content") if self.api == "chat" else choice.get("text")
                if not isinstance(text, str):
                    raise ServerError(f"the server's answer holds no text: {str(choice)[:200]}")
                out[row] = (text, (answer.get("usage") or {}).get("completion_tokens"))
            except (ServerError, KeyError, TypeError, AttributeError) as exc:
                out[row] = exc if isinstance(exc, ServerError) else ServerError(f"malformed answer: {str(answer)[:200]}")
        return out

    def _post(self, calls: list[tuple[str, dict]]) -> list[dict | ServerError]:
        if not calls:
            return []
        answers = self.client.post_all(calls)
        for answer in answers:
            if isinstance(answer, dict):
                usage = answer.get("usage") or {}
                self.stats["requests"] += 1
                self.stats["prompt_tokens"] += usage.get("prompt_tokens") or 0
                self.stats["completion_tokens"] += usage.get("completion_tokens") or 0
                self.stats["cached_tokens"] += (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        return answers

    # --- at start --------------------------------------------------------------------------------

    def _server_identity(self) -> dict:
        """What the server says it is (its version from vLLM's /version or llama.cpp's /props, the
        model's owner), after checking it answers and serves `model`."""
        def get(path: str) -> Any:
            try:
                answer = httpx.get(path, headers=self.client.headers, timeout=10)
                return answer.json() if answer.status_code == 200 else None
            except ValueError:
                return None

        try:
            listed = get(self.client.base + "/models")
        except httpx.HTTPError as exc:
            raise PolicyError(f"cannot reach a server at {self.endpoint} ({type(exc).__name__}): is it running, and is "
                              f"that its address?") from None
        models = [m for m in listed.get("data", []) if isinstance(m, dict)] if isinstance(listed, dict) else []
        if models and self.model not in [m.get("id") for m in models]:
            raise PolicyError(f"the server at {self.endpoint} does not serve {self.model!r}; it serves: "
                              f"{', '.join(str(m.get('id')) for m in models)}")
        owner = next((m.get("owned_by") for m in models if m.get("id") == self.model), None)
        identity = {"owned_by": owner} if owner else {}
        root = self.client.base.removesuffix("/v1")
        for path, key in (("/version", "version"), ("/props", "build_info")):
            try:
                value = (get(root + path) or {}).get(key)
            except (httpx.HTTPError, AttributeError):
                value = None
            if value:
                return {"version": str(value), **identity}
        return identity

    def _check_scoring(self) -> None:
        """Scoring needs the log-probabilities of a prompt's own tokens (echo + logprobs), each the
        probability of that token after the ones before it. Checked on the server's own greedy
        token: echoed after the prompt, its log-probability must be the highest at its place (a
        server that reports each token's probability one place late fails this)."""
        probe = "You are in the middle of a room. Looking quickly around you, you see a"
        first = self._post([("/completions", {"model": self.model, "prompt": probe, "max_tokens": 1,
                                              "temperature": 0.0})])[0]
        try:
            greedy = str(_answer(first).get("text") or "")
            choice = _answer(self._post([("/completions", {"model": self.model, "prompt": probe + greedy,
                                                           "max_tokens": 1, "echo": True, "logprobs": 1,
                                                           "temperature": 0.0})])[0])
            _mean_logprob(choice, len(probe) // 2, len(probe))
        except ServerError as exc:
            raise PolicyError(f"the server at {self.endpoint} cannot score commands ({exc}): it must return the "
                              f"log-probabilities of a prompt's tokens (completions with echo and logprobs, as vLLM "
                              f"does); play --action-mode free instead") from None
        logprobs = choice["logprobs"]
        place = next((i for i, offset in enumerate(logprobs["text_offset"]) if offset >= len(probe)), None)
        tops = logprobs.get("top_logprobs") or []
        if greedy.strip() and place is not None and place < len(tops) and tops[place]:
            value, best = logprobs["token_logprobs"][place], max(tops[place].values())
            if value is not None and value < best - 0.01:
                raise PolicyError(
                    f"the server at {self.endpoint} reports each prompt token's log-probability one place late (its "
                    f"own greedy token {greedy!r} gets {value:.2f} where the best there has {best:.2f}; "
                    f"llama-cpp-python's server does this), so it cannot score commands: play --action-mode free, "
                    f"or serve the model with vLLM")


def _answer(answer: dict | ServerError) -> dict:
    """The first choice of an answer; ServerError for an error answer or a body without choices."""
    if isinstance(answer, ServerError):
        raise answer
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not choices or not isinstance(choices[0], dict):
        error = answer.get("error") if isinstance(answer, dict) else None
        raise ServerError(f"the server answered without choices: {str(error or answer)[:200]}")
    return choices[0]


def _mean_logprob(choice: dict, start: int, end: int) -> float:
    """The mean log-probability of the prompt tokens covering characters [start, end) of an echoed
    prompt (a token that straddles `start` counts: it carries the candidate's first characters)."""
    logprobs = choice.get("logprobs") or {}
    values, offsets = logprobs.get("token_logprobs"), logprobs.get("text_offset")
    if not values or not offsets or len(values) != len(offsets):
        raise ServerError("no log-probabilities of the prompt's tokens came back")
    ends = list(offsets[1:]) + [offsets[-1] + 1]
    picked = [v for v, first, last in zip(values, offsets, ends) if last > start and first < end and v is not None]
    if not picked:
        raise ServerError("the prompt's log-probabilities do not cover the candidate")
    return sum(picked) / len(picked)


def _load_tokenizer(source: str) -> Any:
    """The tokenizer (for its chat template) of a local model folder, a .gguf file, or `base`."""
    from transformers import AutoTokenizer

    from sparse_react.cards import ModelError
    from sparse_react.policies.hf import default_model_path

    path = default_model_path() if source == "base" else Path(source).expanduser()
    try:
        if path.is_file():
            return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name, local_files_only=True)
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # transformers raises many kinds; name the path
        raise ModelError(f"cannot load a tokenizer from {path} ({type(exc).__name__}): pass a local model folder, "
                         f"a .gguf file or base") from None
