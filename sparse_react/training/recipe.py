"""`sparse-react train`: the recipe behind the shipped adapters as one resumable command, from a base
causal LM to an adapter folder whose card's command is that one command.

Stages (each a library call printed as its `sparse-react` command, skipped when its output is there;
`sparse_react.training.stages`):

0. the searching expert plays the expert games (ALFWorld train games with ALFWORLD_DATA, the dev
   split left out, and the bundled train games; generated games otherwise), its won episodes are
   exported, a LoRA adapter (rank 8) is trained on them from the base (lr 1e-3, 120 steps), and the
   adapter plays the dev split;
1. up to `expert_rounds` expert rounds: games generated for the task types where the kept adapter is
   weak on the dev split, the searching expert's won episodes on them with a fixed draw of the kept
   adapter's data replayed, 60 steps on from it (lr 5e-4), then the dev split again. A round is kept
   if it wins more dev games than the adapter it went on from; otherwise the recipe stops there.
2. `correction_rounds` (default none) correction rounds, kept or not the same way: the kept adapter
   plays games generated for its weak types, the relabelling expert's corrections of its play (each
   once, without `go to`) are added to its data, 25 steps on.

Every choice (go on, which task types, which adapter to keep) reads the dev split alone
(`sparse_react.training.dev_split`). The test sets are played at the end, once, on the final
adapter, only when `test_sets` names them. `hours` scales every stage's steps
(`sparse_react.training.budget`).

One folder holds it all: `recipe.json` (the settings; a rerun with others is refused), `games/`,
`stage-K/`, `adapter/` (the result), `test-SET/` and `recipe.md` (dev and test tables).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from sparse_react.api import Results, evaluate_with
from sparse_react.errors import UserError
from sparse_react.household.catalog import find_games
from sparse_react.household.tasks import TaskType
from sparse_react.options import (
    ModelOptions,
    OptionsError,
    RelabelOptions,
    TrainOptions,
    flags,
    from_flat,
    option,
    to_flat,
)
from sparse_react.report import group_stats, markdown_table
from sparse_react.rhythms import get_rhythm
from sparse_react.training.budget import Rates, check_base, duration, scaled_steps
from sparse_react.training.cards import MODEL_CARD
from sparse_react.training.dev_split import (
    DEV_COUNT,
    DEV_SEED,
    TRAIN_SEED,
    alfworld_dev_games,
    alfworld_train_games,
    generate_into,
    has_alfworld,
    link_games,
)
from sparse_react.training.export import ExportSummary, export
from sparse_react.training.rounds import RoundsSettings, run_rounds
from sparse_react.training.stages import Pipeline, Stage
from sparse_react.trajectory import EPISODES_FILE, read_episodes

SETTINGS = "recipe.json"
FIRST_LR, ROUND_LR = 1e-3, 5e-4  # the shipped chain's: its first stage, and every round after
CORRECTION_SEED = TRAIN_SEED + 20  # generated games of correction round k: CORRECTION_SEED + k
MAX_ROUNDS = 19  # expert round k's games come from TRAIN_SEED + k, below CORRECTION_SEED
CORRECTIONS = RelabelOptions(corrections_only=True, without_go_to=True, each_once=True)


class RecipeError(UserError, ValueError):
    """Settings the recipe cannot run with, or a folder another recipe made."""


@dataclass(frozen=True)
class RecipeSettings:
    """The options of `sparse-react train` (and `train_agent`); the module docstring says what each stage does."""

    base: str | None = option(None, "Base causal LM: a local model folder or .gguf file (default: the embedded "
                              "SmolLM2-135M-Instruct).")
    rhythm: str = option("sparse", "The rhythm the agent learns: sparse, dense, im or act.", always=True)
    hours: float | None = option(None, "Budget: every stage's optimizer steps scaled to fit, from measured seconds a "
                                 "step and a game (default: the measured recipe's steps).")
    expert_games: int = option(960, "Games the searching expert plays for the first stage: ALFWorld train games (an "
                               "equal share of each task type, none of the dev split, and the bundled train games) "
                               "with ALFWORLD_DATA, else generated ones.", min=6)
    train_steps: int = option(120, "The first stage's optimizer steps (before --hours scales them).", min=1)
    expert_rounds: int = option(3, "Expert rounds at most, each kept only if it wins more dev games.", min=0)
    round_games: int = option(120, "Games generated for each round, of the task types weak on the dev split.", min=1)
    round_steps: int = option(60, "Each expert round's optimizer steps (before --hours).", min=1)
    replay: int = option(360, "Examples of the kept adapter's data replayed in each expert round (a fixed draw).",
                         min=0)
    correction_rounds: int = option(0, "Correction rounds after the expert rounds (the model's own play, the "
                                    "relabelling expert's corrections added to its data); off by default: measured, "
                                    "they moved no set beyond chance.", min=0)
    correction_steps: int = option(25, "Each correction round's optimizer steps (before --hours).", min=1)
    weak_below: float = option(0.9, "A task type is weak, and gets a round's games, below this dev success.")
    dev_limit: int | None = option(None, f"Only the first N games of the dev split (of {DEV_COUNT}; balanced by task "
                                   "type).", min=6)
    max_steps: int = option(50, "Step budget of every episode played.", min=1)
    batch: int = option(16, "Episodes decided together when a model plays.", min=1)
    test_sets: tuple[str, ...] = option((), "Test sets played once, on the final adapter (e.g. "
                                        "valid_unseen,alfworld:valid_seen); none by default. May be added on a rerun.")

    def check(self) -> None:
        """RecipeError (or RhythmError, BaseError) naming what the recipe cannot run with."""
        get_rhythm(self.rhythm)
        check_base(self.base)
        if self.expert_rounds > MAX_ROUNDS or self.correction_rounds > MAX_ROUNDS:
            raise RecipeError(f"at most {MAX_ROUNDS} expert rounds and {MAX_ROUNDS} correction rounds")
        if not 0 < self.weak_below <= 1:
            raise RecipeError(f"weak_below is a share of dev games won, in (0, 1], not {self.weak_below}")
        if self.hours is not None and self.hours <= 0:
            raise RecipeError(f"--hours must be above 0, not {self.hours:g}")
        for name in self.test_sets:
            find_games(name)  # GameSetError naming it, before anything is written

    @property
    def dev_games(self) -> int:
        return self.dev_limit or DEV_COUNT

    def steps(self) -> list[int]:
        """Optimizer steps of stage 0, each expert round and each correction round, in the budget."""
        nominal = [self.train_steps, *[self.round_steps] * self.expert_rounds,
                   *[self.correction_steps] * self.correction_rounds]
        played = self.dev_games * (1 + self.expert_rounds + self.correction_rounds) + \
            self.round_games * self.correction_rounds
        return scaled_steps(nominal, played, self.hours, Rates.estimate(self.base))

    def training(self, steps: int, learning_rate: float) -> TrainOptions:
        """One stage's training: a rank-8 LoRA adapter on the base, as the shipped chain trained."""
        return TrainOptions(base=self.base, max_steps=steps, learning_rate=learning_rate, save_steps=20, lora_rank=8)


