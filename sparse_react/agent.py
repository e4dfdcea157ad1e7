"""The ReAct agent loop: a policy writes one line per turn, a thought or an action, until the game
is won, the budget is spent, the agent loops, or something breaks."""

from __future__ import annotations

import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Generator, Protocol, Sequence

from sparse_react.errors import UserError
from sparse_react.household.catalog import GameRef
from sparse_react.household.env import Budget, HouseholdEnv, StepBudget, ThinkWrapper, find_wrapper
from sparse_react.household.tasks import TaskType
from sparse_react.lines import Kind, kind_of, thought_text
from sparse_react.prompts import check_variant, variant_examples
from sparse_react.rhythms import DEFAULT_RHYTHM, Rhythm, get_rhythm
from sparse_react.trajectory import Entry, Episode, Failure, classify_failure
from sparse_react.transcript import render

ZERO_SHOT_INSTRUCTION = {
    True: "You act in a household to finish a task. Each turn, write one line: a command the game "
          "accepts, or a thought that starts with 'think:'.",
    False: "You act in a household to finish a task. Each turn, write one command the game accepts.",
}
INSTRUCTION = {thinks: text + " Two solved examples come first." for thinks, text in ZERO_SHOT_INSTRUCTION.items()}


@dataclass
class Context:
    """What a policy knows of an episode: its game and task, the rhythm, the few-shot prefix, and
    every line so far with the game's answer. (The environment stays with the loop.)"""

    rhythm: Rhythm
    task_type: TaskType
    task: str
    prefix: str
    turns: list[tuple[str, str]] = field(default_factory=list)
    game: GameRef | None = None

    @classmethod
    def start(cls, rhythm: Rhythm, task_type: TaskType, task: str, observation: str, variant: int = 0,
              game: GameRef | None = None) -> "Context":
        parts = [INSTRUCTION[rhythm.thinks]]
        for example in variant_examples(task_type, variant):
            parts.append("\n".join([example.observation, *(f"> {l}\n{r}" for l, r in example.lines(rhythm))]))
        parts.append("Your turn.\n" + observation)
        return cls(rhythm, task_type, task, "\n\n".join(parts) + "\n", game=game)

    def append(self, line: str, observation: str) -> None:
        self.turns.append((line, observation))

    @property
    def last_observation(self) -> str:
        return self.turns[-1][1] if self.turns else self.first_observation

    @property
    def previous_kind(self) -> Kind | None:
        return kind_of(self.turns[-1][0]) if self.turns else None

    @property
    def allowed(self) -> frozenset[Kind]:
        return self.rhythm.allowed(self.previous_kind)

    @property
    def actions(self) -> list[str]:
        """The commands sent to the game so far, in order."""
        return [line for line, _ in self.turns if kind_of(line) is Kind.ACTION]

    @property
    def first_observation(self) -> str:
        return self.prefix.rstrip().rpartition("Your turn.\n")[2]

    @property
    def zero_shot_prefix(self) -> str:
        """The prefix without examples: what a model fine-tuned on this project's episodes sees."""
        return ZERO_SHOT_INSTRUCTION[self.rhythm.thinks] + "\n\n" + self.first_observation + "\n"

    def text(self) -> str:
        """The episode so far as plain text, ending with the prompt for the next line."""
        return render(self.prefix, self.turns).text


@dataclass(frozen=True)
class Decision:
    """One line a policy chose, with how (`mode`) and the tokens it cost, as recorded in the entry."""

    line: str
    mode: str | None = None
    tokens: int | None = None


Request = tuple[Context, list[str]]  # what a policy is asked: an episode's context and the admissible commands


class PolicyError(UserError, ValueError):
    """A policy that cannot play as asked: an unknown name, an unusable policy file, a model server
    that cannot do what was asked; the message names it."""


class PolicyUnavailable(UserError):
    """The policy can decide for no episode any more (its server stopped answering): the run stops,
    keeping every finished episode, rather than recording the rest as errors."""


class Policy(Protocol):
    """Writes the next line of live episodes: `think: ...` or a command.

    The loop calls `start` when an episode begins, `decide` every turn with the requests of one or
    more live episodes, and `end` when one is over. `batched` says whether deciding many requests in
    one call is faster than one by one (a model's batched forward pass); `spec()` is what the run
    records about the policy (kind, model and weights' hash, settings) to tell runs apart.
    """

    name: str
    batched: bool

    def start(self, context: Context) -> None:
        """A new episode, after the game's reset."""

    def decide(self, requests: Sequence[Request]) -> list[Decision | Exception]:
        """One decision per request, in order; an exception in the list ends that episode with it."""

    def end(self, context: Context) -> None:
        """The episode of `context` is over."""

    def spec(self) -> dict:
        """The policy's identity for run records (JSON-serialisable)."""


