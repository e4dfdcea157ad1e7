"""Test doubles shared by several test modules (policies only: the engine is always real)."""

from __future__ import annotations

import os

from sparse_react.policies.expert import ExpertPolicy


class DiesOn(ExpertPolicy):
    """A test double for a crashing worker: plays like the expert, but its process exits with
    `code` (as a segfault would end it) when it starts the game named `game_name`."""

    def __init__(self, game_name: str, code: int = 3):
        super().__init__()
        self.game_name, self.code = game_name, code

    def begin(self, context):
        if context.game.name == self.game_name:
            os._exit(self.code)
        super().begin(context)
