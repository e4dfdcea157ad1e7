"""Test doubles shared by several test modules (policies only: the engine is always real)."""

from __future__ import annotations

import os


class DiesOn:
    """A test double for a crashing worker: plays like the expert, but its process exits with
    `code` (as a segfault would end it) when it starts the game named `game_name`."""

    name = "expert"

    def __init__(self, game_name: str, code: int = 3):
        from sparse_react.policies.expert import ExpertPolicy

        self.game_name, self.code, self.inner = game_name, code, ExpertPolicy()

    def start(self, env, context):
        if env.game.name == self.game_name:
            os._exit(self.code)
        self.inner.start(env, context)

    def next_line(self, context, admissible):
        return self.inner.next_line(context, admissible)
