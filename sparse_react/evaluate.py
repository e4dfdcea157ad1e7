"""Playing a policy over a game set and tabulating success by task type (the paper's layout)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from tqdm import tqdm

from sparse_react.env import DEFAULT_MAX_STEPS, HouseholdEnv
from sparse_react.games.catalog import GameRef
from sparse_react.policies import Policy
from sparse_react.tasks import TaskType


@dataclass(frozen=True)
class GameResult:
    """How one episode of one game ended. `won` is what the game said, nothing else."""

    game: str
    task_type: TaskType
    won: bool
    steps: int
    error: str | None = None


def play_game(env: HouseholdEnv, policy: Policy, game: GameRef) -> GameResult:
    """Play one episode of `game` with `policy` until a win, the step budget, or an error."""
    observation, info = env.reset(options={"game": game})
    policy.reset(env)
    done, won = info["won"], info["won"]
    try:
        while not done:
            command = policy.next_line(observation, info["admissible_commands"])
            observation, _, terminated, truncated, info = env.step(command)
            won, done = bool(info["won"]), terminated or truncated
    except Exception as exc:  # a policy or engine failure ends this episode only
        return GameResult(game.name, game.task_type, False, env.steps_used, f"{type(exc).__name__}: {exc}")
    return GameResult(game.name, game.task_type, won, env.steps_used)


def evaluate(
    games: Sequence[GameRef], policy: Policy, max_steps: int = DEFAULT_MAX_STEPS, progress: bool = True
) -> list[GameResult]:
    """Play every game once, in order, and return one result per game."""
    env = HouseholdEnv(list(games), max_steps=max_steps)
    results: list[GameResult] = []
    bar = tqdm(games, desc=policy.name, unit="game", disable=not progress)
    for game in bar:
        results.append(play_game(env, policy, game))
        bar.set_postfix(success=f"{sum(r.won for r in results) / len(results):.0%}")
    return results


def success_table(results: Iterable[GameResult], label: str = "success") -> str:
    """A Markdown table: wins/games and percentage per task type (Pick ... Pick2) and All."""
    results = list(results)
    header = ["", *(t.column for t in TaskType), "All"]
    cells = [label]
    for group in [*([r for r in results if r.task_type is t] for t in TaskType), results]:
        wins = sum(r.won for r in group)
        cells.append(f"{wins}/{len(group)} ({wins / len(group):.0%})" if group else "–")
    rows = [header, ["---"] * len(header), cells]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)