def recipe_command(settings: RecipeSettings, out: Path) -> str:
    """The `sparse-react train` command that makes (or resumes) `out` with these settings."""
    return "sparse-react " + shlex.join(["train", *flags(settings), "--out", str(out)])


@dataclass
class Progress:
    """Prints each stage as it starts: which, of how many at most, and the time left at most."""

    total: int
    rates: Rates
    done: int = 0
    started: float = field(default_factory=time.perf_counter)

    def stage(self, what: str, seconds: float, left: float) -> None:
        self.done += 1
        print(f"\n== train: stage {self.done}/{self.total} at most, {what}: about {duration(seconds)} "
              f"(the recipe: {duration(time.perf_counter() - self.started)} so far, at most "
              f"{duration(left)} to go)", flush=True)


def train_agent(settings: RecipeSettings, out: str | Path) -> Path:
    """Run (or resume) the recipe into `out`; returns the adapter folder `out/adapter`. Bad settings,
    a base that is not a causal LM, a budget too small for one step or a folder another recipe
    made raise a UserError before anything is written."""
    out = Path(out)
    settings.check()
    steps = settings.steps()
    source = "alfworld" if has_alfworld() else "generated"
    _open(out, settings, source)
    rates = Rates.estimate(settings.base)
    rounds = settings.expert_rounds + settings.correction_rounds
    progress = Progress(4 + 2 * rounds + len(settings.test_sets), rates)
    pipeline = Pipeline()

    def left(k: int) -> float:  # the steps and dev games from stage k on
        return sum(steps[k:]) * rates.step + (len(steps) - k) * settings.dev_games * rates.game

    progress.stage("the games (dev split, expert games)", 0, left(0))
    dev, expert_games = _games(settings, out, source, pipeline)
    stage0 = out / "stage-0"
    progress.stage(f"the searching expert's data ({settings.expert_games} games)", settings.expert_games * 0.3,
                   left(0))
    data = _expert_data(settings, out, source, expert_games, pipeline)
    progress.stage(f"stage-0: {steps[0]} steps from the base", steps[0] * rates.step, left(0))
    from sparse_react.training.finetune import finetune  # torch: only the child process that trains needs it

    pipeline.run(Stage("finetune", finetune, options={
        "data": data, "out": stage0 / "model", "options": settings.training(steps[0], FIRST_LR)}, isolated=True),
        done=(stage0 / "model" / MODEL_CARD).is_file())
    rates = _measured(rates, stage0 / "model")
    progress.stage("stage-0 on the dev split", settings.dev_games * rates.game, left(0) - steps[0] * rates.step)
    _dev_eval(settings, stage0 / "model", stage0 / "dev", dev, pipeline)
    kept = _Kept(stage0, stage0 / "model", data)
    plan = [("expert", k) for k in range(1, settings.expert_rounds + 1)] + \
        [("corrections", k) for k in range(1, settings.correction_rounds + 1)]
    stopped: set[str] = set()  # a kind of round stops at its first round the dev split does not take
    for index, (kind, k) in enumerate(plan, start=1):
        if kind in stopped:
            continue
        weak = _weak_types(kept, settings.weak_below)
        if not weak:
            print(f"no task type below {settings.weak_below:.0%} on the dev split: no {kind} round", flush=True)
            stopped.add(kind)
            continue
        name = f"stage-{index}"
        progress.stage(f"{name}: an {kind} round on {', '.join(weak)} ({steps[index]} step{'s' * (steps[index] > 1)})",
                       steps[index] * rates.step, left(index))
        model, round_data = _round(settings, out / name, kind, k, weak, kept, steps[index], pipeline)
        progress.stage(f"{name} on the dev split", settings.dev_games * rates.game, left(index + 1))
        _dev_eval(settings, model, out / name / "dev", dev, pipeline)
        won, before = _wins(out / name / "dev"), _wins(kept.folder / "dev")
        if won <= before:
            print(f"{name} won {won} dev games, {kept.folder.name} {before}: {kept.folder.name} is kept, and the "
                  f"{kind} rounds stop", flush=True)
            stopped.add(kind)
            continue
        kept = _Kept(out / name, model, round_data)
    adapter = _ship(settings, out, kept)
    for games in settings.test_sets:
        progress.stage(f"the test set {games}, played once", len(find_games(games)) * rates.game, 0)
        _test(settings, adapter, out, games, pipeline)
    (out / "recipe.md").write_text(recipe_markdown(settings, out, kept, pipeline.commands))
    print(f"\nthe adapter: {adapter} (kept: {kept.folder.name}); the tables: {out / 'recipe.md'}", flush=True)
    return adapter


