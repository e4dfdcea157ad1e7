"""The `sparse-react` command line."""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence, Tuple

import typer

from sparse_react.cli_options import with_options
from sparse_react.errors import UserError
from sparse_react.household.catalog import BUNDLED_SPLITS, GameSetError, count_by_task, find_games
from sparse_react.household.tasks import TaskType
from sparse_react.lines import NOTHING_HAPPENS, is_thought
from sparse_react.options import DEFAULT_LORA_RANK, ModelOptions, RelabelOptions, TrainOptions
from sparse_react.training.recipe import RecipeSettings
from sparse_react.training.rounds import RoundsSettings
from sparse_react.trajectory import RecordError

app = typer.Typer(help="ReAct agents on ALFWorld-style household games.", pretty_exceptions_enable=False,
                  no_args_is_help=True, add_completion=False)
games_app = typer.Typer(help="List, show and generate household games.", no_args_is_help=True)
app.add_typer(games_app, name="games")
cache_app = typer.Typer(help="The engine's disk cache of PDDL translations.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")

BUG_REPORT = "this is a bug in sparse_react: please report it with the traceback above"
STEER_ENDPOINT_HELP = ("The OpenAI-compatible server that carries on an episode a served model played (its key, if "
                       "any, from $OPENAI_API_KEY); the endpoint a record names is never contacted.")


@app.callback()
def _options(
    no_disk_cache: bool = typer.Option(False, "--no-disk-cache", help="Neither read nor write the disk cache."),
    plain_engine: bool = typer.Option(False, "--plain-engine", help="Run textworld's plain engine path (no speed-ups)."),
) -> None:
    # Environment variables, so worker processes started later see the same choice.
    if no_disk_cache:
        os.environ["SPARSE_REACT_DISK_CACHE"] = "0"
    if plain_engine:
        os.environ["SPARSE_REACT_PLAIN_ENGINE"] = "1"


@cache_app.command("info")
def cache_info() -> None:
    """Where the disk cache is, whether it is used, and what it holds."""
    from sparse_react.household.disk_cache import DiskCache, disk_cache_enabled, engine_versions
    from sparse_react.household.engine import speedups_verified

    cache = DiskCache()
    entries = cache.entries()
    size = sum(p.stat().st_size for p in entries)
    typer.echo(f"folder:    {cache.folder}\nenabled:   {disk_cache_enabled()}\nspeed-ups: {speedups_verified()}")
    typer.echo(f"entries:   {len(entries)} ({size / 1e6:.1f} MB)\nversions:  {engine_versions()}")


@cache_app.command("clear")
def cache_clear() -> None:
    """Delete every entry of the disk cache."""
    from sparse_react.household.disk_cache import DiskCache

    cache = DiskCache()
    typer.echo(f"removed {cache.clear()} entries from {cache.folder}")


def _games_with_index(game: str, index: int) -> list:
    refs = find_games(game)
    if not 0 <= index < len(refs):
        raise GameSetError(f"index {index} is out of range: {game} holds {len(refs)} games")
    return refs


def _task_types(text: Optional[str]) -> Optional[list[TaskType]]:
    return [TaskType.parse(t) for t in text.split(",")] if text else None


def _sets(exclude: Optional[str], default: Sequence[str]) -> Sequence[str]:
    return [e.strip() for e in exclude.split(",") if e.strip()] if exclude is not None else default


@games_app.command("list")
def games_list(sets: list[str] = typer.Argument(None, help="Game sets (default: the bundled splits).")) -> None:
    """Count the games of each set by task type."""
    names = sets or list(BUNDLED_SPLITS)
    typer.echo("| set | " + " | ".join(t.column for t in TaskType) + " | All |")
    typer.echo("|---" * (len(TaskType) + 2) + "|")
    for name in names:
        counts = count_by_task(find_games(name))
        typer.echo(f"| {name} | " + " | ".join(str(n) for n in counts.values()) + f" | {sum(counts.values())} |")


@games_app.command("show")
def games_show(game: str = typer.Argument(..., help="A game file or a game set."),
               index: int = typer.Option(0, help="Which game of the set (sorted by path).")) -> None:
    """Show one game: its task, first observation, admissible commands and solution."""
    from sparse_react.household.env import HouseholdEnv

    refs = _games_with_index(game, index)
    env = HouseholdEnv(refs)
    observation, info = env.reset(options={"game": refs[index]})
    typer.echo(f"game:      {info['game_file']}\ntask type: {info['task_type']}\ntask:      {info['task']}\n")
    typer.echo(observation + "\n")
    typer.echo("admissible: " + ", ".join(info["admissible_commands"]))
    typer.echo("solution:   " + " | ".join(env.expert_plan()))


