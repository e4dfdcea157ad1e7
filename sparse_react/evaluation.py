"""Batch evaluation: every selected game once per rhythm (and prompt variant), in a fixed order,
appended to a run folder as each episode finishes, resumable, with a success table by task type.

A run folder holds `settings.json` (what was asked, and by which version) and `episodes.jsonl`
(one flushed line per finished episode). Re-running the same command skips finished episodes;
a changed setting or an incompatible folder is refused rather than mixed in.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import queue
import signal
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from tqdm import tqdm

from sparse_react.agent import (
    LoopRules,
    Policy,
    Request,
    check_policy,
    check_rhythm,
    decide_all,
    episode_turns,
    new_episode,
    run_episode,
    versions,
)
from sparse_react.errors import UserError
from sparse_react.household.catalog import GameRef
from sparse_react.household.env import HouseholdEnv
from sparse_react.prompts import check_variant
from sparse_react.rhythms import DEFAULT_RHYTHM
from sparse_react.trajectory import EPISODES_FILE, Episode, Failure, append_episode, read_episodes, record_lock

RUN_FORMAT = "sparse_react.run/2"
BACKENDS = ("local", "ray")
SETTINGS_FILE = "settings.json"


class RunFolderError(UserError, ValueError):
    """A run folder made with other settings or by an incompatible version, or a setting no run can
    have; the message says which."""


@dataclass(frozen=True)
class RunSettings:
    """Everything that decides what a run's episodes are; a resumed run must match it exactly."""

    games: str
    policy: str
    rhythms: tuple[str, ...]
    variants: tuple[int, ...] = (0,)
    rules: dict = field(default_factory=lambda: asdict(LoopRules()))
    selection: dict = field(default_factory=dict)  # limit, task types, filter
    policy_spec: dict = field(default_factory=dict)  # Policy.spec(): kind, model and weights' hash, dtype, device, ...

    def to_json(self) -> dict:
        return {"format": RUN_FORMAT, "versions": versions(), **asdict(self)}


def episode_key(game: str, rhythm: str, variant: int) -> tuple[str, str, int]:
    return (game, rhythm, variant)


