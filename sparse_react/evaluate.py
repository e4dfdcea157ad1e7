"""Playing a policy over a game set and tabulating success by task type (the paper's layout)."""

from __future__ import annotations

from typing import Iterable, Sequence

from tqdm import tqdm

from sparse_react.agent import LoopRules, Policy, run_episode
from sparse_react.env import HouseholdEnv
from sparse_react.games.catalog import GameRef
from sparse_react.tasks import TaskType
from sparse_react.trajectory import Episode, append_episode


def evaluate(games: Sequence[GameRef], policy: Policy, rhythm: str = "act", variant: int = 0,
             rules: LoopRules = LoopRules(), out: str | None = None, progress: bool = True) -> list[Episode]:
    """Play every game once, in order; append each episode to `out` (JSONL) as it finishes."""
    env = HouseholdEnv(list(games), max_steps=rules.max_steps)
    episodes: list[Episode] = []
    bar = tqdm(games, desc=f"{policy.name}/{rhythm}", unit="game", disable=not progress)
    for game in bar:
        episodes.append(run_episode(env, policy, game, rhythm, variant, rules))
        if out:
            append_episode(out, episodes[-1])
        bar.set_postfix(success=f"{sum(e.won for e in episodes) / len(episodes):.0%}")
    return episodes


def success_table(episodes: Iterable[Episode], label: str = "success") -> str:
    """A Markdown table: wins/games and percentage per task type (Pick ... Pick2) and All."""
    episodes = list(episodes)
    header = ["", *(t.column for t in TaskType), "All"]
    cells = [label]
    for group in [*([e for e in episodes if e.task_type == t.value] for t in TaskType), episodes]:
        wins = sum(e.won for e in group)
        cells.append(f"{wins}/{len(group)} ({wins / len(group):.0%})" if group else "–")
    rows = [header, ["---"] * len(header), cells]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)