def decide_all(policy: Policy, requests: Sequence[Request]) -> list[Decision | Exception]:
    """The policy's decisions for `requests`; if one call for several fails as a whole, each request
    is asked alone, so one bad episode spoils no other."""
    try:
        return list(policy.decide(requests))
    except PolicyUnavailable:
        raise
    except Exception as exc:
        if len(requests) == 1:
            return [exc]
        warnings.warn(f"a batched decision failed ({type(exc).__name__}: {exc}); deciding one episode at a time")
    return [decide_all(policy, [request])[0] for request in requests]


@dataclass(frozen=True)
class LoopRules:
    """How an episode may end besides a win: its step budget (counted by `StepBudget` alone: see
    `sparse_react.household.env.Budget` for `thoughts_count`) and `loop_repeats`, the identical action-and-
    answer pairs in a row that end it as a loop (0: no loop check)."""

    max_steps: int = 50
    thoughts_count: bool = True
    loop_repeats: int = 3

    def __post_init__(self) -> None:
        Budget(self.max_steps, self.thoughts_count)  # raises for a budget no episode can have
        if isinstance(self.loop_repeats, bool) or not isinstance(self.loop_repeats, int) or self.loop_repeats < 0:
            raise TypeError(f"loop_repeats must be an int >= 0, not {self.loop_repeats!r}")

    @property
    def budget(self) -> Budget:
        return Budget(self.max_steps, self.thoughts_count)

    @classmethod
    def of_budget(cls, budget: Budget, loop_repeats: int = 3) -> "LoopRules":
        return cls(budget.max_steps, budget.thoughts_count, loop_repeats)


@lru_cache(maxsize=1)
def _versions() -> tuple[tuple[str, str], ...]:
    return tuple((p, metadata.version(p)) for p in ("sparse_react", "alfworld", "textworld", "torch", "transformers"))


def versions() -> dict[str, str]:
    """The package versions every episode record carries (read once per process)."""
    return dict(_versions())


def run_episode(env: Any, policy: Policy, game: GameRef | str | Path | None = None,
                rhythm: str | Rhythm | None = None, variant: int = 0, rules: LoopRules | None = None,
                on_entry: Callable[[Entry], None] | None = None) -> Episode:
    """Play one episode with `policy` and return its record.

    `env` is any household env: `HouseholdEnv`, `sparse_react.make_env(...)` or
    `gym.make("sparse_react/HouseholdReAct-v0", ...)`. `game` defaults to the env's next game,
    `rhythm` to the env's (`make_env(rhythm=...)`) or sparse, and the step budget to the env's own
    `StepBudget`, else `rules` (default 50 steps, thoughts count). `on_entry` sees each entry as it
    happens. Wrong arguments raise here (TypeError, UserError) before any game is played; what
    goes wrong inside the game or the policy ends the episode as an error, on record.
    """
    turns = episode_turns(env, policy, game, rhythm, variant, rules, on_entry)
    try:
        request = next(turns)
        while True:
            (decision,) = decide_all(policy, [request])
            request = turns.throw(decision) if isinstance(decision, Exception) else turns.send(decision)
    except StopIteration as stop:
        return stop.value


@dataclass(frozen=True)
class EpisodePlan:
    """An episode's checked arguments: the household env under the loop's own wrappers, the game,
    rhythm, prompt variant and rules."""

    env: StepBudget
    game: GameRef
    rhythm: Rhythm
    variant: int
    rules: LoopRules


def check_rhythm(rhythm: Any) -> Rhythm:
    if isinstance(rhythm, Rhythm):
        return rhythm
    if not isinstance(rhythm, str):
        raise TypeError(f"rhythm must be a rhythm name or a Rhythm, not {type(rhythm).__name__}")
    return get_rhythm(rhythm)


def check_policy(policy: Any) -> Policy:
    missing = [name for name in ("decide", "start", "end", "spec") if not callable(getattr(policy, name, None))]
    if missing or not hasattr(policy, "name"):
        raise TypeError(f"{type(policy).__name__} is not a policy (no {', '.join(missing) or 'name'}): "
                        "use sparse_react.load_policy(...) or follow sparse_react.Policy")
    return policy


