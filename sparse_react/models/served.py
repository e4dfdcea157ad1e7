"""A model behind an OpenAI-compatible server (vLLM, SGLang, llama.cpp, Ollama, `transformers serve`)
as a `Backend`.

What is sent: with the completions API, each prompt's text (the episode as this package renders it
for a local model, its head under a local tokenizer's chat template when `tokenizer` names one);
with the chat API, the prompt's chat messages under the server's own template. Both only grow
within an episode, so a server's prefix cache keeps every earlier turn; the backend itself keeps
nothing (`prefill`, `commit` and `release` do nothing).

- `score`: each candidate is appended to the prompt and sent with `echo` and `logprobs`; its
  tokens' mean log-probability is its score. Needs a server that returns prompt log-probabilities
  (vLLM); `check_scoring` tells apart one that does not, or returns them one token late
  (llama-cpp-python's server).
- `generate`: the server writes the line (stop at a newline); with the chat API a forced start
  cannot be imposed, so where the model wrote it itself it is taken off the answer.

All requests of a call go out at once (at most `max_requests` in flight); timeouts, 429 and 5xx
answers are retried with backoff. A request that fails is its `ServerError` in its place; a server
that cannot be reached at all raises `PolicyUnavailable`.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import threading
from dataclasses import dataclass
from typing import Any, Hashable, Sequence
from urllib.parse import urlsplit, urlunsplit

import httpx

from sparse_react.agent import PolicyError, PolicyUnavailable
from sparse_react.models.backend import GenerateRequest, Generation, Prompt, Scores, ScoreRequest
from sparse_react.transcript import render_head

APIS = ("completions", "chat")
KEY_VARIABLE = "OPENAI_API_KEY"
CONNECT_TIMEOUT = 10.0  # seconds; a server that accepts no connection in that time counts as gone
PROBE = "You are in the middle of a room. Looking quickly around you, you see a"


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


class ServedBackend:
    """A model on an OpenAI-compatible server (see the module docstring).

    `endpoint` is the server's base URL (with or without `/v1`), `model` the name it serves the
    model under; the API key, if any, is read from the environment variable `key_variable` and
    never recorded. `api` is `completions` (`tokenizer`, a local model folder, `.gguf` file or
    `base`, supplies the chat template of a prompt's head) or `chat` (the server's template; it
    cannot score). `seed` goes with every request that samples. Checks at once that the server
    answers and serves `model` (PolicyError otherwise).
    """

    def __init__(self, endpoint: str, model: str, api: str = "completions", tokenizer: str | None = None,
                 seed: int = 0, key_variable: str = KEY_VARIABLE, retry: Retry = Retry(),
                 max_requests: int = 64) -> None:
        if api not in APIS:
            raise PolicyError(f"unknown API {api!r}; one of {', '.join(APIS)}")
        self.model, self.api, self.seed, self.tokenizer_source = model, api, seed, tokenizer
        self.wants_messages = api == "chat"
        self.can_score = False  # until `check_scoring` finds it can
        self._tokenizer = _load_tokenizer(tokenizer) if tokenizer else None
        chat = bool(getattr(self._tokenizer, "chat_template", None))
        # the chat template rendered once per episode prefix, for every episode that can be in flight
        self.frame = functools.lru_cache(maxsize=max_requests)(
            lambda prefix: render_head(self._tokenizer, prefix, chat) if chat else prefix)
        self.client = Client(endpoint, os.environ.get(key_variable), retry, max_requests)
        self.endpoint = public_url(self.client.base)
        self.stats = self.client.stats
        self.server = self._server_identity()

    def identity(self) -> dict:
        """The endpoint (no credentials), the served model's name, what the server says it is, the API
        and the tokenizer that frames the head."""
        return {"endpoint": self.endpoint, "model": self.model, "server": self.server, "api": self.api,
                "tokenizer": self.tokenizer_source}

    # --- the Backend primitives ------------------------------------------------------------------

    def prefill(self, prompts: Sequence[Prompt]) -> list[int | None]:
        """Nothing to do: the server caches what it keeps."""
        return [None] * len(prompts)

    def commit(self, key: Hashable, continuation: str) -> None:
        """Nothing to keep."""

    def release(self, key: Hashable) -> None:
        """Nothing to free."""

    def score(self, requests: Sequence[ScoreRequest]) -> list[Scores | Exception]:
        """Each candidate's mean log-probability, echoed after its prompt; one request per candidate,
        all in flight together."""
        calls, owners = [], []
        for row, request in enumerate(requests):
            text = request.prompt.text
            for candidate in request.candidates:
                calls.append(("/completions", {"model": self.model, "prompt": text + candidate, "max_tokens": 1,
                                               "echo": True, "logprobs": 1, "temperature": 0.0}))
                owners.append((row, len(text), len(text) + len(candidate)))
        answers = self._post(calls)
        out: list[list[float] | Exception] = [[] for _ in requests]
        for (row, start, end), answer in zip(owners, answers):
            if isinstance(out[row], Exception):
                continue
            try:
                out[row].append(mean_logprob(_answer(answer), start, end))  # type: ignore[union-attr]
            except ServerError as exc:
                out[row] = exc
        return [values if isinstance(values, Exception) else Scores(values) for values in out]

    def generate(self, requests: Sequence[GenerateRequest]) -> list[Generation | Exception]:
        """Each request's line as the server writes it, to the first newline."""
        calls = []
        for request in requests:
            body: dict[str, Any] = {"model": self.model, "max_tokens": request.max_tokens,
                                    "temperature": request.temperature, "stop": ["\n"], "seed": self.seed}
            if self.api == "chat":
                calls.append(("/chat/completions", {**body, "messages": list(request.prompt.messages)}))
            else:
                calls.append(("/completions", {**body, "prompt": request.prompt.text + request.forced}))
        out: list[Generation | Exception] = []
        for request, answer in zip(requests, self._post(calls)):
            try:
                choice = _answer(answer)
                text = choice["message"].get("content") if self.api == "chat" else choice.get("text")
                if not isinstance(text, str):
                    raise ServerError(f"the server's answer holds no text: {str(choice)[:200]}")
                text = text.split("\n")[0]
                if self.api == "chat" and request.forced.strip():
                    text = _without_start(text, request.forced.strip())
                out.append(Generation(text, (answer.get("usage") or {}).get("completion_tokens")))
            except (ServerError, KeyError, TypeError, AttributeError) as exc:
                out.append(exc if isinstance(exc, ServerError) else ServerError(f"malformed answer: {str(answer)[:200]}"))
        return out

    # --- what the server is and can do -------------------------------------------------------------

    def check_scoring(self) -> str | None:
        """Why this server cannot score candidates, or None when it can (and `can_score` is then True).

        Scoring needs the log-probabilities of a prompt's own tokens (echo + logprobs), each the
        probability of that token after the ones before it. Checked on the server's own greedy
        token: echoed after the prompt, its log-probability must be the highest at its place (a
        server that reports each token's probability one place late fails this)."""
        if self.api == "chat":
            return "the chat API returns no log-probabilities of a prompt"
        first = self._post([("/completions", {"model": self.model, "prompt": PROBE, "max_tokens": 1,
                                              "temperature": 0.0})])[0]
        try:
            greedy = str(_answer(first).get("text") or "")
            choice = _answer(self._post([("/completions", {"model": self.model, "prompt": PROBE + greedy,
                                                           "max_tokens": 1, "echo": True, "logprobs": 1,
                                                           "temperature": 0.0})])[0])
            mean_logprob(choice, len(PROBE) // 2, len(PROBE))
        except ServerError as exc:
            return (f"the server at {self.endpoint} cannot score commands ({exc}): it must return the "
                    f"log-probabilities of a prompt's tokens (completions with echo and logprobs, as vLLM does)")
        logprobs = choice["logprobs"]
        place = next((i for i, offset in enumerate(logprobs["text_offset"]) if offset >= len(PROBE)), None)
        tops = logprobs.get("top_logprobs") or []
        if greedy.strip() and place is not None and place < len(tops) and tops[place]:
            value, best = logprobs["token_logprobs"][place], max(tops[place].values())
            if value is not None and value < best - 0.01:
                return (f"the server at {self.endpoint} reports each prompt token's log-probability one place late "
                        f"(its own greedy token {greedy!r} gets {value:.2f} where the best there has {best:.2f}; "
                        f"llama-cpp-python's server does this), so it cannot score commands")
        self.can_score = True
        return None

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


def _answer(answer: dict | ServerError) -> dict:
    """The first choice of an answer; ServerError for an error answer or a body without choices."""
    if isinstance(answer, ServerError):
        raise answer
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not choices or not isinstance(choices[0], dict):
        error = answer.get("error") if isinstance(answer, dict) else None
        raise ServerError(f"the server answered without choices: {str(error or answer)[:200]}")
    return choices[0]


def mean_logprob(choice: dict, start: int, end: int) -> float:
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


def _without_start(text: str, start: str) -> str:
    """`text` without `start` (case aside) where it begins with it."""
    stripped = text.lstrip()
    return stripped[len(start):] if stripped.lower().startswith(start.lower()) else text


def _load_tokenizer(source: str) -> Any:
    """The tokenizer (for its chat template) of a local model folder, a .gguf file, or `base`."""
    from sparse_react.models.loading import load_tokenizer

    return load_tokenizer(None if source == "base" else source)
