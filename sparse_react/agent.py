"""The ReAct agent loop: a policy writes one line per turn, a thought or an action, until the game
is won, the budget is spent, the agent loops, or something breaks."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import metadata
from typing import Callable, Generator, Protocol, Sequence

from sparse_react.env import HouseholdEnv, ThinkWrapper, is_thought
from sparse_react.games.catalog import GameRef
from sparse_react.prompts import THINK, variant_examples
from sparse_react.rhythms import Rhythm, get_rhythm
from sparse_react.tasks import TaskType
from sparse_react.trajectory import Entry, Episode, Failure, Kind, classify_failure

ZERO_SHOT_INSTRUCTION = {
    True: "You act in a household to finish a task. Each turn, write one line: a command the game "
          "accepts, or a thought that starts with 'think:'.",
    False: "You act in a household to finish a task. Each turn, write one command the game accepts.",
}
INSTRUCTION = {thinks: text + " Two solved examples come first." for thinks, text in ZERO_SHOT_INSTRUCTION.items()}


@dataclass
class Context:
    """What the policy sees: the few-shot prefix and every line of this episode so far.

    The text only grows (`text()` of one turn is a prefix of the next), which is what lets a
    model keep its KV cache across turns.
    """

    rhythm: Rhythm
    task_type: TaskType
    task: str
    prefix: str
    turns: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def start(cls, rhythm: Rhythm, task_type: TaskType, task: str, observation: str, variant: int = 0) -> "Context":
        parts = [INSTRUCTION[rhythm.thinks]]
        for example in variant_examples(task_type, variant):
            parts.append("\n".join([example.observation, *(f"> {l}\n{r}" for l, r in example.lines(rhythm))]))
        parts.append("Your turn.\n" + observation)
        return cls(rhythm, task_type, task, "\n\n".join(parts) + "\n")

    def append(self, line: str, observation: str) -> None:
        self.turns.append((line, observation))

    @property
    def last_observation(self) -> str:
        return self.turns[-1][1] if self.turns else self.first_observation

    @property
    def previous_kind(self) -> Kind | None:
        return (Kind.THOUGHT if is_thought(self.turns[-1][0]) else Kind.ACTION) if self.turns else None

    @property
    def allowed(self) -> frozenset[Kind]:
        return self.rhythm.allowed(self.previous_kind)

    @property
    def first_observation(self) -> str:
        return self.prefix.rstrip().rpartition("Your turn.\n")[2]

    @property
    def zero_shot_prefix(self) -> str:
        """The prefix without examples: what a model fine-tuned on this project's episodes sees."""
        return ZERO_SHOT_INSTRUCTION[self.rhythm.thinks] + "\n\n" + self.first_observation + "\n"

    def body(self, window: int = 0) -> str:
        """The turns after the prefix, ending with `> `; with `window > 0`, only the last `window` turns."""
        turns = self.turns[-window:] if window > 0 else self.turns
        return "".join(f"> {line}\n{obs}\n" for line, obs in turns) + "> "

    def text(self) -> str:
        return self.prefix + self.body()


class Policy(Protocol):
    """Writes the next line of an episode: `think: ...` or a command.

    Optional attributes the loop records with each entry: `last_mode` (how the line was chosen)
    and `last_tokens` (tokens the policy encoded or generated for it).
    """

    name: str

    def start(self, env: HouseholdEnv, context: Context) -> None:
        """Called once per episode, after the reset."""

    def next_line(self, context: Context, admissible: Sequence[str]) -> str:
        """The next line, given the context so far and the commands the game accepts now."""


class BatchPolicy(Policy, Protocol):
    """A policy that decides for several live episodes at once (one forward pass for all), and is
    told when an episode ends so it can free what it kept for it."""

    def next_lines(self, requests: Sequence["Request"]) -> list["Decision"]:
        """One decision per request, in order."""

    def end(self, context: Context) -> None:
        """The episode of `context` is over."""


@dataclass(frozen=True)
class LoopRules:
    """How an episode may end besides a win. `loop_repeats=0` turns loop detection off."""

    max_steps: int = 50
    thoughts_count: bool = True
    loop_repeats: int = 3


@lru_cache(maxsize=1)
def _versions() -> tuple[tuple[str, str], ...]:
    return tuple((p, metadata.version(p)) for p in ("sparse_react", "alfworld", "textworld"))


