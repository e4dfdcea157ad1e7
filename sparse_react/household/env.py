"""HouseholdEnv: household text games as a Gymnasium environment; the ReAct think wrapper; and
StepBudget, the one owner of the step budget.

>>> import gymnasium as gym, sparse_react
>>> env = gym.make("sparse_react/HouseholdReAct-v0", games="valid_unseen", max_steps=50)
>>> obs, info = env.reset(seed=0)
>>> obs.startswith("You are in the middle of a room")
True
>>> env.step("think: where would the target be?")[0]
'OK.'
>>> obs, reward, terminated, truncated, info = env.step(info["admissible_commands"][0])
>>> reward, info["won"], info["steps"]
(0.0, False, 2)
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import gymnasium as gym
from gymnasium import spaces

from sparse_react.errors import UserError
from sparse_react.household.catalog import GameRef, find_games, game_ref
from sparse_react.household.engine import WELCOME_BANNER, Engine, GameState
from sparse_react.household.tasks import TaskType
from sparse_react.lines import THOUGHT_REPLY, is_thought

DEFAULT_MAX_STEPS = 50
TEXT_CHARSET = string.printable
TASK_MARKER = "Your task is to: "


class HouseholdEnv(gym.Env[str, str]):
    """One ALFWorld-style household game at a time, from a game file or a game set.

    Observations and actions are text. `reset(seed=...)` orders the set with the seed and then
    hands out each game once per pass (never sampling with replacement); `options={"game": path}`
    plays a given game. `step` returns reward 1.0 and `terminated` on a win. The env keeps no step
    budget: `StepBudget` does (`gym.make` adds it, and so does the agent loop). `info` carries
    `admissible_commands`, `task`, `task_type`, `game_file`, `won` (and `banner` after a reset).
    """

    metadata = {"render_modes": ["ansi", "human"]}

    def __init__(
        self,
        games: str | Path | Sequence[GameRef] = "valid_unseen",
        task_types: Iterable[TaskType | str] | None = None,
        render_mode: str | None = None,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode {render_mode!r} is not one of {self.metadata['render_modes']}")
        self.games: list[GameRef] = list(games) if isinstance(games, (list, tuple)) else find_games(games, task_types)
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=20_000, min_length=0, charset=TEXT_CHARSET)
        self.action_space = spaces.Text(max_length=500, min_length=0, charset=TEXT_CHARSET)
        self._engine = Engine()
        self._loaded: Path | None = None
        self._order: list[int] = []
        self._cursor = 0
        self._game: GameRef | None = None
        self._task = ""
        self._done = True
        self._last = ""

    # -- Gymnasium API ---------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        if seed is not None or not self._order:
            self._order = [int(i) for i in self.np_random.permutation(len(self.games))]
            self._cursor = 0
        game = (options or {}).get("game")
        self._game = self.pick(game) if game is not None else self.next_game()
        if self._loaded != self._game.path:
            self._engine.load(self._game.path)
            self._loaded = self._game.path
        state = self._engine.reset()
        observation = state.observation.strip()
        if observation.startswith(WELCOME_BANNER):
            observation = observation[len(WELCOME_BANNER):].strip()
        self._task = observation.rpartition(TASK_MARKER)[2].strip()
        self._done = state.won
        self._last = observation
        info = self._info(state)
        info["banner"] = WELCOME_BANNER
        return observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            raise RuntimeError("the episode is over: call reset() before step()")
        state = self._engine.step(action)
        self._done = state.won
        self._last = state.observation
        return state.observation, 1.0 if state.won else 0.0, state.won, False, self._info(state)

    def render(self) -> str | None:
        if self.render_mode == "human":
            print(self._last)
            return None
        if self.render_mode == "ansi":
            return self._last
        return None

    # -- beyond Gymnasium -------------------------------------------------------------------
    @property
    def game(self) -> GameRef | None:
        """The game of the current episode."""
        return self._game

    def next_game(self) -> GameRef:
        """Take the next game of the set in this pass's seeded order (what a plain `reset()` plays)."""
        if not self._order:
            self._order = [int(i) for i in self.np_random.permutation(len(self.games))]
        if self._cursor == len(self._order):  # a full pass is done: start the next one
            self._order = [int(i) for i in self.np_random.permutation(len(self.games))]
            self._cursor = 0
        self._cursor += 1
        return self.games[self._order[self._cursor - 1]]

    def expert_plan(self) -> list[str]:
        """The planner's shortest command sequence from the current state to a win."""
        return self._engine.plan()

    def pick(self, game: str | Path | int | GameRef) -> GameRef:
        """The game named by a GameRef, an index into the set, a path or a game name."""
        if isinstance(game, GameRef):
            return game
        if isinstance(game, int):
            return self.games[game]
        path = Path(game)
        for ref in self.games:
            if ref.path == path or ref.name == str(game):
                return ref
        return game_ref(path)

    def _info(self, state: GameState) -> dict[str, Any]:
        assert self._game is not None
        return {
            "admissible_commands": list(state.admissible),
            "task": self._task,
            "task_type": self._game.task_type.value,
            "game_file": str(self._game.path),
            "won": state.won,
        }


