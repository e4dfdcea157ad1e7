"""The scripted policy: replays given lines, a test double for a model."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from sparse_react.env import HouseholdEnv


class ScriptExhausted(RuntimeError):
    """The script has no line left for this turn."""


class ScriptedPolicy:
    """Returns its lines in order, one per turn; running out ends the episode with an error."""

    name = "scripted"
    last_mode = "scripted"

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = [line.strip() for line in lines if line.strip()]
        self._next = 0

    @classmethod
    def from_file(cls, path: Path) -> "ScriptedPolicy":
        from sparse_react.policies import PolicyError

        try:
            return cls(path.read_text().splitlines())
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyError(f"cannot read script {path}: {exc}") from None

    def start(self, env: HouseholdEnv, context) -> None:
        self._next = 0

    def next_line(self, context, admissible: Sequence[str]) -> str:
        if self._next >= len(self.lines):
            raise ScriptExhausted(f"the script's {len(self.lines)} lines are used up")
        self._next += 1
        return self.lines[self._next - 1]
