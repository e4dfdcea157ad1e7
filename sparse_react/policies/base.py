"""The small adapter that makes a one-episode line writer a `Policy`: each episode plays on its own
copy of the writer, so any number of episodes can be live at once and a writer's state (a script's
position, a seeded generator, the expert's progress) belongs to one episode."""

from __future__ import annotations

import copy
from typing import Sequence

from sparse_react.agent import Context, Decision, PolicyError, Request

__all__ = ["LinePolicy", "PolicyError"]


class LinePolicy:
    """A policy that writes one line for one episode at a time. Subclasses set `name`, write
    `next_line`, and reset their per-episode state in `begin` (called on the episode's own copy)."""

    name = "line"
    batched = False

    def __init__(self) -> None:
        self._live: dict[int, LinePolicy] = {}

    def begin(self, context: Context) -> None:
        """A new episode starts on this copy."""

    def next_line(self, context: Context, admissible: Sequence[str]) -> str:
        raise NotImplementedError

    def spec(self) -> dict:
        return {"kind": self.name}

    def start(self, context: Context) -> None:
        episode = copy.copy(self)
        episode.begin(context)
        self._live[id(context)] = episode

    def decide(self, requests: Sequence[Request]) -> list[Decision | Exception]:
        out: list[Decision | Exception] = []
        for context, admissible in requests:
            try:
                out.append(Decision(self._live[id(context)].next_line(context, admissible), self.name))
            except Exception as exc:
                out.append(exc)
        return out

    def end(self, context: Context) -> None:
        self._live.pop(id(context), None)
