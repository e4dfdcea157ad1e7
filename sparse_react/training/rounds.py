"""Learning from its own play, in rounds. Round 0 trains a LoRA adapter on the seed data (the
searching expert's won episodes), or copies one already trained on it (`seed_model`); each later
round plays the last round's model on train games, turns what it did into new data, adds it to the
last round's data, trains again and evaluates.

Three arms: `dagger` relabels every state the model reached with the line the relabelling expert
writes there (`relabel_runs`: DAgger's aggregation); `bootstrap` keeps the model's own won episodes
(`export`: the paper's bootstrap); `expert` has the searching expert play the train games instead of
the model and keeps its won episodes (new data where the model's play cannot make any, e.g.
generated games of a kind the seed data lacks). Each round trains either from the base
(`retrain="base"`) or on from the last round's adapter (`"continue"`), on the last round's data with
the new added, or (`replay=N`) on the new data with N examples drawn from the last round's (or,
`replay_data`, from a file of their own: for a seed model whose own data cannot be rebuilt, round 0
then holds no data).

One folder holds everything: `rounds.json` (the settings, as the command line names them; a rerun
with others is refused), `round-K/` with `play/` (the run folder of the games played, K ≥ 1),
`new.jsonl`, `data.jsonl`, `model/` (an adapter and its card) and `eval-SET/` per evaluation set, and
`rounds.md`, the table per round. Every stage is a library call (`sparse_react.training.stages`), printed as
the `sparse-react` command that does the same, in a child process where it loads a model, and
skipped when its output is there: a rerun resumes.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from sparse_react.api import Results, evaluate_with
from sparse_react.errors import UserError
from sparse_react.evaluation import SETTINGS_FILE
from sparse_react.household.catalog import find_games
from sparse_react.lines import is_thought
from sparse_react.options import (
    ModelOptions,
    OptionsError,
    RelabelOptions,
    TrainOptions,
    flags,
    from_flat,
    group,
    option,
    to_flat,
)
from sparse_react.report import COLUMNS, PairedComparison, group_stats, load_runs, markdown_table
from sparse_react.rhythms import get_rhythm
from sparse_react.training.cards import MODEL_CARD, training_seconds
from sparse_react.training.export import ExportSummary, export
from sparse_react.training.relabel import RelabelSummary, relabel_runs
from sparse_react.training.stages import Pipeline, Stage
from sparse_react.trajectory import EPISODES_FILE, read_episodes

ARMS = ("dagger", "bootstrap", "expert")
RETRAIN = ("base", "continue")
SETTINGS = "rounds.json"
# Each round's training: a LoRA adapter, checkpointed every 20 steps.
ROUNDS_TRAINING = TrainOptions(max_steps=120, learning_rate=1e-3, save_steps=20, lora_rank=8)


class RoundsError(UserError, ValueError):
    """Settings no rounds can run with, or a folder made with other settings."""


@dataclass(frozen=True)
class RoundsSettings:
    """What a run of rounds does (see the module docstring): the options of `sparse-react rounds`."""

    rhythm: str = option("sparse", "sparse, dense, im or act.", always=True)
    seed_data: str = option("", "Round 0's training data (the expert's won episodes, `sparse-react export`); may be "
                            "left out with --seed-model.", show_default=False)
    rounds: int = option(2, "Rounds after round 0.", min=0, always=True)
    arm: str = option("dagger", "dagger (the relabelling expert labels every state the model reached), bootstrap "
                      "(the model's own won episodes) or expert (the searching expert's won episodes on the train "
                      "games, e.g. generated ones).")
    retrain: str = option("base", "base (train each round from the base) or continue (from the last round's adapter).")
    train_games: str = option("alfworld:train", "The games the model (the expert arm: the searching expert) plays "
                              "each round.")
    train_limit: int | None = option(None, "Only the first N train games (after the task types and the filter).",
                                     min=1)
    train_task_types: str | None = option(None, "Comma-separated task types of the train games.")
    train_filter: str | None = option(None, "Only train games whose name matches this regular expression (as `eval "
                                      "--filter`); `{round}` in it becomes the round's number, so each round can "
                                      "play other games.")
    eval_sets: tuple[str, ...] = option(("valid_unseen",), "Comma-separated evaluation sets.")
    eval_limit: int | None = option(None, "Only the first N games of each evaluation set.", min=1)
    max_steps: int = option(50, "Step budget of every episode played.")
    batch: int = option(16, "Episodes decided together when playing.", min=1)
    seed_model: str | None = option(None, "Round 0's model, already trained on the seed data (e.g. a shipped "
                                    "adapter): copied instead of trained.")
    replay: int | None = option(None, "Train each round on its new data and this many examples drawn (a fixed draw) "
                                "from the last round's data, instead of on all of both.", min=0)
    replay_data: str | None = option(None, "Draw the --replay examples from this file instead of the last round's "
                                     "data (e.g. for a seed model whose own data cannot be rebuilt; what that data "
                                     "taught, such as an earlier round's corrections, is then not trained on again: "
                                     "give it as --seed-data instead to keep it).")
    relabel: RelabelOptions = group(RelabelOptions(), panel="Relabelling (the dagger arm)")
    train: TrainOptions = group(ROUNDS_TRAINING, panel="Training (each round)", rename={"max_steps": "train_steps"})

    def check(self) -> None:
        """RoundsError (or RhythmError) naming what no rounds can run with."""
        get_rhythm(self.rhythm)
        if self.arm not in ARMS:
            raise RoundsError(f"unknown arm {self.arm!r}; one of {', '.join(ARMS)}")
        if self.retrain not in RETRAIN:
            raise RoundsError(f"unknown retrain {self.retrain!r}; one of {', '.join(RETRAIN)}")
        if self.relabel != RelabelOptions() and self.arm != "dagger":
            changed = [name for name, value in to_flat(self.relabel).items() if value]
            raise RoundsError(f"{', '.join(changed)}: options of how the dagger arm relabels; the {self.arm} "
                              "arm relabels nothing")
        try:
            self.relabel.check()
        except OptionsError as exc:
            raise RoundsError(str(exc)) from None
        if self.train.lora_rank < 1:
            raise RoundsError("each round trains a LoRA adapter: lora_rank must be 1 or more")
        if self.replay is not None and self.replay < 0:
            raise RoundsError(f"replay must be 0 or more examples, not {self.replay}")
        if self.rounds < 0:
            raise RoundsError(f"rounds must be 0 or more, not {self.rounds}")
        if self.replay_data is not None and self.replay is None:
            raise RoundsError(f"replay data {self.replay_data} is what --replay N draws from: give N")
        if self.replay_data is not None and not Path(self.replay_data).is_file():
            raise RoundsError(f"replay data {self.replay_data} not found")
        if not self.seed_data and not self.seed_model:
            raise RoundsError("give the seed data (--seed-data), or a seed model already trained (--seed-model)")
        if self.seed_data and not Path(self.seed_data).is_file():
            raise RoundsError(f"seed data {self.seed_data} not found: export the expert's won episodes first "
                              f"(`sparse-react export RUN --rhythm {self.rhythm} --out DATA.jsonl`)")
        if self.seed_model:
            card = Path(self.seed_model) / MODEL_CARD
            if not card.is_file():
                raise RoundsError(f"seed model {self.seed_model} has no {MODEL_CARD}: give a model folder that "
                                  f"`sparse-react finetune` wrote")
            if not self.seed_data:  # round 0 holds no data: each round trains on its new data and the replay draw
                return
            made = json.loads(card.read_text())
            data = Path(self.seed_data).read_bytes()
            # Cards older than export's game order hold the sha256 of episodes in the order workers
            # finished them; the same examples in another order have the same count and size.
            same = made.get("data_sha256") == hashlib.sha256(data).hexdigest() or (
                made.get("examples") == len(data.splitlines()) and made.get("data_bytes") == len(data))
            if not same:
                raise RoundsError(f"seed model {self.seed_model} was trained on other data than {self.seed_data} "
                                  f"(its card: {made.get('examples')} examples, {made.get('data_bytes')} bytes, "
                                  f"sha256 {made.get('data_sha256')}); rebuild the seed data with the "
                                  f"commands in its card, or drop --seed-model")


def read_settings(out: Path) -> RoundsSettings:
    """The settings a rounds folder was made with (its `rounds.json`); a setting it does not name (one
    added since) is at its default."""
    path = out / SETTINGS
    if not path.is_file():
        raise RoundsError(f"{out} holds no {SETTINGS}: not a folder `sparse-react rounds` made")
    try:
        return from_flat(RoundsSettings, json.loads(path.read_text()))
    except OptionsError as exc:
        raise RoundsError(f"{path}: {exc}") from None


def seed_rounds(settings: RoundsSettings) -> Path | None:
    """The rounds folder the seed model is a round of (its `round-K/model`), if it is one."""
    if not settings.seed_model:
        return None
    model = Path(settings.seed_model)
    folder, is_round = model.parent.parent, model.name == "model" and model.parent.name.startswith("round-")
    return folder if is_round and (folder / SETTINGS).is_file() else None


def rounds_command(settings: RoundsSettings, out: Path) -> str:
    """The `sparse-react rounds` command line that makes (or resumes) `out` with these settings."""
    return "sparse-react " + shlex.join(["rounds", *flags(settings), "--out", str(out)])


def play_stage(settings: RoundsSettings, out: Path, k: int) -> Stage:
    """Round k's play: the last round's model (the expert arm: the searching expert) on the train games."""
    last = out / f"round-{k - 1}" / "model"
    player = ModelOptions(policy="search-expert") if settings.arm == "expert" else ModelOptions(model=str(last))
    selection = {"limit": settings.train_limit, "task_types": settings.train_task_types,
                 "filter": settings.train_filter.replace("{round}", str(k)) if settings.train_filter else None}
    return Stage("eval", evaluate_with, options={
        "games": settings.train_games, **{name: v for name, v in selection.items() if v}, "model": player,
        "rhythms": settings.rhythm, "max_steps": settings.max_steps, "batch": settings.batch,
        "out": out / f"round-{k}" / "play"}, isolated=player.loads_model, summary=Results.table)


def new_data_stage(settings: RoundsSettings, out: Path, k: int) -> Stage:
    """Round k's new data from its play: relabelled (dagger) or its won episodes."""
    folder = out / f"round-{k}"
    if settings.arm == "dagger":
        return Stage("relabel", relabel_runs, ([folder / "play"],),
                     {"options": settings.relabel, "out": folder / "new.jsonl"}, summary=RelabelSummary.describe)
    return Stage("export", export, ([folder / "play"],), {"rhythm": settings.rhythm, "out": folder / "new.jsonl"},
                 summary=ExportSummary.describe)