@dataclass(frozen=True)
class _Kept:
    """The adapter kept so far: its stage folder, model and training data."""

    folder: Path
    model: Path
    data: Path


def _open(out: Path, settings: RecipeSettings, source: str) -> None:
    """Refuse a folder made with other settings (or not by this recipe); write `recipe.json`."""
    wanted = {"settings": to_flat(settings), "games": source}
    path = out / SETTINGS
    if path.is_file():
        stored = json.loads(path.read_text())
        try:
            before = to_flat(from_flat(RecipeSettings, stored.get("settings", {})))
        except OptionsError as exc:
            raise RecipeError(f"{path}: {exc}") from None
        changed = [f"{k} {before[k]!r} there, {v!r} here" for k, v in wanted["settings"].items()
                   if k != "test_sets" and before[k] != v]
        if stored.get("games") != source:
            changed.append(f"games {stored.get('games')} there, {source} here (ALFWORLD_DATA)")
        if changed:
            raise RecipeError(f"{out} holds another recipe's settings ({'; '.join(changed)}): use another --out, "
                              f"or the same settings to resume")
    elif out.exists() and any(out.iterdir()):
        raise RecipeError(f"{out} is not empty and holds no {SETTINGS}: not a folder `sparse-react train` made")
    out.mkdir(parents=True, exist_ok=True)
    stored_json = {**wanted, "settings": {**wanted["settings"], "test_sets": list(settings.test_sets)}}
    path.write_text(json.dumps(stored_json, indent=1) + "\n")


