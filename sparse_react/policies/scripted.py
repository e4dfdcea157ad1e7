"""The scripted policy: replays given lines, a test double for a model."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Sequence

from sparse_react.agent import Context
from sparse_react.policies.base import LinePolicy, PolicyError


class ScriptExhausted(RuntimeError):
    """The script has no line left for this turn."""


class ScriptedPolicy(LinePolicy):
    """Returns its lines in order, one per turn, from the first in every episode; running out ends
    the episode with an error."""

    name = "scripted"

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__()
        self.lines = [line.strip() for line in lines if line.strip()]

    @classmethod
    def from_file(cls, path: Path) -> "ScriptedPolicy":
        try:
            return cls(path.read_text().splitlines())
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyError(f"cannot read script {path}: {exc}") from None

    def spec(self) -> dict:
        digest = hashlib.sha256("\n".join(self.lines).encode()).hexdigest()
        return {"kind": self.name, "lines": len(self.lines), "lines_sha256": digest}

    def begin(self, context: Context) -> None:
        self._next = 0

    def next_line(self, context: Context, admissible: Sequence[str]) -> str:
        if self._next >= len(self.lines):
            raise ScriptExhausted(f"the script's {len(self.lines)} lines are used up")
        self._next += 1
        return self.lines[self._next - 1]
