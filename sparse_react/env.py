"""HouseholdEnv: household text games as a Gymnasium environment, and the ReAct think wrapper.

>>> import gymnasium as gym, sparse_react
>>> env = gym.make("sparse_react/HouseholdReAct-v0", games="valid_unseen")
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
from pathlib import Path
from typing import Any, Iterable, Sequence

import gymnasium as gym
from gymnasium import spaces

from sparse_react.engine import WELCOME_BANNER, Engine, GameState
from sparse_react.games.catalog import GameRef, find_games, game_ref
from sparse_react.lines import THOUGHT_REPLY, is_thought
from sparse_react.tasks import TaskType

DEFAULT_MAX_STEPS = 50
TEXT_CHARSET = string.printable
TASK_MARKER = "Your task is to: "


class HouseholdEnv(gym.Env[str, str]):
    """One ALFWorld-style household game at a time, from a game file or a game set.

    Observations and actions are text. `reset(seed=...)` orders the set with the seed and then
    hands out each game once per pass (never sampling with replacement); `options={"game": path}`
    plays a given game. `step` returns reward 1.0 and `terminated` on a win, `truncated` when
    `max_steps` commands have been spent. `info` carries `admissible_commands`, `task`,
    `task_type`, `game_file`, `won` (and `banner` after a reset).
    """

    metadata = {"render_modes": ["ansi", "human"]}

    def __init__(
        self,
        games: str | Path | Sequence[GameRef] = "valid_unseen",
        max_steps: int = DEFAULT_MAX_STEPS,
        task_types: Iterable[TaskType | str] | None = None,
        render_mode: str | None = None,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode {render_mode!r} is not one of {self.metadata['render_modes']}")
        self.games: list[GameRef] = list(games) if isinstance(games, (list, tuple)) else find_games(games, task_types)
        self.max_steps = max_steps
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=20_000, min_length=0, charset=TEXT_CHARSET)
        self.action_space = spaces.Text(max_length=500, min_length=0, charset=TEXT_CHARSET)
        self._engine = Engine()
        self._loaded: Path | None = None
        self._order: list[int] = []
        self._cursor = 0
        self._game: GameRef | None = None
        self._task = ""
        self._steps = 0
        self._done = True
        self._last = ""

    # -- Gymnasium API ---------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        if seed is not None or not self._order:
            self._order = [int(i) for i in self.np_random.permutation(len(self.games))]
            self._cursor = 0
        game = (options or {}).get("game")
        if game is not None:
            self._game = self._pick(game)
        else:
            if self._cursor == len(self._order):  # a full pass is done: start the next one
                self._order = [int(i) for i in self.np_random.permutation(len(self.games))]
                self._cursor = 0
            self._game = self.games[self._order[self._cursor]]
            self._cursor += 1
        if self._loaded != self._game.path:
            self._engine.load(self._game.path)
            self._loaded = self._game.path
        state = self._engine.reset()
        observation = state.observation.strip()
        if observation.startswith(WELCOME_BANNER):
            observation = observation[len(WELCOME_BANNER):].strip()
        self._task = observation.rpartition(TASK_MARKER)[2].strip()
        self._steps = 0
        self._done = state.won
        self._last = observation
        info = self._info(state)
        info["banner"] = WELCOME_BANNER
        return observation, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if self._done:
            raise RuntimeError("the episode is over: call reset() before step()")
        state = self._engine.step(action)
        self._steps += 1
        terminated = state.won
        truncated = not terminated and self._steps >= self.max_steps
        self._done = terminated or truncated
        self._last = state.observation
        return state.observation, 1.0 if terminated else 0.0, terminated, truncated, self._info(state)

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

    @property
    def steps_used(self) -> int:
        """Steps spent in this episode (thoughts included when the think wrapper counts them)."""
        return self._steps

    def spend_step(self) -> bool:
        """Count one step that did not reach the game (a thought); return True if the budget is gone."""
        self._steps += 1
        self._done = self._steps >= self.max_steps
        return self._done

    def expert_plan(self) -> list[str]:
        """The planner's shortest command sequence from the current state to a win."""
        return self._engine.plan()

    def _pick(self, game: str | Path | int | GameRef) -> GameRef:
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
            "steps": self._steps,
        }


class ThinkWrapper(gym.Wrapper[str, str, str, str]):
    """The ReAct action space A ∪ L: a `think:` line is answered `OK.` and never reaches the game.

    With `thoughts_count=True` (the default, as in the paper's own implementation) a thought
    spends one step of the budget, so the episode can be truncated by thinking.
    """

    def __init__(self, env: gym.Env, thoughts_count: bool = True) -> None:
        super().__init__(env)
        self.thoughts_count = thoughts_count
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
        truncated = self.env.unwrapped.spend_step() if self.thoughts_count else False
        info = dict(self._info, thought=True, steps=self.env.unwrapped.steps_used)
        return THOUGHT_REPLY, 0.0, False, truncated, info


def make_react_env(thoughts_count: bool = True, **kwargs: Any) -> gym.Env:
    """A HouseholdEnv wrapped with ThinkWrapper (entry point of `sparse_react/HouseholdReAct-v0`)."""
    return ThinkWrapper(HouseholdEnv(**kwargs), thoughts_count=thoughts_count)


ENV_ID = "sparse_react/Household-v0"
REACT_ENV_ID = "sparse_react/HouseholdReAct-v0"


def register_envs() -> None:
    """Register both environment ids with Gymnasium (idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point="sparse_react.env:HouseholdEnv")
    if REACT_ENV_ID not in gym.registry:
        gym.register(REACT_ENV_ID, entry_point="sparse_react.env:make_react_env")