@games_app.command("generate")
def games_generate(
    out: Path = typer.Option(..., help="Folder to write games into (<task folder>/<trial>/game.json)."),
    seed: int = typer.Option(0, help="Seed: the same seed always gives the same games."),
    count: int = typer.Option(6, min=1, help="How many games (task types taken in turn)."),
    split: str = typer.Option("train", help=f"One of {', '.join(BUNDLED_SPLITS)}: decides rooms and combinations."),
    task_types: Optional[str] = typer.Option(None, help="Comma-separated task types (default: all six)."),
) -> None:
    """Generate solvable games in ALFWorld's format, each with its solution."""
    from sparse_react.household.generate import generate_games, write_game

    if split not in BUNDLED_SPLITS:
        raise GameSetError(f"unknown split {split!r}: one of {', '.join(BUNDLED_SPLITS)}")
    for game in generate_games(seed, count, _task_types(task_types), split=split):
        typer.echo(str(write_game(game, out)))


@app.command()
def play(game: str = typer.Argument(..., help="A game file or a game set."),
         index: int = typer.Option(0, help="Which game of the set."),
         max_steps: int = typer.Option(50, help="Step budget.")) -> None:
    """Play a game yourself: type commands, `admissible` to list them, `quit` to stop."""
    from sparse_react.household.env import make_react_env

    refs = _games_with_index(game, index)
    env = make_react_env(max_steps, games=refs)
    observation, info = env.reset(options={"game": refs[index]})
    typer.echo(observation)
    done = False
    while not done:
        try:
            command = input("> ").strip()
        except (EOFError, KeyboardInterrupt):
            command = "quit"
        if command == "quit":
            typer.echo(f"Stopped after {info['steps']} steps without winning.")
            return
        if command in ("admissible", "?"):
            typer.echo("\n".join(info["admissible_commands"]))
            continue
        if command and not is_thought(command) and command not in info["admissible_commands"]:
            typer.echo(f"({command!r} is not an admissible command: the game will say nothing happens)")
        observation, _, terminated, truncated, info = env.step(command)
        typer.echo(observation)
        done = terminated or truncated
    typer.echo(f"You won in {info['steps']} steps." if info["won"] else f"Out of steps ({max_steps}): not won.")


@app.command()
@with_options(model=ModelOptions)
def run(
    game: str = typer.Argument(..., help="A game file or a game set."),
    index: int = typer.Option(0, help="Which game of the set."),
    rhythm: str = typer.Option("sparse", help="sparse, dense, im or act."),
    model: ModelOptions = ModelOptions(),
    variant: int = typer.Option(0, help="Prompt variant 0-5 (which two examples, in which order)."),
    max_steps: int = typer.Option(50, help="Step budget (thoughts count)."),
    out: Path = typer.Option(Path("runs/run.jsonl"), help="Episode record (JSON lines, appended)."),
) -> None:
    """Play one game with a policy in a rhythm, printing the trajectory as it happens."""
    from sparse_react.agent import LoopRules, run_episode
    from sparse_react.api import load_policy_from
    from sparse_react.household.env import HouseholdEnv
    from sparse_react.rhythms import get_rhythm
    from sparse_react.trajectory import append_episode

    refs = _games_with_index(game, index)
    rule = get_rhythm(rhythm)
    chosen = load_policy_from(model, rhythms=[rule.name])
    env = HouseholdEnv(refs)
    typer.echo(typer.style(f"{refs[index].name} · {rule.name} · {chosen.name}", bold=True))
    episode = run_episode(env, chosen, refs[index], rule, variant, LoopRules(max_steps=max_steps), on_entry=_print_entry)
    append_episode(out, episode)
    verdict = "WON" if episode.won else f"FAILED ({episode.failure.value})"
    typer.echo(typer.style(f"{verdict} in {len(episode.entries)} steps: {len(episode.actions)} actions, "
                           f"{len(episode.thoughts)} thoughts; record appended to {out}", bold=True))
    free = [e for e in episode.actions if e.mode == "free"]
    if free:
        typer.echo(f"freely generated actions the game did not accept: "
                   f"{sum(e.observation == NOTHING_HAPPENS for e in free) / len(free):.0%}")
    if episode.error:
        typer.echo(f"error: {episode.error}", err=True)


