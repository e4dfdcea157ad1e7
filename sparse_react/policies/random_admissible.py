"""The random-admissible baseline."""

from __future__ import annotations

import random
from typing import Sequence

from sparse_react.agent import Context
from sparse_react.lines import Kind, thought_line
from sparse_react.policies.base import LinePolicy

UNINFORMATIVE = ("help", "look", "inventory")
FILLER_THOUGHT = thought_line("I will try one of the commands.")


class RandomPolicy(LinePolicy):
    """Picks uniformly among admissible commands (skipping help/look/inventory when it can), with
    a generator seeded by the seed and the game, so an episode does not depend on what ran before.

    It never reasons; where a rhythm demands a thought it writes a fixed filler one.
    """

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.seed = seed

    def spec(self) -> dict:
        return {"kind": self.name, "seed": self.seed}

    def begin(self, context: Context) -> None:
        self._rng = random.Random(f"{self.seed}:{context.game.name if context.game else ''}")

    def next_line(self, context: Context, admissible: Sequence[str]) -> str:
        if Kind.ACTION not in context.allowed:
            return FILLER_THOUGHT
        useful = [c for c in admissible if c not in UNINFORMATIVE] or list(admissible)
        return self._rng.choice(useful)
