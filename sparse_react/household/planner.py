"""The game's planner for policies that plan (the experts), on its own copy of the episode: the
policy is handed one at construction and never sees the environment."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from sparse_react.household.catalog import GameRef
from sparse_react.household.engine import Engine


class Planner:
    """Commands that win a game from the state the given commands lead to.

    It replays an episode's commands in its own engine (only those new since its last call, while
    the episode is the same) and asks the engine's planner, which follows the stored solution
    while the commands match it.
    """

    def __init__(self) -> None:
        self._engine: Engine | None = None
        self._game: Path | None = None
        self._sent: list[str] = []

    def plan(self, game: GameRef, commands: Sequence[str]) -> list[str]:
        """The planner's shortest command sequence to a win after `commands` ([] when none)."""
        if self._engine is None:
            self._engine = Engine()
        if game.path != self._game or list(commands[:len(self._sent)]) != self._sent:
            if game.path != self._game:
                self._engine.load(game.path)
                self._game = game.path
            self._engine.reset()
            self._sent = []
        for command in commands[len(self._sent):]:
            self._engine.step(command)
            self._sent.append(command)
        return self._engine.plan()

    def __getstate__(self) -> dict:  # a policy sent to another process takes no engine with it
        return {"_engine": None, "_game": None, "_sent": []}
