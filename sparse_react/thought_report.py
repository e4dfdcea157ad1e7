"""Where thoughts go, across runs: the thought-anatomy tables of a report, the paired check of
whether covering the triggers goes with winning, the episode timeline and the comparison of kinds
by rhythm with the project's own few-shot examples as a reference row."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Sequence

from sparse_react.anatomy import (
    SUMMARY_HEADER,
    EpisodeAnatomy,
    ThoughtKind,
    Trigger,
    episode_anatomy,
    summarize_anatomy,
)
from sparse_react.errors import UserError
from sparse_react.household.catalog import GameRef, GameSetError, alfworld_data_dir, game_ref
from sparse_react.household.tasks import TaskType
from sparse_react.lines import THOUGHT_REPLY, Kind, is_thought, thought_text
from sparse_react.prompts import load_examples
from sparse_react.report import PairedComparison, Run, markdown_table, own
from sparse_react.rhythms import get_rhythm
from sparse_react.trajectory import Entry, Episode

REFERENCE = "few-shot examples (sparse)"
KIND_COLOURS = {ThoughtKind.DECOMPOSITION: "tab:purple", ThoughtKind.SUBGOAL: "tab:green",
                ThoughtKind.EXCEPTION: "tab:red", ThoughtKind.LOCATION: "tab:blue", ThoughtKind.OTHER: "tab:gray"}


def run_anatomies(runs: Sequence[Run]) -> tuple[dict[str, list[EpisodeAnatomy]], list[str]]:
    """Each group's (run/rhythm, or rhythm for one run) anatomies of the policy's own episodes, and
    the episodes left out because their game cannot be replayed here (each naming its file)."""
    groups: dict[str, list[EpisodeAnatomy]] = defaultdict(list)
    problems = []
    for label, episodes in runs:
        for episode in own(episodes):
            try:
                anatomy = episode_anatomy(episode)
            except (UserError, OSError) as exc:
                problems.append(f"{label}: {episode.game_name}: {exc}")
                continue
            groups[f"{label}/{episode.rhythm}" if len(runs) > 1 else episode.rhythm].append(anatomy)
    return dict(groups), problems


def example_episode(example, task_type: TaskType, rhythm: str, game: GameRef) -> Episode:
    """A prompt file's example as the episode it shows, in one rhythm."""
    lines = [(Kind.THOUGHT if reply == THOUGHT_REPLY and is_thought(line) else Kind.ACTION, line, reply)
             for line, reply in example.lines(get_rhythm(rhythm))]
    entries = [Entry(i, kind, thought_text(line) if kind is Kind.THOUGHT else line, reply)
               for i, (kind, line, reply) in enumerate(lines, start=1)]
    return Episode(str(game.path), task_type.value, "", rhythm, "few-shot", example.observation, entries=entries,
                   won=True)


def reference_anatomies(rhythm: str = "sparse") -> tuple[list[EpisodeAnatomy], str | None]:
    """The anatomies of the project's few-shot examples (ALFWorld train games, replayed from
    ALFWORLD_DATA), or [] and why not."""
    try:
        train = alfworld_data_dir() / "train"
    except GameSetError as exc:
        return [], str(exc)
    out = []
    for task_type in TaskType:
        for example in load_examples(task_type):
            folder = train / example.game.removeprefix("alfworld:train/")
            game = game_ref(folder / "game.tw-pddl")
            out.append(episode_anatomy(example_episode(example, task_type, rhythm, game), game))
    return out, None


@dataclass(frozen=True)
class CoveragePair:
    """Two groups on the games exactly one of them won: how often the winner covered more of its
    triggers than the loser, and how often less (a sign test on those)."""

    first: str
    second: str
    split: int  # games exactly one won
    winner_covered_more: int
    winner_covered_less: int

    @property
    def p_value(self) -> float:
        return PairedComparison("", "", 0, 0, self.winner_covered_more, self.winner_covered_less).p_value


def coverage_pairs(groups: dict[str, list[EpisodeAnatomy]]) -> list[CoveragePair]:
    """For every two groups, game by game: on the games one won and the other lost, did the winner
    cover a larger share of its subgoal and exception triggers?"""
    by_game = {name: {(a.episode.game_name, a.episode.prompt_variant): a for a in anatomies}
               for name, anatomies in groups.items()}
    pairs = []
    for first, second in combinations(by_game, 2):
        more = less = split = 0
        for key in by_game[first].keys() & by_game[second].keys():
            a, b = by_game[first][key], by_game[second][key]
            if a.episode.won == b.episode.won:
                continue
            split += 1
            winner, loser = (a, b) if a.episode.won else (b, a)
            more += (winner.coverage or 0) > (loser.coverage or 0)
            less += (winner.coverage or 0) < (loser.coverage or 0)
        if split:
            pairs.append(CoveragePair(first, second, split, more, less))
    return pairs


