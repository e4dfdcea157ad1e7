"""Pipelines of `sparse-react` commands (the rhythm ablation, training rounds): each command printed
before it runs, run in a child process so that a model's memory goes back between stages, and
skipped when what it writes is already there. A rerun resumes where a stopped one left off."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from typing import Sequence

from sparse_react.errors import UserError

CLI = [sys.executable, "-m", "sparse_react.cli"]


class StepFailed(UserError):
    """A command of a pipeline exited with an error; the message names it."""


class Steps:
    """Runs commands and keeps their command lines (for the cards of what they made)."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    def run(self, args: Sequence[str], done: bool = False) -> None:
        """Run `sparse-react ARGS` unless `done`; StepFailed if it fails."""
        self.commands.append("sparse-react " + shlex.join(args))
        print("$ " + self.commands[-1] + ("   # done, skipped" if done else ""), flush=True)
        if done:
            return
        started = time.perf_counter()
        finished = subprocess.run(CLI + list(args))
        if finished.returncode:
            raise StepFailed(f"`{self.commands[-1]}` exited with status {finished.returncode}; what the earlier "
                             f"steps wrote is kept: fix the cause and run the same command again to resume")
        print(f"  ({time.perf_counter() - started:.0f} s)", flush=True)