def _games(settings: RecipeSettings, out: Path, source: str, pipeline: Pipeline) -> tuple[Path, Path]:
    """The dev split's game folder and the expert games' folder (ALFWorld's as links, else generated)."""
    games = out / "games"
    if source == "alfworld":
        dev = link_games(alfworld_dev_games(settings.dev_limit), games / "dev")
        expert = link_games(alfworld_train_games(max(1, settings.expert_games // 6)), games / "expert")
        return dev, expert
    dev, expert = games / "dev", games / "expert"
    pipeline.run(_generate(dev, DEV_SEED, settings.dev_games), done=dev.is_dir())
    pipeline.run(_generate(expert, TRAIN_SEED, settings.expert_games), done=expert.is_dir())
    return dev, expert


def _generate(folder: Path, seed: int, count: int, task_types: list[str] | None = None) -> Stage:
    types = {"task_types": ",".join(task_types)} if task_types else {}
    return Stage("games", _games_generate, ("generate",), {"out": folder, "seed": seed, "count": count,
                                                          "split": "train", **types})


def _games_generate(action: str, **options) -> Path:
    """`generate_into` as the stage `sparse-react games generate` calls it (`action` is the subcommand's word)."""
    return generate_into(**options)


def _expert_data(settings: RecipeSettings, out: Path, source: str, games: Path, pipeline: Pipeline) -> Path:
    """Stage 0's data: the searching expert's won episodes on the expert games (and the bundled train games)."""
    folder = out / "stage-0"
    data = folder / "data.jsonl"
    sets = [(games, folder / "expert")] + ([("train", folder / "expert-bundled")] if source == "alfworld" else [])
    for games_set, run in sets:
        pipeline.run(Stage("eval", evaluate_with, options={
            "games": games_set, "model": ModelOptions(policy="search-expert"), "rhythms": settings.rhythm,
            "max_steps": settings.max_steps, "out": run}, summary=Results.table), done=data.is_file())
    pipeline.run(Stage("export", export, ([run for _, run in sets],), {"rhythm": settings.rhythm, "out": data},
                       summary=ExportSummary.describe), done=data.is_file())
    return data


def _dev_eval(settings: RecipeSettings, model: Path, run: Path, dev: Path, pipeline: Pipeline) -> None:
    wanted = len(find_games(dev))
    done = (run / EPISODES_FILE).is_file() and len(read_episodes(run / EPISODES_FILE)) >= wanted
    pipeline.run(Stage("eval", evaluate_with, options={
        "games": dev, "model": ModelOptions(model=str(model)), "rhythms": settings.rhythm,
        "max_steps": settings.max_steps, "batch": settings.batch, "out": run}, isolated=True, summary=Results.table),
        done=done)


def _round(settings: RecipeSettings, folder: Path, kind: str, k: int, weak: list[str], kept: _Kept, steps: int,
           pipeline: Pipeline) -> tuple[Path, Path]:
    """One expert or correction round from the kept adapter, as `sparse-react rounds` runs it; its model and data."""
    seed = (TRAIN_SEED if kind == "expert" else CORRECTION_SEED) + k
    games = folder / "games"
    folder.mkdir(parents=True, exist_ok=True)
    pipeline.run(_generate(games, seed, settings.round_games, weak), done=games.is_dir())
    arm = {"arm": "expert", "replay": settings.replay} if kind == "expert" else {"arm": "dagger", "relabel": CORRECTIONS}
    rounds = RoundsSettings(rhythm=settings.rhythm, seed_data=str(kept.data), seed_model=str(kept.model), rounds=1,
                            retrain="continue", train_games=str(games), eval_sets=(), max_steps=settings.max_steps,
                            batch=settings.batch, train=settings.training(steps, ROUND_LR), **arm)
    model = folder / "round-1" / "model"
    pipeline.run(Stage("rounds", run_rounds, options={"settings": rounds, "out": folder}),
                 done=(model / MODEL_CARD).is_file())
    return model, folder / "round-1" / "data.jsonl"


def _measured(rates: Rates, model: Path) -> Rates:
    """The rates as this machine ran stage 0's steps: a machine N times slower than the measurements
    (or shared with other work) plays N times slower too."""
    card = json.loads((model / MODEL_CARD).read_text())
    seconds = card.get("seconds") or card.get("seconds_this_run")
    if not seconds or not card.get("steps"):
        return rates
    step = seconds / card["steps"]
    return Rates(step, rates.game * step / rates.step)


def _stats(run: Path):
    return group_stats(run.name, run.name, read_episodes(run / EPISODES_FILE))


def _wins(run: Path) -> int:
    return _stats(run).wins["All"]


def _weak_types(kept: _Kept, below: float) -> list[str]:
    """The task types the kept adapter won less than `below` of on the dev split (of those the split holds)."""
    stats = _stats(kept.folder / "dev")
    return [t.value for t in TaskType if stats.games[t.column] and stats.wins[t.column] < below * stats.games[t.column]]


def _ship(settings: RecipeSettings, out: Path, kept: _Kept) -> Path:
    """`out/adapter`: the kept adapter, its card's commands the one `sparse-react train` command."""
    adapter = out / "adapter"
    if not (adapter / MODEL_CARD).is_file():
        partial = out / "adapter.partial"
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(kept.model, partial, ignore=shutil.ignore_patterns("checkpoints"))
        card = json.loads((partial / MODEL_CARD).read_text())
        card["commands"] = [recipe_command(replace(settings, test_sets=()), out)]
        card["recipe"] = {"kept": kept.folder.name, "dev": _dev_results(out),
                          "dev_split": "sparse_react/training/dev_split.py"}
        (partial / MODEL_CARD).write_text(json.dumps(card, indent=1) + "\n")
        os.replace(partial, adapter)
    return adapter


def _dev_results(out: Path) -> dict[str, dict[str, list[int]]]:
    results = {}
    for run in sorted(out.glob("stage-*/dev"), key=lambda p: int(p.parent.name.split("-")[1])):
        stats = _stats(run)
        results[run.parent.name] = {c: [stats.wins[c], stats.games[c]] for c in stats.wins if stats.games[c]}
    return results


def run_of_test_set(out: Path, games: str) -> Path:
    """A test set's run folder."""
    return out / f"test-{games.replace(':', '-')}"


def _test(settings: RecipeSettings, adapter: Path, out: Path, games: str, pipeline: Pipeline) -> None:
    run = run_of_test_set(out, games)
    done = (run / EPISODES_FILE).is_file() and len(read_episodes(run / EPISODES_FILE)) >= len(find_games(games))
    pipeline.run(Stage("eval", evaluate_with, options={
        "games": games, "model": ModelOptions(model=str(adapter)), "rhythms": settings.rhythm,
        "max_steps": settings.max_steps, "batch": settings.batch, "out": run}, isolated=True, summary=Results.table),
        done=done)


def recipe_markdown(settings: RecipeSettings, out: Path, kept: _Kept, commands: list[str]) -> str:
    """The dev split's table per stage (the kept one marked) and the test sets' table, each said as such."""
    columns = [t.column for t in TaskType] + ["All"]
    dev_rows = []
    for stage, cells in _dev_results(out).items():
        mark = " (kept)" if stage == kept.folder.name else ""
        dev_rows.append([stage + mark, *(f"{cells[c][0]}/{cells[c][1]}" if c in cells else "–" for c in columns)])
    parts = [f"# sparse-react train: {settings.rhythm}", "Dev split (every choice of the recipe was made on it):",
             markdown_table(["stage", *columns], dev_rows)]
    tests = [(games, run_of_test_set(out, games)) for games in settings.test_sets
             if (run_of_test_set(out, games) / EPISODES_FILE).is_file()]
    if tests:
        rows = [[games, *(f"{s.wins[c]}/{s.games[c]}" for c in columns)] for games, s in
                ((games, _stats(run)) for games, run in tests)]
        parts += ["Test sets, played once on the final adapter (no choice was made on them):",
                  markdown_table(["set", *columns], rows)]
    parts.append("```bash\n" + "\n".join([recipe_command(settings, out), "# which ran:", *commands]) + "\n```")
    return "\n\n".join(parts) + "\n"

