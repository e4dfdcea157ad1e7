"""Relabelling recorded episodes: at every state an agent visited, the line a good agent writes next.

The relabelling expert (`policies.expert.RelabellingExpertPolicy`) reads only what the episode
has shown, so its labels never name an object the agent has not seen. `relabel_episode` replays a
record in a fresh game (checking every observation against it) and labels each state before a
recorded line; `relabelled_examples` turns those labels into training examples in `export`'s
format (the agent's own lines are context, marked `"train": false`; the label is what is learned);
`hand_over` replays a record to a state and lets the expert play on from there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from sparse_react.agent import Context, Decision, LoopRules, Request, run_episode
from sparse_react.errors import UserError
from sparse_react.household.catalog import (
    BUNDLED_SPLITS,
    GameRef,
    GameSetError,
    alfworld_data_dir,
    bundled_games_dir,
    game_ref,
)
from sparse_react.household.env import HouseholdEnv
from sparse_react.lines import THOUGHT_REPLY, Kind, is_thought, thought_line
from sparse_react.options import OptionsError, RelabelOptions
from sparse_react.policies.expert import ExpertTask, Label, Offered, RelabellingExpertPolicy
from sparse_react.report import load_runs
from sparse_react.resume import ReplayPolicy
from sparse_react.training.export import (
    DATA_FORMAT,
    DEFAULT_EVAL_SETS,
    _refuse_leaks,
    episode_messages,
    eval_games,
    game_digest,
    in_game_order,
)
from sparse_react.trajectory import BadLine, Entry, Episode, RecordError

RELABEL_POLICY = RelabellingExpertPolicy.name
GO_TO = "go to "


class RelabelError(UserError, ValueError):
    """A record that cannot be relabelled: its game is missing, or replaying it gives other observations."""


@dataclass(frozen=True)
class RelabelledState:
    """The state before recorded entry `step` (1-based): what the agent wrote there, and the label."""

    step: int
    recorded: str  # the line as the agent wrote it (`think: ...` for a thought)
    label: Label

    @property
    def lines(self) -> list[str]:
        """The label as lines: the thought (where one is due), then the action."""
        return [*([thought_line(self.label.thought)] if self.label.thought else []), self.label.action]


def episode_game(episode: Episode) -> GameRef:
    """The record's game file, or (when the record was made elsewhere) the game of the same name
    and file name in a bundled split or an ALFWorld split under ALFWORLD_DATA."""
    path = Path(episode.game)
    if path.is_file():
        return game_ref(path)
    name = episode.settings.get("game_name", "")
    roots = [bundled_games_dir() / split for split in BUNDLED_SPLITS]
    try:
        roots += [alfworld_data_dir() / split for split in ("train", "valid_seen", "valid_unseen")]
    except GameSetError:
        pass  # no ALFWorld data here: only the bundled games can stand in
    for root in roots:
        candidate = root / name / path.name
        if name and candidate.is_file():
            return game_ref(candidate)
    raise RelabelError(f"game of the record not found: {episode.game} (name {name!r}: neither a bundled game "
                       "nor, with ALFWORLD_DATA set, an ALFWorld one)")


_PROCESS_ENV: list[HouseholdEnv] = []


def _env_for(game: GameRef, env: HouseholdEnv | None) -> HouseholdEnv:
    """`env`, else one environment per process for every game: each new engine copies the
    planner's 33 MB library into a temporary folder that lasts as long as the process."""
    if env is not None:
        return env
    if not _PROCESS_ENV:
        _PROCESS_ENV.append(HouseholdEnv([game]))
    return _PROCESS_ENV[0]


def _rules(episode: Episode, max_steps: int | None = None) -> LoopRules:
    rules = {k: v for k, v in episode.settings.items() if k in LoopRules.__dataclass_fields__}
    return LoopRules(**(rules | ({"max_steps": max_steps} if max_steps else {})))


