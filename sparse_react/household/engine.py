"""The household game engine: textworld's PDDL environment with ALFWorld's object names.

One Engine holds one game at a time. It is not thread-safe (the planner library keeps global
state), so parallel play uses processes.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from sparse_react.household.disk_cache import DiskCache, disk_cache_enabled
from sparse_react.household.engine_cache import EngineCaches, bound_proposition_memo
from sparse_react.household.game_files import GameFileError, load_game_data

WELCOME_BANNER = "-= Welcome to TextWorld, ALFRED! =-"


@dataclass(frozen=True)
class GameState:
    """What the game shows after a reset or a command."""

    observation: str
    admissible: tuple[str, ...]
    won: bool


# The speed-ups replace textworld internals; they were checked game-for-game on these versions.
VERIFIED_ENGINE = {"textworld": "1.7.0", "fast-downward-textworld": "20.6.4"}

_CACHES: EngineCaches | None = None


def _caches() -> EngineCaches:
    global _CACHES
    if _CACHES is None:
        _CACHES = EngineCaches(disk=DiskCache() if disk_cache_enabled() else None)
    return _CACHES


@lru_cache(maxsize=1)
def speedups_verified() -> bool:
    """True when the installed engine packages are the versions the speed-ups were verified on.

    Otherwise warns once and the engine runs textworld's plain path. SPARSE_REACT_PLAIN_ENGINE=1
    asks for the plain path too.
    """
    if os.environ.get("SPARSE_REACT_PLAIN_ENGINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    found = {name: metadata.version(name) for name in VERIFIED_ENGINE}
    if found != VERIFIED_ENGINE:
        warnings.warn(
            f"sparse_react: engine speed-ups were verified on {VERIFIED_ENGINE}, found {found}; "
            "using textworld's plain (slower) path",
            stacklevel=2,
        )
        return False
    return True


def _fast_pddl_env_class() -> type:
    from textworld.envs.pddl import PddlEnv
    from textworld.envs.pddl.logic import PddlState

    class SharedLogicPddlEnv(PddlEnv):
        """PddlEnv whose load reuses the process's parsed logic and translations."""

        def load(self, data: dict[str, Any]) -> None:
            self._game_file = None
            self._game_data = data
            self.walkthrough = data.get("walkthrough")
            caches = _caches()
            self._logic = caches.logic.get(data["pddl_domain"], data["grammar"])
            with caches.active():
                self._pddl_state = PddlState(self.downward_lib, data["pddl_problem"], self._logic)
            self._entity_infos = self._get_entity_infos()

        def reset(self) -> Any:
            with _caches().active():
                return super().reset()

        def step(self, command: str) -> Any:
            with _caches().active():
                return super().step(command)

    return SharedLogicPddlEnv


class Engine:
    """Loads, resets and steps one household game with textworld's PDDL engine.

    The domain and grammar are parsed once per process, PDDL translations (also on disk, see
    disk_cache.py) and text-template parses are reused (engine_cache.py), so a new game loads
    about twice as fast as with a plain textworld PddlEnv, a repeated reset costs a fraction of
    a load, and a step is several times cheaper. `fast=False` runs textworld's plain path.
    """

    def __init__(self, fast: bool | None = None) -> None:
        import textworld
        from textworld.envs.pddl import PddlEnv

        self.fast = speedups_verified() if fast is None else fast
        bound_proposition_memo()  # textworld would keep every game's propositions for the life of the process
        env_class = _fast_pddl_env_class() if self.fast else PddlEnv
        self._env = env_class(textworld.EnvInfos(admissible_commands=True, won=True))
        self.game_file: Path | None = None
        self.walkthrough: list[str] = []
        self._history: list[str] = []
        self._plan: list[str] | None = None
        self._plan_start = 0
        self._admissible: tuple[str, ...] = ()

    def load(self, path: str | Path, data: dict[str, Any] | None = None) -> None:
        """Load a game file (or its already-read `data`); names objects as ALFWorld does."""
        from alfworld.agents.utils.misc import Demangler

        path = Path(path)
        data = data if data is not None else load_game_data(path)
        try:
            self._env.load(data)
        except Exception as exc:  # textworld raises many kinds on a malformed problem
            raise GameFileError(f"{path} could not be loaded as a game: {type(exc).__name__}: {exc}") from exc
        infos = self._env._entity_infos
        demangler = Demangler(game_infos=infos)
        for info in infos.values():
            info.name = demangler.demangle_alfred_name(info.id)
        self.game_file = path
        self.walkthrough = list(data.get("walkthrough") or [])

    def reset(self) -> GameState:
        """Start the loaded game from its initial state."""
        if self.game_file is None:
            raise RuntimeError("no game loaded")
        self._history = []
        self._plan, self._plan_start = (list(self.walkthrough) or None), 0
        return self._state(self._env.reset())

    def step(self, command: str) -> GameState:
        """Send one command; a command that is not admissible returns 'Nothing happens.'."""
        state, _, _ = self._env.step(command)
        self._history.append(command.strip())
        return self._state(state)

    def facts(self) -> frozenset[tuple[str, tuple[str, ...]]]:
        """What holds in the game now, as (predicate, argument names): `("holds", ("agent1", "apple_bar_1"))`."""
        return frozenset((f.name, tuple(a.name for a in f.arguments)) for f in self._env._pddl_state.facts)

    def plan(self) -> list[str]:
        """Commands that win from the current state ([] when won or when none exists).

        Follows the game's stored solution, or the last plan, while the commands sent match it;
        asks the planner again only after a deviation, since planning can take seconds.
        """
        sent = self._history[self._plan_start:]
        if self._plan is not None and sent == self._plan[: len(sent)]:
            rest = self._plan[len(sent):]
            if rest and rest[0] in self._admissible:
                return list(rest)
        self._plan = list(self._env._pddl_state.replan(self._env._entity_infos))
        self._plan_start = len(self._history)
        return list(self._plan)

    def _state(self, state: Any) -> GameState:
        self._admissible = tuple(state["admissible_commands"])
        return GameState(state.feedback, self._admissible, bool(state["won"]))
