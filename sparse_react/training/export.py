"""Won episodes as supervised fine-tuning data: one chat-style JSON line per episode.

Each line holds `messages` in the form the datasets library and chat trainers read: the first
`user` message is the episode's zero-shot prefix (instruction, task, first observation), then the
agent's lines (`assistant`: thoughts as `think: ...`, and actions) alternate with what the game
answered (`user`). Training puts the loss on the assistant lines only. Beside the messages: the
game (name and file hash), task type, rhythm and the run it came from.

An export refuses any episode of a game that is also an evaluation game (same name or same file
contents), so a model is never trained on the games it is measured on.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from sparse_react.agent import Context
from sparse_react.errors import UserError
from sparse_react.household.catalog import GameRef, GameSetError, find_games
from sparse_react.household.tasks import TaskType
from sparse_react.lines import Kind, thought_line
from sparse_react.report import load_runs
from sparse_react.rhythms import get_rhythm
from sparse_react.trajectory import BadLine, Episode

DATA_FORMAT = "sparse_react.sft/1"
DEFAULT_EVAL_SETS = ("valid_unseen", "valid_seen", "alfworld:valid_seen", "alfworld:valid_unseen")


class ExportError(UserError, ValueError):
    """An export that would be empty or would leak an evaluation game; the message says which."""


@dataclass(frozen=True)
class ExportSummary:
    """What an export wrote: examples per rhythm, episodes left out because they were not won, and
    record lines left out because they are not episodes."""

    path: Path
    examples: int
    by_rhythm: dict[str, int]
    not_won: int
    skipped: list[BadLine] = field(default_factory=list)

    def describe(self) -> str:
        """What was written, in one line."""
        counts = ", ".join(f"{n} {r}" for r, n in self.by_rhythm.items())
        return f"wrote {self.examples} examples ({counts}) to {self.path}; {self.not_won} episodes not won were left out"


def game_digest(path: str | Path) -> str | None:
    """sha256 of a game file (None when the file is gone)."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def eval_games(sets: Sequence[str]) -> list[GameRef]:
    """The games of every named evaluation set that exists here (an ALFWorld split that is not
    installed is skipped; a set that exists and is empty, or a folder that is missing, is an error)."""
    games: list[GameRef] = []
    for name in sets:
        try:
            games += find_games(name)
        except GameSetError:
            if not name.startswith("alfworld:"):
                raise
    return games


def episode_messages(episode: Episode) -> list[dict[str, str]]:
    """The episode as chat messages: zero-shot prefix, then agent lines and game answers."""
    context = Context.start(get_rhythm(episode.rhythm), TaskType(episode.task_type), episode.task,
                            episode.initial_observation, episode.prompt_variant)
    messages = [{"role": "user", "content": context.zero_shot_prefix.rstrip("\n")}]
    for entry in episode.entries:
        line = thought_line(entry.text) if entry.kind is Kind.THOUGHT else entry.text
        messages += [{"role": "assistant", "content": line}, {"role": "user", "content": entry.observation}]
    return messages


def in_game_order(episodes: Sequence[Episode]) -> list[Episode]:
    """A run's episodes by game name, rhythm and prompt variant, not in the order workers finished
    them, so that the same runs always give the same data file (and the same sha256 in a card)."""
    return sorted(episodes, key=lambda e: (e.game_name, e.rhythm, e.prompt_variant))


def export(runs: Sequence[Path], out: Path, exclude: Sequence[str] = DEFAULT_EVAL_SETS,
           rhythm: str | None = None) -> ExportSummary:
    """Write every won episode of `runs` (run folders or episode files) to `out` (JSON lines).

    `rhythm` keeps one rhythm only. Raises ExportError when an episode's game is one of the
    evaluation games of `exclude`, or when nothing would be written.
    """
    skipped: list[BadLine] = []
    episodes = [(label, e) for label, eps in load_runs(runs, skipped) for e in in_game_order(eps)
                if rhythm is None or e.rhythm == get_rhythm(rhythm).name]
    won = [(label, e) for label, e in episodes if e.won]
    if not won:
        raise ExportError(f"no won episode{' in the ' + rhythm + ' rhythm' if rhythm else ''} in "
                          f"{', '.join(map(str, runs))}: nothing to train on")
    _refuse_leaks([e for _, e in won], eval_games(exclude), exclude)
    out.parent.mkdir(parents=True, exist_ok=True)
    by_rhythm: dict[str, int] = {}
    with out.open("w") as handle:
        for label, episode in won:
            record = {"format": DATA_FORMAT, "messages": episode_messages(episode),
                      "rhythm": episode.rhythm, "task_type": episode.task_type,
                      "game": episode.game_name,
                      "game_sha256": game_digest(episode.game), "policy": episode.policy, "run": label}
            handle.write(json.dumps(record) + "\n")
            by_rhythm[episode.rhythm] = by_rhythm.get(episode.rhythm, 0) + 1
    return ExportSummary(out, len(won), by_rhythm, len(episodes) - len(won), skipped)


def _refuse_leaks(episodes: Iterable[Episode], games: Sequence[GameRef], sets: Sequence[str]) -> None:
    names = {g.name for g in games}
    digests = {d for g in games if (d := game_digest(g.path))}
    leaks = sorted({e.game_name for e in episodes
                    if e.settings.get("game_name") in names or game_digest(e.game) in digests})
    if leaks:
        shown = ", ".join(leaks[:5]) + (f" and {len(leaks) - 5} more" if len(leaks) > 5 else "")
        raise ExportError(f"{len(leaks)} exported game(s) are evaluation games of {', '.join(sets)}: {shown}; "
                          f"train on other games (e.g. the train splits)")