def open_run(run_dir: Path, settings: RunSettings) -> list[Episode]:
    """Create a run folder, or check an existing one against `settings`; return its finished episodes.

    A last line cut short by a killed process is dropped (that episode had not finished).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / SETTINGS_FILE
    wanted = json.loads(json.dumps(settings.to_json()))  # tuples become lists, as stored
    if path.exists():
        try:
            stored = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise RunFolderError(f"{path} is not a run settings file: {exc}") from None
        if stored.get("format") != RUN_FORMAT:
            raise RunFolderError(f"{run_dir} was written by an incompatible version "
                                 f"(format {stored.get('format')!r}, this is {RUN_FORMAT}); use another --out")
        changed = _differences(_what_played(stored),  # an upgrade may resume
                               _what_played({k: v for k, v in wanted.items() if k != "versions"}))
        if changed:
            detail = "; ".join(f"{k}: {old!r} → {new!r}" for k, old, new in changed)
            raise RunFolderError(f"{run_dir} holds a run with other settings ({detail}); use another --out")
    else:
        path.write_text(json.dumps(wanted, indent=1) + "\n")
    episodes_path = run_dir / EPISODES_FILE
    if not episodes_path.exists():
        return []
    with record_lock(episodes_path):  # drops a line cut off when a run was killed mid-write
        return read_episodes(episodes_path)


def _what_played(settings: dict) -> dict:
    """Settings as compared on resume: with a policy spec, the policy's name is only its label (`hf`
    or `hf:DIR`), and the shipped policy playing one rhythm is that rhythm's adapter, so a run made
    with `--model DIR` resumes as the shipped-adapter run when DIR holds the same weights."""
    spec = settings.get("policy_spec")
    if not spec:
        return settings
    if spec.get("kind") == "shipped" and len(spec.get("rhythms", {})) == 1:
        [spec] = spec["rhythms"].values()
    return {**{k: v for k, v in settings.items() if k != "policy"}, "policy_spec": spec}


def _differences(stored: dict, wanted: dict, path: str = "") -> list[tuple[str, object, object]]:
    """(field, stored, wanted) for every field that differs, nested fields named `a.b`; a model's
    path is where it lies, not what it is (its weights' hash is), so a moved install may resume."""
    out = []
    for key in sorted(set(stored) | set(wanted)) if path else wanted:
        old, new = stored.get(key), wanted.get(key)
        if key == "model" and path.startswith("policy_spec."):
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            out += _differences(old, new, f"{path}{key}.")
        elif old != new:
            out.append((path + key, old, new))
    return out


def evaluate(games: Sequence[GameRef], policy: Policy, rhythms: str | Sequence[str] = DEFAULT_RHYTHM,
             variants: Sequence[int] = (0,), rules: LoopRules = LoopRules(), run_dir: Path | None = None,
             settings: RunSettings | None = None, progress: bool = True, workers: int = 1,
             backend: str = "local", ray_address: str | None = None, batch: int = 1) -> list[Episode]:
    """Play every game once per rhythm and variant (rhythm-major, then variant, then game order).

    With `run_dir`, finished episodes found there are kept and skipped, and each new one is
    appended as soon as it ends. `workers > 1` plays episodes in that many processes (the engine
    is not thread-safe); a worker that dies is replaced and its episodes recorded as errors.
    `batch > 1` (local backend) keeps that many episodes live per process and asks the policy for all their next
    lines in one `decide` call (one forward pass for all with a model policy).
    `backend="ray"` sends each episode to a Ray cluster (`ray_address`, or a local instance);
    this process stays the only writer of the run folder. Returns all episodes, in plan order.
    """
    rhythms = [check_rhythm(r).name for r in ([rhythms] if isinstance(rhythms, str) else rhythms)]
    variants = [check_variant(v) for v in variants]
    games = list(games)
    if not all(isinstance(g, GameRef) for g in games):
        raise TypeError("games must be GameRefs (sparse_react.find_games(...))")
    if not isinstance(rules, LoopRules):
        raise TypeError(f"rules must be LoopRules, not {type(rules).__name__}")
    if backend not in BACKENDS:
        raise RunFolderError(f"unknown backend {backend!r}; one of {', '.join(BACKENDS)}")
    check_policy(policy)
    plan = [(game, r, v) for r in rhythms for v in variants for game in games]
    done: dict[tuple, Episode] = {}
    if run_dir is not None:
        settings = settings or RunSettings("", policy.name, tuple(rhythms), tuple(variants), asdict(rules),
                                           policy_spec=policy.spec())
        for episode in open_run(run_dir, settings):
            done[episode_key(episode.game_name, episode.rhythm, episode.prompt_variant)] = episode
    todo = [task for task in plan if episode_key(task[0].name, task[1], task[2]) not in done]
    bar = tqdm(total=len(plan), initial=len(done), desc=policy.name, unit="ep", disable=not progress)
    won = [e.won for e in done.values()]
    if backend == "ray":
        play = _play_on_ray(todo, policy, rules, ray_address)
    elif workers > 1:
        play = _play_in_processes(todo, policy, rules, workers, batch)
    else:
        play = (episode for _, episode in _play_batched(enumerate(todo), policy, rules, batch))
    for episode in play:
        done[episode_key(episode.settings["game_name"], episode.rhythm, episode.prompt_variant)] = episode
        if run_dir is not None:
            append_episode(run_dir / EPISODES_FILE, episode)
        won.append(episode.won)
        bar.update(1)
        bar.set_postfix(success=f"{sum(won) / len(won):.0%}")
    bar.close()
    return [done[episode_key(g.name, r, v)] for g, r, v in plan]


Task = tuple[GameRef, str, int]


def _play_batched(tasks: Iterable[tuple[int, Task]], policy: Policy, rules: LoopRules,
                  size: int = 1) -> Iterator[tuple[int, Episode]]:
    """(index, episode) as each finishes, with up to `size` episodes live at once, each in its own
    environment; every turn one `decide_all` call decides for all of them."""
    todo, free_envs = iter(tasks), []
    live: dict[Any, tuple[int, HouseholdEnv, Request]] = {}

    def advance(turns: Any, index: int, env: HouseholdEnv, step: Any) -> Iterator[tuple[int, Episode]]:
        try:
            live[turns] = (index, env, step())
        except StopIteration as stop:
            live.pop(turns, None)
            free_envs.append(env)
            yield index, stop.value

    while True:
        while len(live) < size and (item := next(todo, None)) is not None:
            index, (game, rhythm, variant) = item
            env = free_envs.pop() if free_envs else HouseholdEnv([game])
            turns = episode_turns(env, policy, game, rhythm, variant, rules)
            yield from advance(turns, index, env, turns.__next__)
        if not live:
            return
        batch = list(live.items())
        for (turns, (index, env, _)), decision in zip(batch, decide_all(policy, [r for _, (_, _, r) in batch])):
            send = turns.throw if isinstance(decision, Exception) else turns.send
            yield from advance(turns, index, env, lambda: send(decision))


def _die_with_parent() -> None:
    """Ask Linux to kill this worker when the evaluating process dies (even by SIGKILL)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: workers notice an orphaned parent between episodes
        pass


def _worker(tasks: Any, results: Any, policy: Policy, rules: LoopRules, parent: int, batch: int, workers: int) -> None:
    _die_with_parent()
    if "torch" in sys.modules:  # share the cores among the workers instead of each taking them all
        sys.modules["torch"].set_num_threads(max(1, (os.cpu_count() or 1) // workers))

    def taken() -> Iterator[tuple[int, Task]]:
        while os.getppid() == parent and (item := tasks.get()) is not None:
            results.put(("start", item[0], os.getpid()))
            yield item

    for index, episode in _play_batched(taken(), policy, rules, batch):
        results.put(("done", index, episode.to_dict()))


def _play_in_processes(tasks: Sequence[Task], policy: Policy, rules: LoopRules, workers: int,
                       batch: int = 1) -> Iterator[Episode]:
    """Episodes from `workers` processes, as they finish; a dead worker's episode becomes an error."""
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    task_q, result_q = ctx.Queue(), ctx.Queue()
    for item in enumerate(tasks):
        task_q.put(item)
    for _ in range(workers):
        task_q.put(None)
    def start() -> Any:
        return ctx.Process(target=_worker, args=(task_q, result_q, policy, rules, os.getpid(), batch, workers),
                           daemon=True)

    procs = [start() for _ in range(workers)]
    for proc in procs:
        proc.start()
    running: dict[int, set[int]] = {}  # pid -> indices of the episodes it is playing
    remaining = set(range(len(tasks)))
    try:
        while remaining:
            try:
                kind, index, payload = result_q.get(timeout=0.5)
            except queue.Empty:
                for proc in [p for p in procs if not p.is_alive() and p.exitcode not in (0, None)]:
                    procs.remove(proc)
                    for index in sorted(running.pop(proc.pid, set()) & remaining):
                        remaining.discard(index)
                        yield _crashed(tasks[index], policy, rules, f"worker process {proc.pid} died "
                                                                  f"(exit code {proc.exitcode}) while playing this episode")
                    procs.append(start())
                    procs[-1].start()
                if not any(p.is_alive() for p in procs):
                    for index in sorted(remaining):  # taken by a worker that died before saying so
                        yield _crashed(tasks[index], policy, rules, "lost when a worker process died")
                    return
                continue
            if kind == "start":
                running.setdefault(payload, set()).add(index)
            else:
                remaining.discard(index)
                for indices in running.values():
                    indices.discard(index)
                yield Episode.from_dict(payload)
    finally:
        for proc in procs:
            proc.terminate()


_RAY_ENV: HouseholdEnv | None = None  # one environment per Ray worker process


def _play_remote(policy: Policy, rules: LoopRules, task: Task) -> dict:
    global _RAY_ENV
    game, rhythm, variant = task
    _RAY_ENV = _RAY_ENV or HouseholdEnv([game])
    return run_episode(_RAY_ENV, policy, game, rhythm, variant, rules).to_dict()


def _play_on_ray(tasks: Sequence[Task], policy: Policy, rules: LoopRules, address: str | None) -> Iterator[Episode]:
    """Episodes played as Ray tasks, as they finish; a failed task (a dead worker) becomes an error."""
    import ray

    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    remote = ray.remote(max_retries=0)(_play_remote)
    policy_ref = ray.put(policy)
    pending = {remote.remote(policy_ref, rules, task): task for task in tasks}
    try:
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            task = pending.pop(ref)
            try:
                yield Episode.from_dict(ray.get(ref))
            except Exception as exc:  # RayTaskError, WorkerCrashedError, ...
                yield _crashed(task, policy, rules, f"Ray task failed: {type(exc).__name__}: {exc}".splitlines()[0])
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        if started_here:
            ray.shutdown()


def _crashed(task: Task, policy: Policy, rules: LoopRules, message: str) -> Episode:
    game, rhythm, variant = task
    episode = new_episode(game, rhythm, policy, variant, rules)
    episode.failure, episode.error = Failure.ERROR, message
    return episode