def plan_episode(env: Any, game: GameRef | str | Path | None = None, rhythm: str | Rhythm | None = None,
                 variant: int = 0, rules: LoopRules | None = None) -> EpisodePlan:
    """Check an episode's arguments and settle the defaults (see `run_episode`)."""
    base = getattr(env, "unwrapped", None)
    if not isinstance(base, HouseholdEnv):
        raise TypeError(f"env must be a household env (HouseholdEnv, make_env or gym.make of a sparse_react id), "
                        f"not {type(env).__name__}")
    if rules is not None and not isinstance(rules, LoopRules):
        raise TypeError(f"rules must be LoopRules, not {type(rules).__name__}")
    held = find_wrapper(env, StepBudget)
    if rules is None:
        rules = LoopRules.of_budget(held.budget) if held else LoopRules()
    elif held and held.budget != rules.budget:
        raise UserError(f"the env's step budget ({held.budget}) and the rules' ({rules.budget}) differ: "
                        "give the budget once, to the env or to the rules")
    if rhythm is None:
        think = find_wrapper(env, ThinkWrapper)
        rhythm = (think.rhythm if think else None) or DEFAULT_RHYTHM
    if game is None:
        game = base.next_game()
    elif not isinstance(game, GameRef):
        if not isinstance(game, (str, Path)):
            raise TypeError(f"game must be a GameRef or a game file, not {type(game).__name__}")
        game = base.pick(game)
    return EpisodePlan(StepBudget(ThinkWrapper(base), rules.max_steps, rules.thoughts_count), game,
                       check_rhythm(rhythm), check_variant(variant), rules)


def episode_turns(env: Any, policy: Policy, game: GameRef | str | Path | None = None,
                  rhythm: str | Rhythm | None = None, variant: int = 0, rules: LoopRules | None = None,
                  on_entry: Callable[[Entry], None] | None = None) -> Generator[Request, Decision, Episode]:
    """One episode as a generator: it yields each request for a line and is sent the Decision; it
    returns the Episode. `run_episode` drives one; the evaluator's batch driver drives many at once.
    The arguments are checked now, before the generator starts (see `run_episode`)."""
    return _turns(plan_episode(env, game, rhythm, variant, rules), check_policy(policy), on_entry)


def _turns(plan: EpisodePlan, policy: Policy,
           on_entry: Callable[[Entry], None] | None) -> Generator[Request, Decision, Episode]:
    react, game, rhythm, variant, rules = plan.env, plan.game, plan.rhythm, plan.variant, plan.rules
    started = time.perf_counter()
    episode = new_episode(game, rhythm.name, policy, variant, rules)
    ended_by: Failure | str | None = None
    context = None
    try:  # a game that fails to load, a policy, rhythm or engine failure ends this episode, not the run
        observation, info = react.reset(options={"game": game})
        episode.task, episode.initial_observation = info["task"], observation
        context = Context.start(rhythm, game.task_type, info["task"], observation, variant, game)
        policy.start(context)
        while ended_by is None:
            t0 = time.perf_counter()
            decision = yield context, list(info["admissible_commands"])
            line = decision.line.strip()
            kind = kind_of(line)
            rhythm.check(kind, context.previous_kind)
            observation, _, _, truncated, info = react.step(line)
            text = thought_text(line) if kind is Kind.THOUGHT else line
            episode.entries.append(Entry(len(episode.entries) + 1, kind, text, observation, time.perf_counter() - t0,
                                         tokens=decision.tokens, mode=decision.mode))
            context.append(line, observation)
            if on_entry:
                on_entry(episode.entries[-1])
            ended_by = "won" if info["won"] else Failure.BUDGET if truncated else None
            if ended_by is None and _looping(episode, rules.loop_repeats):
                ended_by = Failure.LOOP
    except Exception as exc:
        ended_by = Failure.ERROR
        episode.error, episode.traceback = f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc))
    finally:
        if context is not None:
            policy.end(context)
    episode.won = ended_by == "won"
    episode.failure = None if episode.won else classify_failure(episode, ended_by)
    episode.wall_time = time.perf_counter() - started
    return episode


def new_episode(game: GameRef, rhythm: str, policy: Policy, variant: int, rules: LoopRules) -> Episode:
    """The record an episode starts from (and the whole record of one that never got to start)."""
    return Episode(str(game.path), game.task_type.value, "", rhythm, policy.name, "", variant,
                   settings={**asdict(rules), "game_name": game.name}, versions=versions(), policy_spec=policy.spec())


def _looping(episode: Episode, repeats: int) -> bool:
    tail = episode.entries[-repeats:] if repeats else []
    return len(tail) == repeats and all(e.kind is Kind.ACTION for e in tail) and \
        len({(e.text, e.observation) for e in tail}) == 1