def _print_entry(entry) -> None:
    if entry.kind.value == "thought":
        typer.echo(typer.style(f"  think: {entry.text}", fg="cyan", italic=True))
    else:
        typer.echo(typer.style(f"> {entry.text}", bold=True) + f"\n{entry.observation}")


@app.command()
def resume(
    record: Path = typer.Argument(..., help="An episode record file (JSON lines)."),
    episode: int = typer.Option(..., help="Which episode of the file (0-based)."),
    edit: Tuple[int, str] = typer.Option((0, ""), help="STEP THOUGHT: replace the thought at STEP (1-based)."),
    insert: Tuple[int, str] = typer.Option((0, ""), help="STEP THOUGHT: insert a thought before STEP."),
    policy: Optional[str] = typer.Option(None, help="Who carries on (default: the recorded policy)."),
    endpoint: Optional[str] = typer.Option(None, help=STEER_ENDPOINT_HELP),
    seed: int = typer.Option(0, help="Seed of the random policy."),
    out: Optional[Path] = typer.Option(None, help="Where to append the resumed episode (default: RECORD)."),
) -> None:
    """Edit (or insert) one thought of a recorded episode, replay up to it, and let the policy go on."""
    from sparse_react.policies import make_policy, policy_from_spec
    from sparse_react.resume import load_episode
    from sparse_react.resume import resume as resume_episode
    from sparse_react.trajectory import append_episode

    if bool(edit[0]) == bool(insert[0]):
        raise RecordError("give exactly one of --edit STEP THOUGHT or --insert STEP THOUGHT")
    step, thought = edit if edit[0] else insert
    old = load_episode(record, episode)
    chosen = make_policy(policy, seed) if policy else policy_from_spec(old.policy, old.policy_spec, seed, endpoint)
    new, mismatches = resume_episode(record, episode, step, thought, chosen, insert=bool(insert[0]), old=old)
    for entry in new.entries:
        _print_entry(entry)
    if mismatches:
        typer.echo(f"warning: replayed observations differ from the record at steps {mismatches}", err=True)
    append_episode(out or record, new)
    verdict = "WON" if new.won else f"FAILED ({new.failure.value})"
    typer.echo(typer.style(f"{verdict} in {len(new.entries)} steps; appended to {out or record}", bold=True))


@app.command("eval")
@with_options(model=ModelOptions)
def eval_(
    games: str = typer.Option("valid_unseen", help="Game set: bundled split, alfworld:<split>, folder or file."),
    model: ModelOptions = ModelOptions(),
    rhythms: str = typer.Option("sparse", "--rhythms", "--rhythm", help="Comma-separated: sparse,dense,im,act."),
    variants: str = typer.Option("0", help="Comma-separated prompt variants (0-5)."),
    limit: Optional[int] = typer.Option(None, min=1, help="Only the first N games (after the filters)."),
    task_types: Optional[str] = typer.Option(None, help="Comma-separated task types."),
    filter: Optional[str] = typer.Option(None, help="Only games whose name matches this regular expression."),
    max_steps: int = typer.Option(50, help="Step budget per episode."),
    thoughts_free: bool = typer.Option(False, "--thoughts-free", help="Thoughts spend no step: the budget counts "
                                       "actions (an episode still ends at twice the budget in lines)."),
    out: Optional[Path] = typer.Option(None, help="Run folder: episodes appended as they finish; rerun to resume."),
    workers: int = typer.Option(1, min=1, help="Processes playing episodes in parallel."),
    batch: Optional[int] = typer.Option(None, min=1, help="Episodes live at once per process, decided together "
                                                        "(one forward pass for all; default 16 for models, else 1)."),
    backend: str = typer.Option("local", help="local (this machine's processes) or ray."),
    ray_address: Optional[str] = typer.Option(None, help="Ray cluster address (default: start a local Ray)."),
    concurrency: Optional[int] = typer.Option(None, min=1, help="With --endpoint: episodes in flight at once, their "
                                              "requests sent together (default 16); the server batches them."),
) -> None:
    """Play every selected game once per rhythm and print the success table by task type."""
    from sparse_react.agent import PolicyUnavailable
    from sparse_react.api import evaluate_with

    _INTERRUPTED[0] = (f"finished episodes are in {out}; rerun the same command to resume" if out
                       else "nothing was saved (no --out)")
    try:
        results = evaluate_with(model, games, rhythms, variants, limit, task_types, filter, max_steps, thoughts_free,
                                out, workers, batch, backend, ray_address, concurrency)
    except KeyboardInterrupt:
        _interrupted()
    except PolicyUnavailable as exc:
        raise PolicyUnavailable(f"{exc}; {_INTERRUPTED[0]}") from None
    typer.echo(results.table())
    for episode in results.episodes:
        if episode.error:
            typer.echo(f"error in {episode.settings['game_name']} ({episode.rhythm}): {episode.error}", err=True)