def train_stage(settings: RoundsSettings, out: Path, k: int) -> Stage:
    """Round k's training on its data (with `retrain="continue"`, on from the last round's adapter)."""
    from sparse_react.training.finetune import finetune  # torch, which only the child process that trains needs

    folder = out / f"round-{k}"
    start = {"init_adapter": out / f"round-{k - 1}" / "model"} if k and settings.retrain == "continue" else {}
    return Stage("finetune", finetune, options={"data": folder / "data.jsonl", "out": folder / "model",
                                                "options": settings.train, **start}, isolated=True)


def eval_stage(settings: RoundsSettings, out: Path, k: int, games: str) -> Stage:
    """Round k's model on one evaluation set."""
    folder = out / f"round-{k}"
    return Stage("eval", evaluate_with, options={
        "games": games, "model": ModelOptions(model=str(folder / "model")), "rhythms": settings.rhythm,
        "max_steps": settings.max_steps, "batch": settings.batch,
        **({"limit": settings.eval_limit} if settings.eval_limit else {}), "out": eval_run(folder, games)},
        isolated=True, summary=Results.table)


def run_rounds(settings: RoundsSettings, out: Path) -> Path:
    """Run (or resume) every round into `out`; returns the path of the table `rounds.md`."""
    settings.check()
    _open(out, settings)
    pipeline = Pipeline()
    for k in range(settings.rounds + 1):
        folder = out / f"round-{k}"
        folder.mkdir(exist_ok=True)
        data = folder / "data.jsonl"
        if k == 0:
            if settings.seed_data:
                _write_once(data, Path(settings.seed_data).read_bytes())
        else:
            play, new = folder / "play", folder / "new.jsonl"
            pipeline.run(play_stage(settings, out, k), done=data.is_file())
            if settings.arm != "dagger" and not data.is_file() and not any(e.won for e in read_episodes(play / EPISODES_FILE)):
                new.write_text("")  # nothing won, nothing to keep: export would refuse to write nothing
            else:
                pipeline.run(new_data_stage(settings, out, k), done=data.is_file())
            if not data.is_file():  # a resumed round reads and draws nothing again
                earlier = Path(settings.replay_data) if settings.replay_data else out / f"round-{k - 1}" / "data.jsonl"
                _write_once(data, _aggregate(earlier, new, settings.replay))
        model = folder / "model"
        if k == 0 and settings.seed_model:
            _copy_once(Path(settings.seed_model), model)
        else:
            pipeline.run(train_stage(settings, out, k), done=(model / MODEL_CARD).is_file())
        for games in settings.eval_sets:
            finished = _finished(eval_run(folder, games), games, settings.eval_limit)
            pipeline.run(eval_stage(settings, out, k, games), done=finished)
    path = out / "rounds.md"
    path.write_text(rounds_markdown(out, settings, pipeline.commands))
    return path


