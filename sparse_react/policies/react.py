"""One ReAct policy over any model backend (`sparse_react.models.backend`): the backend scores and
writes; every decision is made here, the same for a local model and a served one.

The prompt is the episode as `sparse_react.transcript.render` writes it, its head framed by the
backend (`Backend.frame`: a chat template, or plain), with two examples or none (`shots`) and the
last `window` turns (0: all). Each turn, for each episode:

- **A thought is due** (the rhythm allows no action): the model writes it after ` think:`.
- **Think or act** (the rhythm allows both): ` think:` is scored against every admissible command
  (` go to desk 1\\n`); the thought wins when its score is above the best command's, or when no
  command is admissible. In `constrained` mode the model's own token-by-token writing decides
  instead. In `free` mode on a backend that cannot score (a server without prompt
  log-probabilities), the line the model writes decides: a `think:` line is a thought.
- **The action**, by action mode:
  - `scored`: the best-scoring admissible command, or one sampled from the softmax of the scores
    at a temperature above 0 (`look` when none is admissible);
  - `constrained`: the command the model writes within the admissible ones;
  - `free`: the line the model writes, normalised (`sparse_react.lines.normalise_action`); a
    `think:` label written where an action is due is dropped (`look` when nothing is left). The
    share of free commands not admissible is `invalid_rate`.

A thought is written to the end of its line, at most `max_thought_tokens` tokens, greedily or
sampled at the temperature; an empty one is written `think: ...`. All episodes of a `decide` call
go to the backend together, one batched call per primitive, and a request the backend fails alone
ends only its own episode.
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable, Sequence

from sparse_react.agent import Context, Decision, PolicyError, Request
from sparse_react.lines import (
    EMPTY_THOUGHT, MAX_ACTION_TOKENS, MAX_THOUGHT_TOKENS, THINK_PREFIX, Kind, is_thought, normalise_action,
    thought_line, thought_text)
from sparse_react.models.backend import (
    Backend, ChooseRequest, ConstrainedBackend, GenerateRequest, Prompt, ScoreRequest)
from sparse_react.transcript import chat_messages, render

ACTION_MODES = ("scored", "constrained", "free")
THINK_CANDIDATE = " " + THINK_PREFIX  # what a thought starts with after the transcript's `>`
Sampler = Callable[[list[float], float], int]  # (scores, temperature above 0) -> the index drawn


def softmax_sampler(seed: int) -> Sampler:
    """A seeded draw from the softmax of scores at a temperature."""
    rng = random.Random(seed)

    def sample(scores: list[float], temperature: float) -> int:
        top = max(scores)
        return rng.choices(range(len(scores)), [math.exp((s - top) / temperature) for s in scores])[0]

    return sample


def check_choices(action_mode: str | None, shots: int | None, modes: Sequence[str] = ACTION_MODES,
                  error: type[Exception] = PolicyError) -> None:
    """`error` naming an action mode not among `modes`, or shots other than 0 or 2 (None: not chosen yet)."""
    if action_mode is not None and action_mode not in modes:
        raise error(f"unknown action mode {action_mode!r}; one of {', '.join(modes)}")
    if shots is not None and shots not in (0, 2):
        raise error(f"shots must be 0 (no examples) or 2 (the prompt's two examples), not {shots}")


class ReActPolicy:
    """Plays ReAct on `backend` by the rule of the module docstring.

    `action_mode` is `scored`, `constrained` (a backend that can write within candidates) or
    `free`; `temperature` 0 is greedy. Sampling draws from `sampler` (default: a generator seeded
    with `seed`). `spec` is what runs record of the policy (default: its name, the backend's
    identity and the settings).
    """

    name = "react"
    batched = True

    def __init__(self, backend: Backend, action_mode: str = "scored", shots: int = 2, window: int = 0,
                 temperature: float = 0.0, seed: int = 0, max_thought_tokens: int = MAX_THOUGHT_TOKENS,
                 sampler: Sampler | None = None, spec: dict | None = None) -> None:
        check_choices(action_mode, shots)
        if action_mode == "constrained" and not isinstance(backend, ConstrainedBackend):
            raise PolicyError(f"{type(backend).__name__} cannot write within candidates: play scored or free")
        self.backend, self.action_mode, self.shots, self.window = backend, action_mode, shots, window
        self.temperature, self.seed, self.max_thought_tokens = temperature, seed, max_thought_tokens
        self.sampler = sampler or softmax_sampler(seed)
        self.invalid_actions = self.free_actions = 0
        self._spec = spec if spec is not None else {
            "kind": self.name, **getattr(backend, "identity", dict)(), "action_mode": action_mode,
            "temperature": temperature, "seed": seed, "shots": shots, "window": window,
            "max_thought_tokens": max_thought_tokens}

    @property
    def stats(self) -> dict:
        """What the backend counted (tokens, passes, requests...)."""
        return self.backend.stats

    @property
    def invalid_rate(self) -> float:
        """Share of freely written commands that were not admissible (0 before any)."""
        return self.invalid_actions / self.free_actions if self.free_actions else 0.0

    def spec(self) -> dict:
        """The model and every setting that changes what it writes."""
        return dict(self._spec)

    def start(self, context: Context) -> None:
        """A new episode: nothing kept under its key from an earlier one."""
        self.backend.release(id(context))

    def end(self, context: Context) -> None:
        """The episode is over: the backend frees what it kept for it."""
        self.backend.release(id(context))

    def prompt(self, context: Context) -> Prompt:
        """The episode so far as the model reads it, ending with the `>` that asks for the next line."""
        prefix = context.prefix if self.shots else context.zero_shot_prefix
        messages = tuple(chat_messages(prefix, context.turns, self.window)) if self.backend.wants_messages else ()
        return Prompt(id(context), render(self.backend.frame(prefix), context.turns, self.window).text, messages)

    def decide(self, requests: Sequence[Request]) -> list[Decision | Exception]:
        """One decision per (context, admissible) request, by the rule of the module docstring."""
        prompts = [self.prompt(context) for context, _ in requests]
        turn = _Turn(requests, self.backend.prefill(prompts))
        thinkers: list[int] = []
        writers: list[tuple[int, bool]] = []  # rows the model writes a line for; True: the line decides think or act
        scored: dict[int, tuple[str, ...]] = {}
        walked: dict[int, tuple[str, ...]] = {}
        for row, (context, admissible) in enumerate(requests):
            may_think = Kind.THOUGHT in context.allowed
            if Kind.ACTION not in context.allowed:
                thinkers.append(row)
            elif self.action_mode == "free" and not (may_think and self.backend.can_score):
                writers.append((row, may_think))
            else:
                candidates = tuple(f" {c}\n" for c in admissible) + ((THINK_CANDIDATE,) if may_think else ())
                (walked if self.action_mode == "constrained" else scored)[row] = candidates
        if walked:
            asked = [ChooseRequest(prompts[r], c, self.temperature) for r, c in walked.items()]
            for row, choice in turn.results(walked, self.backend.choose(asked)):  # type: ignore[attr-defined]
                if choice.index < len(requests[row][1]):
                    turn.lines[row] = (requests[row][1][choice.index], "constrained")
                elif Kind.THOUGHT in requests[row][0].allowed:  # ` think:` (else nothing was admissible)
                    thinkers.append(row)
        if scored:
            asked = [ScoreRequest(prompts[r], c, self.temperature <= 0) for r, c in scored.items()]
            for row, result in turn.results(scored, self.backend.score(asked)):
                context, admissible = requests[row]
                scores = result.values
                if Kind.THOUGHT in context.allowed:
                    if not admissible or scores[-1] > max(scores[:-1]):
                        thinkers.append(row)
                        continue
                    scores = scores[:-1]
                if self.action_mode == "free":
                    writers.append((row, False))
                else:
                    turn.lines[row] = (admissible[self._pick(scores)] if admissible else "look", "scored")
        self._write(turn, prompts, thinkers, writers)
        return self._close(turn, prompts)

    # --- writing and reading lines -----------------------------------------------------------------

    def _write(self, turn: "_Turn", prompts: list[Prompt], thinkers: list[int],
               writers: list[tuple[int, bool]]) -> None:
        asked = {row: GenerateRequest(prompts[row], self.max_thought_tokens, THINK_CANDIDATE, self.temperature)
                 for row in thinkers}
        decides = dict(writers)
        asked |= {row: GenerateRequest(prompts[row], self.max_thought_tokens if decides[row] else MAX_ACTION_TOKENS,
                                       temperature=self.temperature) for row, _ in writers}
        if not asked:
            return
        for row, written in turn.results(asked, self.backend.generate(list(asked.values()))):
            text = written.text.strip()
            if row not in decides:
                turn.lines[row] = (thought_line(text) if text else EMPTY_THOUGHT, "think")
            elif decides[row] and is_thought(text):
                thought = thought_text(text)
                turn.lines[row] = (thought_line(thought) if thought else EMPTY_THOUGHT, "think")
            else:
                turn.lines[row] = (self._free_action(written.text, turn.requests[row][1]), "free")

    def _free_action(self, written: str, admissible: list[str]) -> str:
        text = normalise_action(written)
        if is_thought(text):  # an action is due: drop a `think:` label the model wrote anyway
            text = normalise_action(text.split(":", 1)[1])
        text = text or "look"
        self.free_actions += 1
        self.invalid_actions += text not in admissible
        return text

    def _pick(self, scores: list[float]) -> int:
        if self.temperature <= 0:
            return max(range(len(scores)), key=scores.__getitem__)
        return self.sampler(scores, self.temperature)

    def _close(self, turn: "_Turn", prompts: list[Prompt]) -> list[Decision | Exception]:
        """Each episode's decision (`look` where no line came), the backend told the line it goes on with."""
        out: list[Decision | Exception] = []
        for row, prompt in enumerate(prompts):
            if row in turn.errors:
                out.append(turn.errors[row])
                continue
            line, mode = turn.lines.get(row, ("look", "scored"))
            self.backend.commit(prompt.key, f" {line}\n")
            spent = [t for t in turn.tokens[row] if t is not None]
            out.append(Decision(line, mode, sum(spent) if spent else None))
        return out


class _Turn:
    """One `decide` call's state: the lines chosen so far (with how), the tokens each episode cost
    in every backend call, and the episodes whose request failed."""

    def __init__(self, requests: Sequence[Request], prefilled: list[int | None]) -> None:
        self.requests = requests
        self.lines: dict[int, tuple[str, str]] = {}
        self.tokens: list[list[int | None]] = [[t] for t in prefilled]
        self.errors: dict[int, Exception] = {}

    def results(self, asked: dict[int, Any], answers: list) -> list[tuple[int, Any]]:
        """The (row, answer) pairs of a backend call asked for `asked`'s rows, in order; a failed
        request ends its row's decision, and each answer's tokens are counted to its row."""
        good = []
        for row, answer in zip(asked, answers):
            if isinstance(answer, Exception):
                self.errors[row] = answer
            else:
                self.tokens[row].append(answer.tokens)
                good.append((row, answer))
        return good
