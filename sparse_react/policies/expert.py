"""The expert: replans with the PDDL planner from the current state on every turn."""

from __future__ import annotations

from typing import Sequence

from sparse_react.env import HouseholdEnv


class ExpertError(RuntimeError):
    """The planner found no way to win from the current state."""


class ExpertPolicy:
    """Sends the first command of an optimal plan from wherever the game now is.

    Because it replans every turn it recovers from any reachable state, so control can be
    handed to it mid-episode.
    """

    name = "expert"

    def __init__(self) -> None:
        self._env: HouseholdEnv | None = None

    def reset(self, env: HouseholdEnv) -> None:
        self._env = env

    def next_line(self, observation: str, admissible: Sequence[str]) -> str:
        if self._env is None:
            raise RuntimeError("ExpertPolicy.reset(env) must be called before next_line")
        plan = self._env.expert_plan()
        game = self._env.game.path if self._env.game else "?"
        if not plan:
            raise ExpertError(f"the planner finds no way to win {game} from here")
        if plan[0] not in admissible:
            raise ExpertError(f"the planner's command {plan[0]!r} is not admissible in {game}")
        return plan[0]