def _aggregate(last: Path, new: Path, replay: int | None) -> bytes:
    """A round's data: the last round's with the new added, or the new with `replay` of the last
    round's examples drawn at random (a fixed draw, so a rerun writes the same bytes). A round 0
    without data (a seed model alone) adds nothing."""
    before = last.read_bytes() if last.is_file() else b""
    if replay is None:
        return before + new.read_bytes()
    earlier = before.splitlines(keepends=True)
    random.Random(0).shuffle(earlier)
    return new.read_bytes() + b"".join(earlier[:replay])


def _open(out: Path, settings: RoundsSettings) -> None:
    out.mkdir(parents=True, exist_ok=True)
    wanted = to_flat(settings)
    if (out / SETTINGS).exists():
        stored = to_flat(read_settings(out))
        changed = sorted(k for k in wanted if k != "rounds" and stored[k] != wanted[k])
        if changed:
            raise RoundsError(f"{out} holds rounds with other settings ({', '.join(changed)}); use another --out")
    # more rounds may be asked for later
    (out / SETTINGS).write_text(json.dumps(wanted, indent=1) + "\n")


def _write_once(path: Path, content: bytes) -> None:
    """Write `path` whole or not at all (a killed run leaves no half file that would count as done)."""
    if not path.exists():
        partial = path.with_suffix(".partial")
        partial.write_bytes(content)
        os.replace(partial, path)