@dataclass
class _LabellingReplay:
    """Sends the recorded lines, and labels each state before sending its line."""

    entries: list[Entry]
    replan_detours: bool = False
    labels: list[RelabelledState] = field(default_factory=list)
    name: str = RELABEL_POLICY
    batched: bool = False

    def spec(self) -> dict:
        return {"kind": RELABEL_POLICY}

    def start(self, context: Context) -> None:
        self._expert = RelabellingExpertPolicy(replan_detours=self.replan_detours)
        self._task = ExpertTask.of(context)
        self._offered = Offered()

    def end(self, context: Context) -> None:
        pass

    def decide(self, requests: Sequence[Request]) -> list[Decision | Exception]:
        (context, admissible), = requests
        done = len(context.turns)
        if done >= len(self.entries):
            return [RecordError("the record ends here")]
        if done and context.turns[-1][1] != self.entries[done - 1].observation:
            raise RelabelError(f"step {done}: the game answered {context.turns[-1][1]!r}, the record "
                               f"{self.entries[done - 1].observation!r}")
        entry = self.entries[done]
        sent = len(context.actions)
        self._offered = self._offered.adding(sent, admissible)
        label = self._expert.label(self._task, context.turns, admissible, self._offered.before_last_action(sent),
                                   context.rhythm)
        line = thought_line(entry.text) if entry.kind is Kind.THOUGHT else entry.text
        self.labels.append(RelabelledState(entry.step, line, label))
        return [Decision(line, "replay", entry.tokens)]


def relabel_episode(episode: Episode, game: GameRef | None = None, env: HouseholdEnv | None = None,
                    replan_detours: bool = False) -> list[RelabelledState]:
    """The relabelling expert's label at every state of a recorded episode (before each entry);
    `replan_detours` as in `RelabellingExpertPolicy`. A record it cannot relabel (its game missing,
    a state no label exists for) raises `RelabelError` naming the game."""
    game = game or episode_game(episode)
    replay = _LabellingReplay(list(episode.entries), replan_detours)
    replayed = run_episode(_env_for(game, env), replay, game, episode.rhythm, episode.prompt_variant,
                           _rules(episode, max(1, len(episode.entries))))
    if len(replay.labels) < len(episode.entries):
        cause = replayed.error
        raise RelabelError(f"{episode.settings.get('game_name', episode.game)}: {cause}")
    return replay.labels


def hand_over(episode: Episode, step: int, game: GameRef | None = None, budget: int = 50,
              env: HouseholdEnv | None = None) -> Episode:
    """Replay the record up to (not including) entry `step` (one past the last: all of it), then let
    the relabelling expert play on with `budget` more steps; returns the new episode (`won` says
    whether the expert won)."""
    if not 1 <= step <= len(episode.entries) + 1:
        raise RecordError(f"step {step} is out of range: the episode has {len(episode.entries)} steps")
    game = game or episode_game(episode)
    replay = ReplayPolicy(episode.entries[: step - 1], RelabellingExpertPolicy())
    handed = run_episode(_env_for(game, env), replay, game, episode.rhythm, episode.prompt_variant,
                         _rules(episode, step - 1 + budget))
    handed.settings["handed_over"] = {"step": step, "mismatches": replay.mismatches}
    return handed


