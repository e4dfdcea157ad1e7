"""Pipelines of library calls (training in rounds, the rhythm ablations): each stage is one call,
printed before it runs as the `sparse-react` command that does the same, skipped when what it writes
is already there, and run in a child process where it loads a model, so that the model's memory goes
back when the stage ends. A rerun resumes where a stopped one left off."""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Callable, Mapping

from sparse_react.errors import UserError
from sparse_react.options import command_line


class StageFailed(UserError):
    """A stage of a pipeline failed; the message names it and why."""


@dataclass(frozen=True)
class Stage:
    """One call of a library function, named as the command line names it: `function` is what
    `sparse-react COMMAND` calls, with the command's arguments and its options by their option names
    (options dataclasses whole). In a child process (`isolated`) the function and its arguments go
    by pickle: a module-level function, plain values and options dataclasses."""

    command: str
    function: Callable[..., Any]
    arguments: tuple[Any, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    isolated: bool = False
    summary: Callable[[Any], str] | None = None  # what to print of the result

    @property
    def line(self) -> str:
        """The `sparse-react` command that does what this stage does."""
        return command_line(self.command, self.arguments, self.options)

    def call(self) -> Any:
        """Call the function here, printing its summary."""
        result = self.function(*self.arguments, **self.options)
        if self.summary:
            print(self.summary(result), flush=True)
        return result


class Pipeline:
    """Runs stages in order and keeps their command lines (for the cards of what they made)."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    def run(self, stage: Stage, done: bool = False) -> None:
        """Run `stage` unless `done`; StageFailed, naming it, if it fails with a user error (a bug
        keeps its traceback). What earlier stages wrote is kept."""
        self.commands.append(stage.line)
        print("$ " + stage.line + ("   # done, skipped" if done else ""), flush=True)
        if done:
            return
        started = time.perf_counter()
        cause = _in_child(stage) if stage.isolated else _here(stage)
        if cause is not None:
            raise StageFailed(f"`{stage.line}` failed: {cause}; what the earlier stages wrote is kept: fix the "
                              f"cause and run the same command again to resume")
        print(f"  ({time.perf_counter() - started:.0f} s)", flush=True)


def _here(stage: Stage) -> str | None:
    try:
        stage.call()
    except UserError as exc:
        return str(exc)
    except Exception as exc:
        exc.add_note(f"in the stage `{stage.line}`")
        raise
    return None


def _in_child(stage: Stage) -> str | None:
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of this one's memory
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(stage, sender), name=f"stage {stage.command}")
    child.start()
    sender.close()
    try:
        cause = receiver.recv()
    except EOFError:  # it died before it could say why
        cause = None
    except BaseException:  # this process is interrupted: so is the stage
        child.terminate()
        child.join()
        raise
    child.join()
    if child.exitcode:
        return cause or f"its process ended with status {child.exitcode}"
    return None


def _child(stage: Stage, sender: Connection) -> None:
    try:
        stage.call()
    except UserError as exc:
        sender.send(str(exc))
        raise SystemExit(2) from None
    except BaseException as exc:
        sender.send(f"{type(exc).__name__}: {exc} (its traceback is above)")
        raise
    sender.send(None)