def _copy_once(source: Path, path: Path) -> None:
    """Copy a model folder whole or not at all, like `_write_once`."""
    if not path.exists():
        partial = path.with_name(path.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(source, partial)
        os.replace(partial, path)


def eval_run(folder: Path, games: str) -> Path:
    """A round's evaluation run folder for one set of games."""
    return folder / f"eval-{games.replace(':', '-')}"


def _finished(run: Path, games: str, limit: int | None) -> bool:
    """Whether an evaluation run folder holds all its episodes (an unfinished one resumes when run again)."""
    if not (run / SETTINGS_FILE).is_file() or not (run / EPISODES_FILE).is_file():
        return False
    wanted = len(find_games(games)[:limit])
    return len((run / EPISODES_FILE).read_text().splitlines()) >= wanted


def rounds_markdown(out: Path, settings: RoundsSettings, commands: Sequence[str]) -> str:
    """The table per round: data, training, and success per evaluation set and task type."""
    rows, pairs = [], []
    won: dict[tuple[int, str], dict[str, bool]] = {}
    for k in range(settings.rounds + 1):
        folder = out / f"round-{k}"
        card = json.loads((folder / "model" / MODEL_CARD).read_text())
        new = folder / "new.jsonl"
        packed = card.get("rows", card["examples"]) != card["examples"]
        source = new if new.is_file() else folder / "data.jsonl"  # round 0 without seed data has neither
        trained = [str(k), f"{card['examples']}" + (f" ({card['rows']} rows)" if packed else ""),
                   str(len(new.read_text().splitlines())) if new.is_file() else "seed",
                   f"{thought_share(source):.0%}" if source.is_file() else "—",
                   f"{training_seconds(card) / 60:.1f}", f"{card['last_loss']}"]
        if not settings.eval_sets:  # evaluated apart, if at all: the round's data and training still get a row
            rows.append([*trained, "—", *("—" for _ in COLUMNS), "—"])
        for games in settings.eval_sets:
            run = eval_run(folder, games)
            ((label, episodes),) = load_runs([run])
            stats = group_stats(label, label, episodes)
            rows.append([*trained, games, *(f"{stats.wins[c]}/{stats.games[c]}" for c in COLUMNS),
                         f"{stats.thought_density:.0%}"])
            won[k, games] = {e.game_name: e.won for e in episodes}
            if k:
                c = PairedComparison.of(f"round {k - 1}", f"round {k}", won[k - 1, games], won[k, games])
                pairs.append([f"{c.first} → {c.second}", games, str(c.games), str(c.both_won), str(c.only_first),
                              str(c.only_second), f"{c.p_value:.2g}"])
    header = ["round", "examples", "new", "thoughts in new", "training (min)", "last loss", "set", *COLUMNS,
              "thoughts played"]
    pair_header = ["rounds", "set", "games", "both won", "only the earlier won", "only the later won",
                   "p (exact McNemar)"]
    origin = seed_rounds(settings)
    holder = f"a round of {origin}: its rounds.md" if origin else "its card"
    return "\n\n".join([
        f"# Rounds: {settings.arm}, {settings.rhythm} rhythm, "
        + ("retrained from the base" if settings.retrain == "base" else "trained on from the last round's adapter"),
        *([f"Round 0's model is {settings.seed_model}, copied ({holder} holds the commands that made it)."]
          if settings.seed_model else []),
        markdown_table(header, rows),
        "Thoughts in new: the share of the trained lines of the round's new data (round 0: the seed data, if given) "
        "that are thoughts. Thoughts played: their share of the lines of the evaluation's episodes (mean per episode).",
        *(["Game by game, each round against the one before:", markdown_table(pair_header, pairs)] if pairs else []),
        "Success is the game's `won`. The command, and the steps it ran (a rerun skips what is done):",
        "```bash\n" + "\n".join([rounds_command(settings, out), "# which ran:", *commands]) + "\n```"]) + "\n"


def thought_share(data: Path) -> float:
    """The share of the trained assistant lines of a data file (`export` or `relabel` format) that are thoughts."""
    trained = [m["content"] for line in data.read_text().splitlines() for m in json.loads(line)["messages"]
               if m["role"] == "assistant" and m.get("train", True)]
    return sum(map(is_thought, trained)) / len(trained) if trained else 0.0
