"""The random-admissible baseline."""

from __future__ import annotations

import random
from typing import Sequence

from sparse_react.env import HouseholdEnv

UNINFORMATIVE = ("help", "look", "inventory")


class RandomPolicy:
    """Picks uniformly among admissible commands (skipping help/look/inventory when it can)."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._rng = random.Random(seed)

    def reset(self, env: HouseholdEnv) -> None:
        game = env.game.name if env.game else ""
        self._rng = random.Random(f"{self.seed}:{game}")

    def next_line(self, observation: str, admissible: Sequence[str]) -> str:
        useful = [c for c in admissible if c not in UNINFORMATIVE] or list(admissible)
        return self._rng.choice(useful)
