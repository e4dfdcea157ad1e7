"""Policies: what decides the next line of an episode."""

from __future__ import annotations

from typing import Protocol, Sequence

from sparse_react.env import HouseholdEnv


class Policy(Protocol):
    """Chooses the next line, given the latest observation and the admissible commands."""

    name: str

    def reset(self, env: HouseholdEnv) -> None:
        """Called once at the start of each episode with the (unwrapped) environment."""

    def next_line(self, observation: str, admissible: Sequence[str]) -> str:
        """The next command (or `think: ...` line)."""