def versions() -> dict[str, str]:
    """The package versions every episode record carries (read once per process)."""
    return dict(_versions())


@dataclass(frozen=True)
class Decision:
    """One line a policy chose, with how (`mode`) and the tokens it cost, as recorded in the entry."""

    line: str
    mode: str | None = None
    tokens: int | None = None


Request = tuple[Context, list[str]]  # what a policy is asked: the context and the admissible commands


def decide(policy: Policy, context: Context, admissible: Sequence[str]) -> Decision:
    """Ask a one-episode-at-a-time policy for its next line."""
    line = policy.next_line(context, admissible)
    return Decision(line, getattr(policy, "last_mode", policy.name), getattr(policy, "last_tokens", None))


def run_episode(env: HouseholdEnv, policy: Policy, game: GameRef, rhythm: str | Rhythm = "sparse",
                variant: int = 0, rules: LoopRules = LoopRules(),
                on_entry: Callable[[Entry], None] | None = None) -> Episode:
    """Play one episode of `game` with `policy` in `rhythm` and return its record.

    `on_entry` sees each entry as it happens (the CLI prints the trajectory with it).
    """
    turns = episode_turns(env, policy, game, rhythm, variant, rules, on_entry)
    try:
        request = next(turns)
        while True:
            try:
                decision = decide(policy, *request)
            except Exception as exc:  # recorded by the episode as its error
                request = turns.throw(exc)
            else:
                request = turns.send(decision)
    except StopIteration as stop:
        return stop.value


def episode_turns(env: HouseholdEnv, policy: Policy, game: GameRef, rhythm: str | Rhythm = "sparse",
                  variant: int = 0, rules: LoopRules = LoopRules(),
                  on_entry: Callable[[Entry], None] | None = None) -> Generator[Request, Decision, Episode]:
    """One episode as a generator: it yields each request for a line and is sent the Decision; it
    returns the Episode. `run_episode` drives it with one policy; a batch driver drives many at once."""
    rhythm = get_rhythm(rhythm) if isinstance(rhythm, str) else rhythm
    env.max_steps = rules.max_steps
    react = ThinkWrapper(env, thoughts_count=rules.thoughts_count)
    started = time.perf_counter()
    episode = Episode(str(game.path), game.task_type.value, "", rhythm.name, policy.name, "", variant,
                      settings={**asdict(rules), "game_name": game.name}, versions=versions())
    ended_by: Failure | str | None = None
    context = None
    try:  # a game that fails to load, a policy, rhythm or engine failure ends this episode, not the run
        observation, info = react.reset(options={"game": game})
        episode.task, episode.initial_observation = info["task"], observation
        context = Context.start(rhythm, game.task_type, info["task"], observation, variant)
        policy.start(env, context)
        while ended_by is None:
            t0 = time.perf_counter()
            decision = yield context, list(info["admissible_commands"])
            line = decision.line.strip()
            kind = Kind.THOUGHT if is_thought(line) else Kind.ACTION
            rhythm.check(kind, context.previous_kind)
            observation, _, _, truncated, info = react.step(line)
            text = line[len(THINK.strip()):].strip() if kind is Kind.THOUGHT else line
            episode.entries.append(Entry(len(episode.entries) + 1, kind, text, observation, time.perf_counter() - t0,
                                         tokens=decision.tokens, mode=decision.mode))
            context.append(line, observation)
            if on_entry:
                on_entry(episode.entries[-1])
            ended_by = "won" if info["won"] else Failure.BUDGET if truncated else None
            if ended_by is None and _looping(episode, rules.loop_repeats):
                ended_by = Failure.LOOP
    except Exception as exc:
        ended_by, episode.error = Failure.ERROR, f"{type(exc).__name__}: {exc}"
    finally:
        if context is not None and hasattr(policy, "end"):
            policy.end(context)
    episode.won = ended_by == "won"
    episode.failure = None if episode.won else classify_failure(episode, ended_by)
    episode.wall_time = time.perf_counter() - started
    return episode


def _looping(episode: Episode, repeats: int) -> bool:
    tail = episode.entries[-repeats:] if repeats else []
    return len(tail) == repeats and all(e.kind is Kind.ACTION for e in tail) and \
        len({(e.text, e.observation) for e in tail}) == 1

