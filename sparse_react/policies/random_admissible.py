"""The random-admissible baseline."""

from __future__ import annotations

import random
from typing import Sequence

from sparse_react.env import HouseholdEnv
from sparse_react.trajectory import Kind

UNINFORMATIVE = ("help", "look", "inventory")
FILLER_THOUGHT = "think: I will try one of the commands."


class RandomPolicy:
    """Picks uniformly among admissible commands (skipping help/look/inventory when it can).

    It never reasons; where a rhythm demands a thought it writes a fixed filler one.
    """

    name = "random"
    last_mode = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._rng = random.Random(seed)

    def start(self, env: HouseholdEnv, context) -> None:
        game = env.game.name if env.game else ""
        self._rng = random.Random(f"{self.seed}:{game}")

    def next_line(self, context, admissible: Sequence[str]) -> str:
        if Kind.ACTION not in context.allowed:
            return FILLER_THOUGHT
        useful = [c for c in admissible if c not in UNINFORMATIVE] or list(admissible)
        return self._rng.choice(useful)