@app.command()
def report(
    runs: list[Path] = typer.Argument(..., help="Run folders (or episode .jsonl files), compared side by side."),
    out: Path = typer.Option(Path("report"), help="Folder for report.md, report.csv and the PNG plots."),
    anatomy: bool = typer.Option(True, "--anatomy/--no-anatomy", help="Where thoughts go: each thought's kind "
                                 "and the triggers it covers, from a replay of every episode's game."),
) -> None:
    """Success by task type per rhythm, thoughts and where they go, invalid actions, failure classes, tokens, time; plots."""
    from sparse_react.api import report_runs

    written = report_runs(runs, out, anatomy)
    typer.echo(written.text)
    for bad in written.skipped:
        typer.echo(f"left out: {bad}", err=True)
    typer.echo("\nwritten: " + ", ".join(str(p) for p in written.paths.values()))


@app.command()
def view(
    runs: list[Path] = typer.Argument(..., help="Run folders (or episode .jsonl files) to show; the only files read or written."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on (default: this machine only)."),
    port: int = typer.Option(8000, min=0, max=65535, help="Port to listen on (0: any free one)."),
    allow_remote: bool = typer.Option(False, "--allow-remote", help="Allow a --host beyond loopback: anyone who can "
                                      "reach it needs the token printed at start."),
    allow_host: list[str] = typer.Option([], "--allow-host", help="Another name the view answers to (a DNS name of "
                                         "this machine); repeatable."),
    endpoint: Optional[str] = typer.Option(None, help=STEER_ENDPOINT_HELP),
    static: Optional[Path] = typer.Option(None, "--static", help="Write the pages as plain files into this folder "
                                          "(new or empty; no steering) instead of serving them."),
    force: bool = typer.Option(False, "--force", help="With --static: write into a folder that is not empty, or "
                               "a run folder."),
) -> None:
    """Open runs in a browser: the report, episodes with filters, one episode, two side by side, and
    editing a thought to resume."""
    from sparse_react.view import create_app, export_static
    from sparse_react.view.serve import Listener

    if static is not None:
        written = export_static(runs, static, force=force)
        typer.echo(f"wrote {len(written)} pages to {static}; open {static / 'index.html'}")
        return
    import uvicorn

    listener = Listener.open(host, port, allow_remote, allow_host)
    if listener.token:
        typer.echo(f"warning: listening on {host}, beyond this machine: anyone who can reach it and holds the token "
                   "below can read these runs and steer them", err=True)
    app_ = create_app(runs, allowed_hosts=listener.names, token=listener.token, endpoint=endpoint)
    typer.echo(f"sparse-react view: {listener.url} (Ctrl-C to stop)")
    uvicorn.Server(uvicorn.Config(app_, log_level="warning")).run(sockets=[listener.socket])


@app.command("export")
def export_(
    runs: list[Path] = typer.Argument(..., help="Run folders (or episode .jsonl files) to take won episodes from."),
    out: Path = typer.Option(..., help="The training data file to write (JSON lines, chat messages)."),
    rhythm: Optional[str] = typer.Option(None, help="Keep only this rhythm's episodes."),
    exclude: Optional[str] = typer.Option(None, help="Comma-separated evaluation sets whose games may not be "
                                                     "exported (default: valid_unseen, valid_seen, alfworld:valid_*)."),
) -> None:
    """Turn won episodes into fine-tuning data; refuses any evaluation game."""
    from sparse_react.training.export import DEFAULT_EVAL_SETS, export

    summary = export(runs, out, _sets(exclude, DEFAULT_EVAL_SETS), rhythm)
    typer.echo(summary.describe())
    for bad in summary.skipped:
        typer.echo(f"left out: {bad}", err=True)


@app.command()
@with_options(options=RelabelOptions)
def relabel(
    runs: list[Path] = typer.Argument(..., help="Run folders (or episode .jsonl files) whose episodes to relabel."),
    out: Path = typer.Option(..., help="The training data file to write (JSON lines, chat messages, one per state)."),
    options: RelabelOptions = RelabelOptions(),
    exclude: Optional[str] = typer.Option(None, help="Comma-separated evaluation sets whose games may not be "
                                                     "relabelled (default: valid_unseen, valid_seen, alfworld:valid_*)."),
) -> None:
    """Label every state the agents visited with the line the relabelling expert writes there (from
    what the episode showed, never hidden locations), as fine-tuning data."""
    from sparse_react.training.export import DEFAULT_EVAL_SETS
    from sparse_react.training.relabel import relabel_runs

    summary = relabel_runs(runs, out, _sets(exclude, DEFAULT_EVAL_SETS), options)
    typer.echo(summary.describe())
    for problem in summary.unlabelled:
        typer.echo(f"not relabelled: {problem}", err=True)
    for bad in summary.skipped:
        typer.echo(f"left out: {bad}", err=True)


@app.command()
@with_options(options=TrainOptions)
def finetune(
    data: Path = typer.Option(..., help="Training data from `sparse-react export` (one rhythm)."),
    out: Path = typer.Option(..., help="The model folder to write; its checkpoints/ make a rerun resume."),
    options: TrainOptions = TrainOptions(),
    lora: bool = typer.Option(False, "--lora", help=f"Train a LoRA adapter (of rank {DEFAULT_LORA_RANK} unless "
                              "--lora-rank says) instead of every weight.", rich_help_panel=TrainOptions.PANEL),
    init_adapter: Optional[Path] = typer.Option(None, help="Go on training this LoRA adapter (trained on the same "
                                                "base) instead of starting a new one."),
) -> None:
    """Fine-tune a local causal LM on exported episodes; writes a model folder (or, with --lora, an
    adapter folder) that `--model` loads."""
    from sparse_react.training.finetune import finetune as train

    if lora and not options.lora_rank:
        options = replace(options, lora_rank=DEFAULT_LORA_RANK)
    _INTERRUPTED[0] = f"checkpoints are in {out / 'checkpoints'}; rerun the same command to resume"
    try:
        card = train(data, out, options, init_adapter)
    except KeyboardInterrupt:
        _interrupted()
    typer.echo(f"trained {card['steps']} steps on {card['examples']} {card['rhythm']} examples "
               f"({card['rows']} rows) "
               f"(loss {card['first_loss']} → {card['last_loss']}); model in {out}: "
               f"sparse-react eval --model {out} --rhythms {card['rhythm']}")


@app.command()
@with_options(settings=RoundsSettings)
def rounds(
    out: Path = typer.Option(..., help="The folder of every round; rerun the same command to resume."),
    settings: RoundsSettings = RoundsSettings(),
) -> None:
    """Learn from the model's own play: play, relabel (or keep the wins), retrain, evaluate, round after round."""
    from sparse_react.training.rounds import run_rounds

    path = run_rounds(settings, out)
    typer.echo(path.read_text())


@app.command()
@with_options(settings=RecipeSettings)
def train(
    out: Path = typer.Option(..., help="The recipe's folder: its adapter/ is the result; rerun the same command to "
                             "resume."),
    settings: RecipeSettings = RecipeSettings(),
) -> None:
    """From a base causal LM to an agent: the searching expert's data, a LoRA adapter, expert rounds on the task types
    the dev split shows weak, each kept only if the dev split says so (docs/training.md, The recipe)."""
    from sparse_react.training.recipe import train_agent

    _INTERRUPTED[0] = f"what the finished stages wrote is in {out}; rerun the same command to resume"
    try:
        adapter = train_agent(settings, out)
    except KeyboardInterrupt:
        _interrupted()
    typer.echo(f"sparse-react eval --model {adapter} --rhythms {settings.rhythm}")


def main() -> None:
    """Entry point: user errors end with one clear line and exit status 2, never a traceback; any
    other exception is a bug, and keeps its traceback."""
    try:
        app()
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except Exception:
        traceback.print_exc()
        typer.echo(BUG_REPORT, err=True)
        sys.exit(1)
    except KeyboardInterrupt:  # one that got past the command's own handler
        _interrupted()


_INTERRUPTED = ["stopped"]  # what an interrupted command has saved, set by the command


def _interrupted() -> None:
    typer.echo(f"\ninterrupted: {_INTERRUPTED[0]}", err=True)
    # Under `python -m`, CPython remembers a KeyboardInterrupt that escaped an eval() of a string (textworld
    # renders every observation with one) and at exit dies of SIGINT whatever status it was given; an eval()
    # that ends cleanly makes it forget.
    eval("None")
    sys.exit(130)


if __name__ == "__main__":
    main()
