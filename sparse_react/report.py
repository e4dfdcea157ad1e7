"""Reports over episode records: success by task type (the paper's layout) and how the agents behaved.

Everything here is computed from the records alone; no game is re-run. Success is `episode.won`.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from itertools import combinations
from math import comb
from pathlib import Path
from statistics import mean
from typing import Sequence

from sparse_react.claims import contradicted_claims
from sparse_react.household.tasks import TaskType
from sparse_react.trajectory import EPISODES_FILE, BadLine, Episode, Failure, RecordError, failure_class, read_records

COLUMNS: tuple[str, ...] = (*(t.column for t in TaskType), "All")
DASH = "–"

Run = tuple[str, list[Episode]]


def load_runs(paths: Sequence[Path | str], skipped: list[BadLine] | None = None) -> list[Run]:
    """Read each path (a run folder holding `episodes.jsonl`, or a `.jsonl` file) as a labelled run.

    The label is the run folder's name (a loose `.jsonl` file uses its stem). Lines that are not
    episodes go to `skipped` when it is given (each names its file, line and field); without it the
    first one raises RecordError (a ValueError), as does any path that holds no episodes.
    """
    runs: list[Run] = []
    for path, label in zip(map(Path, paths), run_labels(paths)):
        file = path / EPISODES_FILE if path.is_dir() else path
        if path.is_dir() and not file.is_file():
            raise RecordError(f"{path}: no {EPISODES_FILE} in this run folder")
        records = read_records(file)
        if records.bad and skipped is None:
            raise RecordError(f"{records.bad[0]}: not an episode record")
        if skipped is not None:
            skipped.extend(records.bad)
        episodes = records.episodes
        if not episodes:
            raise RecordError(f"{file}: no episodes in this record file")
        runs.append((label, episodes))
    return runs


def run_labels(paths: Sequence[Path | str]) -> list[str]:
    """Each run's label: its folder's name (a loose `.jsonl` file's stem), `-2`, `-3`... where repeated."""
    labels, seen = [], set()
    for raw in paths:
        path = Path(raw).resolve()
        label = path.name if path.is_dir() else path.parent.name if path.name == EPISODES_FILE else path.stem
        candidate, n = label, 1
        while candidate in seen:
            n += 1
            candidate = f"{label}-{n}"
        seen.add(candidate)
        labels.append(candidate)
    return labels


@dataclass
class GroupStats:
    """The measures of one (run, rhythm[, policy]) group of episodes."""

    name: str
    label: str
    rhythm: str
    policy: str
    episodes: int
    wins: dict[str, int]
    games: dict[str, int]
    mean_steps_won: float | None
    thoughts_per_episode: float
    thought_density: float
    invalid_action_rate: float | None
    failures: dict[str, int]
    false_claims: int  # lost episodes with a thought claiming an object found that no observation showed
    tokens_per_episode: float | None
    time_per_episode: float
    steps_won: list[int] = field(default_factory=list)

    def success(self, column: str) -> float | None:
        """Percentage of games won in a column (Pick ... Pick2, All); None when it has no games."""
        games = self.games[column]
        return 100.0 * self.wins[column] / games if games else None


@dataclass(frozen=True)
class PairedComparison:
    """Two groups of episodes (rhythms, runs, rounds) on the games both played: how many each won
    where the other lost, and the exact two-sided McNemar p-value (a sign test on those discordant games)."""

    first: str
    second: str
    games: int
    both_won: int
    only_first: int
    only_second: int

    @classmethod
    def of(cls, first: str, second: str, won_first: dict, won_second: dict) -> "PairedComparison":
        """The comparison on the keys (games) both `won_` maps hold."""
        wins = [(won_first[k], won_second[k]) for k in won_first.keys() & won_second.keys()]
        return cls(first, second, len(wins), wins.count((True, True)), wins.count((True, False)),
                   wins.count((False, True)))

    @property
    def p_value(self) -> float:
        n, k = self.only_first + self.only_second, min(self.only_first, self.only_second)
        return min(1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0

    def __str__(self) -> str:
        return pairs_table([self])


def group_stats(name: str, label: str, episodes: Sequence[Episode]) -> GroupStats:
    """Compute every measure of one group of episodes (all of one rhythm and policy)."""
    wins, games = {}, {}
    for task in TaskType:
        of_type = [e for e in episodes if e.task_type == task.value]
        wins[task.column], games[task.column] = sum(e.won for e in of_type), len(of_type)
    wins["All"], games["All"] = sum(e.won for e in episodes), len(episodes)
    steps_won = [len(e.entries) for e in episodes if e.won]
    actions = sum(len(e.actions) for e in episodes)
    tokens = [e.tokens for e in episodes if e.tokens is not None]
    return GroupStats(
        name=name,
        label=label,
        rhythm=episodes[0].rhythm,
        policy=episodes[0].policy,
        episodes=len(episodes),
        wins=wins,
        games=games,
        mean_steps_won=mean(steps_won) if steps_won else None,
        thoughts_per_episode=mean(len(e.thoughts) for e in episodes),
        thought_density=mean(e.thought_density for e in episodes),
        invalid_action_rate=sum(e.invalid_actions for e in episodes) / actions if actions else None,
        failures={f.value: sum(failure_class(e) is f for e in episodes) for f in Failure},
        false_claims=sum(not e.won and bool(contradicted_claims(e)) for e in episodes),
        tokens_per_episode=mean(tokens) if tokens else None,
        time_per_episode=mean(e.wall_time for e in episodes),
        steps_won=steps_won,
    )


def own(episodes: Sequence[Episode]) -> list[Episode]:
    """The policy's own episodes: those no human steered (they are shown apart, never counted)."""
    return [e for e in episodes if not e.steered]


def summarize(runs: Sequence[Run]) -> list[GroupStats]:
    """One GroupStats per run and rhythm, in the order first seen, over the policy's own episodes.

    Rows are named by rhythm, prefixed `label/` when there are several runs; a run that mixes
    policies within a rhythm gets one row per policy, suffixed ` [policy]`.
    """
    groups: list[GroupStats] = []
    for label, episodes in runs:
        keyed: dict[tuple[str, str], list[Episode]] = {}
        for episode in own(episodes):
            keyed.setdefault((episode.rhythm, episode.policy), []).append(episode)
        mixed = len({policy for _, policy in keyed}) > 1
        for (rhythm, policy), members in keyed.items():
            name = (f"{label}/" if len(runs) > 1 else "") + rhythm + (f" [{policy}]" if mixed else "")
            groups.append(group_stats(name, label, members))
    return groups


def format_number(value: float | None, digits: int = 2) -> str:
    return DASH if value is None else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return DASH if value is None else f"{value:.1%}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(row) + " |" for row in lines)


def success_rows(groups: Sequence[GroupStats]) -> list[list[str]]:
    """Markdown cells of the success table: `wins/games (pct%)` per column, `–` where no games."""
    rows = []
    for g in groups:
        cells = [f"{g.wins[c]}/{g.games[c]} ({g.success(c):.0f}%)" if g.games[c] else DASH for c in COLUMNS]
        rows.append([g.name, *cells])
    return rows


def success_table(episodes: Sequence[Episode], label: str = "success", by_rhythm: bool = False) -> str:
    """The success table of some episodes as Markdown: one row named `label`, or one per rhythm
    (`label (rhythm)`); the policy's own episodes only."""
    episodes = own(episodes)
    groups = {label: episodes}
    if by_rhythm:
        groups = {f"{label} ({r})": [e for e in episodes if e.rhythm == r] for r in dict.fromkeys(e.rhythm for e in episodes)}
    return markdown_table(["", *COLUMNS], success_rows([group_stats(n, label, g) for n, g in groups.items() if g]))


MEASURES: tuple[str, ...] = ("policy", "episodes", "steps to success", "thoughts/ep", "thought density",
                             "invalid actions", *(f.value for f in Failure), "false claim", "tokens/ep", "time/ep (s)")


def measure_rows(groups: Sequence[GroupStats]) -> list[list[str]]:
    """Cells of the behaviour table: the group's name, then one cell per MEASURES column."""
    return [
        [g.name, g.policy, str(g.episodes), format_number(g.mean_steps_won, 1),
         format_number(g.thoughts_per_episode), format_number(g.thought_density, 3), _pct(g.invalid_action_rate),
         *(str(g.failures[f.value]) for f in Failure), str(g.false_claims), format_number(g.tokens_per_episode, 0),
         format_number(g.time_per_episode)]
        for g in groups
    ]


def paired_groups(runs: Sequence[Run]) -> list[PairedComparison]:
    """Game by game: every two rhythms within a run (what thinking changes), then each rhythm across
    every two runs that played it (what changed between the runs: a model, a budget rule)."""
    won: dict[tuple[str, str], dict[tuple[str, int], bool]] = {}
    for label, episodes in runs:
        for e in own(episodes):
            won.setdefault((label, e.rhythm), {})[e.game_name, e.prompt_variant] = e.won
    name = (lambda label, rhythm: f"{label}/{rhythm}") if len(runs) > 1 else (lambda label, rhythm: rhythm)
    within = [(a, b) for label, _ in runs for a, b in combinations([k for k in won if k[0] == label], 2)]
    across = [(a, b) for rhythm in dict.fromkeys(r for _, r in won)
              for a, b in combinations([k for k in won if k[1] == rhythm], 2)]
    pairs = [PairedComparison.of(name(*a), name(*b), won[a], won[b]) for a, b in within + across]
    return [c for c in pairs if c.games]


def pairs_table(pairs: Sequence[PairedComparison]) -> str:
    """The pairs as a Markdown table, one row each (`first vs second`, the counts, p)."""
    rows = [[f"{c.first} vs {c.second}", str(c.games), str(c.both_won), str(c.only_first), str(c.only_second),
             f"{c.p_value:.2g}"] for c in pairs]
    return markdown_table(["pair", "games", "both won", "only the first won", "only the second won",
                           "p (exact McNemar)"], rows)


def markdown_report(runs: Sequence[Run], skipped: Sequence[BadLine] = ()) -> str:
    """The whole report as Markdown: success by task type, game-by-game pairs, then the other measures;
    last, the record lines that are not episodes (`skipped`, from `load_runs`)."""
    groups = summarize(runs)
    sources = ", ".join(f"`{label}` ({len(eps)} episodes)" for label, eps in runs)
    pairs = paired_groups(runs)
    steered = [[label, e.game_name, e.rhythm, "won" if e.won else "lost",
                str(e.settings.get("resumed_from", {}).get("episode", DASH))]
               for label, episodes in runs for e in episodes if e.steered]
    steered_section = ["## Steered episodes (not counted above)", markdown_table(
        ["run", "game", "rhythm", "outcome", "resumed from episode"], steered)] if steered else []
    unreadable = ["## Lines that are not episodes (left out)", markdown_table(
        ["file", "line", "field", "problem"], [[str(b.path), str(b.line), b.field or DASH, b.message.replace("|", "\\|")] for b in skipped])
    ] if skipped else []
    game_by_game = ["## Game by game", pairs_table(pairs), "Each pair on the games (and prompt variants) both played; p is the chance of a split at least this uneven "
        "of the games only one of them won if neither were better (two-sided)."] if pairs else []
    return "\n\n".join([
        "# Report",
        f"Runs: {sources}. Success is what the game said (`won`); all numbers come from the records, and "
        "count only the policy's own episodes (an episode a human steered is listed apart).",
        "## Success by task type",
        markdown_table(["", *COLUMNS], success_rows(groups)),
        *game_by_game,
        *steered_section,
        "## Behaviour",
        markdown_table(["", *MEASURES], measure_rows(groups)),
        "Steps to success: mean entries (thoughts and actions) of won episodes. Invalid actions: "
        "actions answered `Nothing happens.` over all actions. Failures: episodes not won, by class (`cycle`: "
        "the last actions went twice round the same two or more commands with the same observations). "
        "False claim: episodes not won with a thought claiming an object found that no observation had shown "
        "(counted besides their class). "
        f"Tokens: mean over episodes with known token counts ({DASH} when none).",
        *unreadable,
    ]) + "\n"


CSV_FIELDS: tuple[str, ...] = (
    "group", "label", "rhythm", "policy", "episodes",
    *(f"{c}_{k}" for c in COLUMNS for k in ("wins", "games", "success_pct")),
    "mean_steps_won", "thoughts_per_episode", "thought_density", "invalid_action_rate",
    *(f"failures_{f.value}" for f in Failure), "false_claims",
    "tokens_per_episode", "time_per_episode",
)


def _csv_row(g: GroupStats) -> dict[str, object]:
    row: dict[str, object] = {"group": g.name, "label": g.label, "rhythm": g.rhythm, "policy": g.policy,
                              "episodes": g.episodes}
    for c in COLUMNS:
        pct = g.success(c)
        row |= {f"{c}_wins": g.wins[c], f"{c}_games": g.games[c],
                f"{c}_success_pct": "" if pct is None else round(pct, 2)}
    row |= {f"failures_{f}": n for f, n in g.failures.items()} | {"false_claims": g.false_claims}
    for key in ("mean_steps_won", "thoughts_per_episode", "thought_density", "invalid_action_rate",
                "tokens_per_episode", "time_per_episode"):
        value = getattr(g, key)
        row[key] = "" if value is None else round(value, 4)
    return row


def write_csv(groups: Sequence[GroupStats], path: Path) -> None:
    """One row per group with every number (empty cells where a measure is undefined)."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS)
        writer.writeheader()
        writer.writerows(_csv_row(g) for g in groups)


def write_plots(groups: Sequence[GroupStats], out_dir: Path) -> dict[str, Path]:
    """success_by_task.png, thought_density.png and steps_to_success.png (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [g.name for g in groups]
    width = max(6.0, 1.2 * len(groups) + 3)
    paths: dict[str, Path] = {}

    fig, ax = plt.subplots(figsize=(max(8.0, 0.35 * len(COLUMNS) * len(groups) + 4), 4.5))
    bar = 0.8 / len(groups)
    for i, g in enumerate(groups):
        xs = [j + (i - (len(groups) - 1) / 2) * bar for j in range(len(COLUMNS))]
        ax.bar(xs, [g.success(c) or 0.0 for c in COLUMNS], bar, label=g.name)
    ax.set_xticks(range(len(COLUMNS)), COLUMNS)
    ax.set_ylim(0, 105)
    ax.set_ylabel("success (%)")
    ax.set_title("Success by task type")
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=min(len(groups), 4))
    paths["success_by_task"] = _save(fig, out_dir / "success_by_task.png")

    fig, ax = plt.subplots(figsize=(width, 4))
    ax.bar(names, [g.thought_density for g in groups], color="tab:green")
    ax.set_ylim(0, 1)
    ax.set_ylabel("thoughts / entries")
    ax.set_title("Thought density")
    ax.tick_params(axis="x", labelrotation=20)
    paths["thought_density"] = _save(fig, out_dir / "thought_density.png")

    fig, ax = plt.subplots(figsize=(width, 4))
    with_wins = [i for i, g in enumerate(groups) if g.steps_won]
    if with_wins:
        ax.boxplot([groups[i].steps_won for i in with_wins], positions=with_wins, showmeans=True)
    for i, g in enumerate(groups):
        if not g.steps_won:
            ax.text(i, 0.5, "no wins", ha="center", va="bottom", color="gray")
    ax.set_xticks(range(len(groups)), names)
    ax.set_xlim(-0.5, len(groups) - 0.5)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("steps (entries) of won episodes")
    ax.set_title("Steps to success")
    ax.tick_params(axis="x", labelrotation=20)
    paths["steps_to_success"] = _save(fig, out_dir / "steps_to_success.png")
    return paths


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_report(runs: Sequence[Run], out_dir: Path | str, skipped: Sequence[BadLine] = ()) -> dict[str, Path]:
    """Write report.md, report.csv and the PNG plots into out_dir; return their paths by name."""
    if not runs:
        raise RecordError("no runs to report on")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    groups = summarize(runs)
    paths = {"markdown": out_dir / "report.md", "csv": out_dir / "report.csv"}
    paths["markdown"].write_text(markdown_report(runs, skipped))
    write_csv(groups, paths["csv"])
    return paths | write_plots(groups, out_dir)