class ThinkWrapper(gym.Wrapper[str, str, str, str]):
    """The ReAct action space A ∪ L: a `think:` line is answered `OK.` (with `info["thought"]`) and
    never reaches the game. `rhythm` names the agent's thought rhythm for a loop that is not told one."""

    def __init__(self, env: gym.Env, rhythm: str | None = None) -> None:
        super().__init__(env)
        self.rhythm = rhythm
        self._info: dict[str, Any] = {}

    def reset(self, **kwargs: Any) -> tuple[str, dict]:
        observation, info = self.env.reset(**kwargs)
        self._info = info
        return observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if not is_thought(action):
            observation, reward, terminated, truncated, info = self.env.step(action)
            self._info = info
            return observation, reward, terminated, truncated, info
        return THOUGHT_REPLY, 0.0, False, False, dict(self._info, thought=True)


class BudgetError(UserError, ValueError):
    """A step budget no episode can have."""


@dataclass(frozen=True)
class Budget:
    """A step budget: `max_steps` lines, or with `thoughts_count=False` `max_steps` actions, thoughts
    free (the episode still ends at `2 * max_steps` lines, a thought before every action, so that
    no agent thinks forever). The paper's own implementation counted thoughts."""

    max_steps: int = DEFAULT_MAX_STEPS
    thoughts_count: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int):
            raise TypeError(f"max_steps must be an int, not {type(self.max_steps).__name__}")
        if self.max_steps < 1:
            raise BudgetError(f"max_steps must be at least 1, got {self.max_steps}")

    @property
    def max_lines(self) -> int:
        return self.max_steps if self.thoughts_count else 2 * self.max_steps


class StepBudget(gym.Wrapper[str, str, str, str]):
    """The one owner of the step budget: truncates the episode when the `Budget` is spent, counting
    a thought (a step whose `info["thought"]` is set by ThinkWrapper below it) only when thoughts
    count. `info["steps"]` is the steps spent. `gym.make` adds it to both registered ids, and the
    agent loop plays every env through one."""

    def __init__(self, env: gym.Env, max_steps: int = DEFAULT_MAX_STEPS, thoughts_count: bool = True) -> None:
        super().__init__(env)
        self.budget = Budget(max_steps, thoughts_count)
        self.steps = self.lines = 0
        self._over = True

    def reset(self, **kwargs: Any) -> tuple[str, dict]:
        observation, info = self.env.reset(**kwargs)
        self.steps = self.lines = 0
        self._over = False
        return observation, dict(info, steps=0)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._over:
            raise RuntimeError("the episode is over: call reset() before step()")
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.lines += 1
        if self.budget.thoughts_count or not info.get("thought"):
            self.steps += 1
        truncated = truncated or (not terminated and (self.steps >= self.budget.max_steps
                                                       or self.lines >= self.budget.max_lines))
        self._over = terminated or truncated
        return observation, reward, terminated, truncated, dict(info, steps=self.steps)


def find_wrapper(env: gym.Env, kind: type) -> Any:
    """The first wrapper of `kind` in `env`'s chain, or None."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, kind):
            return env
        env = env.env
    return None


def make_household_env(max_steps: int = DEFAULT_MAX_STEPS, **kwargs: Any) -> gym.Env:
    """A HouseholdEnv under its StepBudget (entry point of `sparse_react/Household-v0`)."""
    return StepBudget(HouseholdEnv(**kwargs), max_steps)


def make_react_env(max_steps: int = DEFAULT_MAX_STEPS, thoughts_count: bool = True, rhythm: str | None = None,
                   **kwargs: Any) -> gym.Env:
    """A HouseholdEnv with the think wrapper under its StepBudget (entry point of
    `sparse_react/HouseholdReAct-v0`)."""
    return StepBudget(ThinkWrapper(HouseholdEnv(**kwargs), rhythm), max_steps, thoughts_count)


ENV_ID = "sparse_react/Household-v0"
REACT_ENV_ID = "sparse_react/HouseholdReAct-v0"


def register_envs() -> None:
    """Register both environment ids with Gymnasium (idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point="sparse_react.household.env:make_household_env")
    if REACT_ENV_ID not in gym.registry:
        gym.register(REACT_ENV_ID, entry_point="sparse_react.household.env:make_react_env")