def corrections(episode: Episode, states: Sequence[RelabelledState], without_go_to: bool = False,
                each_once: bool = False, each_correction_once: bool = False) -> list[RelabelledState]:
    """The states where the label corrects the agent rather than differing in taste: not two
    thoughts in other words, and not two ways to go on searching (both lines going to places the
    episode has not been to yet, which the expert chooses among by likelihood, not by knowledge).
    Kept: a return to a place seen before, an action the agent walked past, a thought where it acted;
    with `without_go_to` only those whose label is not a `go to` (most such labels send the agent back
    after a wandering prefix, and training on them taught the sparse model to cycle); with
    `each_once` each label only at the first state it corrects (a loop repeats one mistake, and its
    correction at every turn of the loop outweighs every other); with `each_correction_once` each
    correction at its first state by the label's first sentence, what it corrects, whatever plan and
    action follow (a false claim is corrected at every later turn, each time with the places searched
    so far and the agent's next action: different labels, one correction)."""
    kept, given = [], set()
    for state in states:
        seen = {entry.text for entry in episode.entries[: state.step - 1] if entry.text.startswith(GO_TO)}
        label = state.lines[0]
        if state.recorded == label or (is_thought(state.recorded) and is_thought(label)):
            continue
        if state.recorded.startswith(GO_TO) and label.startswith(GO_TO) and not {state.recorded, label} & seen:
            continue
        if without_go_to and label.startswith(GO_TO):
            continue
        key = label.split(". ")[0] if each_correction_once else tuple(state.lines)
        if (each_once or each_correction_once) and key in given:
            continue
        given.add(key)
        kept.append(state)
    return kept


def relabelled_examples(episode: Episode, states: Sequence[RelabelledState], run: str = "") -> list[dict]:
    """One training example per state, in `export`'s format: the episode's messages up to the
    state (its assistant lines marked `"train": false`), then the label's lines."""
    messages = episode_messages(episode)
    common = {"format": DATA_FORMAT, "rhythm": episode.rhythm, "task_type": episode.task_type,
              "game": episode.game_name, "game_sha256": game_digest(episode.game),
              "policy": RELABEL_POLICY, "run": run}
    examples = []
    for state in states:
        context = [dict(m, train=False) if m["role"] == "assistant" else m for m in messages[: 1 + 2 * (state.step - 1)]]
        label = [{"role": "assistant", "content": state.lines[0], "train": True}]
        if len(state.lines) == 2:
            label += [{"role": "user", "content": THOUGHT_REPLY}, {"role": "assistant", "content": state.lines[1], "train": True}]
        examples.append(common | {"messages": context + label, "state_step": state.step,
                                  "recorded": state.recorded, "agreed": state.recorded == state.lines[0]})
    return examples


@dataclass(frozen=True)
class RelabelSummary:
    """What a relabelling wrote: examples, the episodes they came from, and states the expert had no line for."""

    path: Path
    examples: int
    episodes: int
    unlabelled: list[str]
    skipped: list[BadLine] = field(default_factory=list)  # record lines that are not episodes

    def describe(self) -> str:
        """What was written, in one line."""
        return f"wrote {self.examples} examples from {self.episodes} episodes to {self.path}"


def relabel_runs(runs: Sequence[Path], out: Path, exclude: Sequence[str] = DEFAULT_EVAL_SETS,
                 options: RelabelOptions = RelabelOptions()) -> RelabelSummary:
    """Relabel every state of every episode of `runs` (run folders or episode files) into `out`
    (JSON lines of training examples), or as `options` choose: only lost episodes, only the states
    where the label corrects the agent (see `corrections`), a thought after every detour. Refuses
    evaluation games like `export` does."""
    try:
        options.check()
    except OptionsError as exc:
        raise RelabelError(str(exc)) from None
    skipped: list[BadLine] = []
    episodes = [(label, e) for label, eps in load_runs(runs, skipped) for e in in_game_order(eps)
                if not (options.lost_only and e.won)]
    _refuse_leaks([e for _, e in episodes], eval_games(exclude), exclude)
    out.parent.mkdir(parents=True, exist_ok=True)
    written, unlabelled = 0, []
    with out.open("w") as handle:
        for label, episode in episodes:
            try:
                states = relabel_episode(episode, replan_detours=options.replan_detours)
            except RelabelError as exc:  # it names the game
                unlabelled.append(str(exc))
                continue
            if options.corrections_only:
                states = corrections(episode, states, options.without_go_to, options.each_once,
                                     options.each_correction_once)
            for example in relabelled_examples(episode, states, label):
                handle.write(json.dumps(example) + "\n")
                written += 1
    return RelabelSummary(out, written, len(episodes), unlabelled, skipped)