def anatomy_markdown(groups: dict[str, list[EpisodeAnatomy]], reference: Sequence[EpisodeAnatomy] = (),
                     problems: Sequence[str] = (), no_reference: str | None = None) -> str:
    """The report's "Where thoughts go" section."""
    rows = [summarize_anatomy(REFERENCE, reference).row] if reference else []
    for name, anatomies in groups.items():
        rows += [summarize_anatomy(name, anatomies).row,
                 summarize_anatomy(f"{name} won", [a for a in anatomies if a.episode.won]).row,
                 summarize_anatomy(f"{name} lost", [a for a in anatomies if not a.episode.won]).row]
    pairs = coverage_pairs(groups)
    pair_rows = [[f"{p.first} vs {p.second}", str(p.split), str(p.winner_covered_more), str(p.winner_covered_less),
                  f"{p.p_value:.3f}"] for p in pairs]
    parts = ["## Where thoughts go",
             "Each thought's kinds, from the record and a replay of its game (a thought may have several): "
             "decomposition (the first thought), subgoal (right after an action that completed one), exception "
             "(right after `Nothing happens.`, a search that ran out of the guessed places, or a false claim), "
             "location (a guess naming places not yet visited), other (recaps and reasons). Covered: the share "
             "of subgoal completions and exceptions followed at once by a thought. Idle: thoughts of kind other only.",
             markdown_table(SUMMARY_HEADER, rows)]
    if pair_rows:
        parts += ["Covering the triggers and winning, game by game: on the games exactly one of two groups won, "
                  "how often the winner had covered more of its triggers, and less (p: sign test).",
                  markdown_table(["pair", "split games", "winner covered more", "winner covered less", "p"], pair_rows)]
    if no_reference:
        parts.append(f"No reference row of the few-shot examples: {no_reference}")
    if problems:
        parts.append(f"Left out ({len(problems)} episodes whose game cannot be replayed here): "
                     + "; ".join(problems[:5]) + ("; ..." if len(problems) > 5 else ""))
    return "\n\n".join(parts)


def plot_timeline(anatomy: EpisodeAnatomy, ax) -> None:
    """One episode on a line: actions as ticks, thoughts as marks coloured by kind, subgoal
    completions as vertical lines, exceptions as red crosses under the line."""
    episode = anatomy.episode
    actions = [e.step for e in episode.actions]
    ax.vlines(actions, -0.15, 0.15, color="black", linewidth=1)
    for step in anatomy.subgoal_steps:
        ax.axvline(step + 0.5, color="tab:green", alpha=0.35, linewidth=3)
    for trigger in anatomy.triggers:
        if trigger.kind is Trigger.EXCEPTION:
            ax.plot(trigger.step, -0.35, "x", color="tab:red")
    for thought in anatomy.thoughts:
        kinds = sorted(thought.kinds, key=list(ThoughtKind).index)
        for offset, kind in enumerate(kinds):
            ax.plot(thought.step, 0.35 + 0.18 * offset, "o", color=KIND_COLOURS[kind], markersize=7)
    ax.set_yticks([])
    ax.set_ylim(-0.6, 1.2)
    ax.set_xlim(0, max(len(episode.entries), 1) + 1)
    outcome = "won" if episode.won else "lost"
    ax.set_title(f"{episode.rhythm} · {episode.game_name} · {outcome}", fontsize="small", loc="left")


def _legend(fig) -> None:
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker="o", linestyle="", color=c, label=k.value) for k, c in KIND_COLOURS.items()]
    handles += [Line2D([], [], color="tab:green", alpha=0.35, linewidth=3, label="subgoal done"),
                Line2D([], [], marker="x", linestyle="", color="tab:red", label="exception (trigger)"),
                Line2D([], [], marker="|", linestyle="", color="black", label="action")]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize="small", frameon=False)


def write_timelines(anatomies: Sequence[EpisodeAnatomy], path: Path) -> Path:
    """A grid of episode timelines, one row each, into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(anatomies), 1, figsize=(10, 1.2 * len(anatomies) + 0.8), squeeze=False)
    for anatomy, ax in zip(anatomies, axes[:, 0]):
        plot_timeline(anatomy, ax)
    axes[-1, 0].set_xlabel("line of the episode")
    _legend(fig)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_kind_comparison(groups: dict[str, list[EpisodeAnatomy]], reference: Sequence[EpisodeAnatomy],
                          path: Path) -> Path:
    """Stacked bars of each group's thoughts by kind (share of thought marks), the few-shot examples first."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = ([(REFERENCE, reference)] if reference else []) + [(n, a) for n, a in groups.items()]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.6))
    for y, (name, anatomies) in enumerate(rows):
        counts = {k: sum(k in t.kinds for a in anatomies for t in a.thoughts) for k in ThoughtKind}
        total, left = sum(counts.values()) or 1, 0.0
        for kind, count in counts.items():
            ax.barh(y, count / total, left=left, color=KIND_COLOURS[kind], label=kind.value if y == 0 else None)
            left += count / total
    ax.set_yticks(range(len(rows)), [name for name, _ in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of thought kinds")
    ax.set_title("Where each rhythm's thoughts go")
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=len(ThoughtKind))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_anatomy(runs: Sequence[Run], out_dir: Path | str, timelines: int = 6) -> tuple[str, dict[str, Path]]:
    """The "Where thoughts go" section for a report, and its pictures in out_dir: thought_kinds.png
    (by rhythm, with the few-shot reference) and timelines.png (the first `timelines` thinking episodes,
    taking turns between the groups)."""
    out_dir = Path(out_dir)
    groups, problems = run_anatomies(runs)
    reference, no_reference = reference_anatomies()
    paths: dict[str, Path] = {}
    if groups:
        paths["thought_kinds"] = write_kind_comparison(groups, reference, out_dir / "thought_kinds.png")
        thinking = [[a for a in anatomies if a.thoughts] for anatomies in groups.values()]
        shown = [a for row in zip(*[t for t in thinking if t]) for a in row][:timelines]
        if shown:
            paths["timelines"] = write_timelines(shown, out_dir / "timelines.png")
    return anatomy_markdown(groups, reference, problems, no_reference), paths
