"""The Python face of sparse_react: pick games, load a policy, make an env, play and evaluate, read
results. The command line is a thin layer over these calls. Nothing here imports torch until a
model policy is loaded."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import gymnasium as gym

from sparse_react.agent import LoopRules, Policy, check_policy, check_rhythm
from sparse_react.errors import UserError
from sparse_react.household.catalog import GameRef, GameSetError, keep_task_types
from sparse_react.household.catalog import find_games as _find_set
from sparse_react.household.env import DEFAULT_MAX_STEPS, REACT_ENV_ID
from sparse_react.household.tasks import TaskType
from sparse_react.options import ModelOptions
from sparse_react.report import PairedComparison, load_runs, markdown_report, own, success_table, write_report
from sparse_react.rhythms import DEFAULT_RHYTHM, get_rhythm
from sparse_react.trajectory import BadLine, Episode

DEFAULT_MODEL_BATCH = 16  # episodes decided together (benchmarks/bench_batch.py: 8 gave 1.95x one at a time)
Games = str | Path | Sequence[GameRef]


def find_games(games: Games = "valid_unseen", task_types: Iterable[TaskType | str] | str | None = None,
               filter: str | None = None, limit: int | None = None) -> list[GameRef]:
    """The games of a set, in a fixed order: a bundled split (`valid_unseen`, `train`, ...),
    `alfworld:<split>` (with ALFWORLD_DATA set), a folder or a game file; or a list of GameRefs.

    `task_types` keeps some task types (names or TaskTypes, or one comma-separated string),
    `filter` the games whose name matches a regular expression, and `limit` the first N after those.
    GameSetError (a UserError) when nothing is left."""
    if isinstance(task_types, str):
        task_types = [t.strip() for t in task_types.split(",") if t.strip()]
    if isinstance(games, (str, Path)):
        refs = _find_set(games, task_types)
    else:
        if not all(isinstance(g, GameRef) for g in games):
            raise TypeError("games must be a game set name, a path, or a list of GameRefs")
        refs = keep_task_types(games, task_types)
    if filter:
        try:
            pattern = re.compile(filter)
        except re.error as exc:
            raise GameSetError(f"filter {filter!r} is not a regular expression: {exc}") from None
        refs = [r for r in refs if pattern.search(r.name)]
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise UserError(f"limit must be a positive int, not {limit!r}")
        refs = refs[:limit]
    if not refs:
        raise GameSetError(f"no game of {games if isinstance(games, (str, Path)) else 'the list'} matches the selection")
    return refs


def load_policy(spec: str | Path = "hf", *, endpoint: str | None = None, model: str | None = None, seed: int = 0,
                **settings: Any) -> Policy:
    """A policy by name: `hf` (the shipped trained adapter of each rhythm; the default), `base`
    (the untuned embedded SmolLM2-135M), a local model folder, adapter folder or .gguf file,
    `expert`, `search-expert`, `relabel-expert`, `random` or `scripted:FILE`. With `endpoint`, the
    model `model` of an OpenAI-compatible server (its key from $OPENAI_API_KEY).

    `settings` go to the model policies: action_mode, device, dtype, shots, window, temperature,
    api and tokenizer (served). A model is loaded now, so a bad one fails here."""
    from sparse_react.policies import BASE_MODEL, make_policy

    if endpoint:
        return make_policy("served", seed, endpoint=endpoint, model=model or str(spec), **settings)
    spec = str(spec)
    if spec == BASE_MODEL or spec.startswith("hf:") or Path(spec).suffix == ".gguf" or Path(spec).is_dir():
        spec = spec if spec.startswith("hf:") else f"hf:{spec}"
    return make_policy(spec, seed, **{k: v for k, v in settings.items() if v is not None})


def load_policy_from(options: ModelOptions, rhythms: Sequence[str] = ()) -> Policy:
    """The policy that model options name (the flags of `sparse-react run` and `eval`): with
    `endpoint`, the model `model` of that server; with `model`, that local model; else `policy` by
    name. Every model it plays `rhythms` with is loaded now, so a bad one fails here, not mid-run."""
    from sparse_react.policies import make_policy
    from sparse_react.policies.shipped import ShippedPolicy

    o = options
    if o.endpoint:
        return make_policy("served", o.seed, model=o.model, action_mode=o.action_mode, shots=o.shots, window=o.window,
                           endpoint=o.endpoint, api=o.api, tokenizer=o.tokenizer)
    spec = f"hf:{o.model}" if o.model else o.policy
    settings = {"action_mode": o.action_mode, "device": o.device, "shots": o.shots, "window": o.window,
                "dtype": o.dtype} if spec.startswith("hf") else {}
    chosen = make_policy(spec, o.seed, **settings)
    if isinstance(chosen, ShippedPolicy):
        for rhythm in rhythms:
            chosen.policy(rhythm)
    return chosen


def make_env(games: Games = "valid_unseen", rhythm: str = DEFAULT_RHYTHM, max_steps: int = DEFAULT_MAX_STEPS,
             thoughts_count: bool = True, task_types: Iterable[TaskType | str] | str | None = None,
             filter: str | None = None, limit: int | None = None, render_mode: str | None = None) -> gym.Env:
    """A Gymnasium env (`sparse_react/HouseholdReAct-v0`) over the selected games: `think:` lines
    are answered `OK.`, and the step budget is the env's own (`StepBudget`), which `run_episode`
    shares. `rhythm` is what `run_episode(env, policy)` plays when not told."""
    check_rhythm(rhythm)
    refs = find_games(games, task_types, filter, limit)
    return gym.make(REACT_ENV_ID, games=refs, rhythm=rhythm, max_steps=max_steps, thoughts_count=thoughts_count,
                    render_mode=render_mode)


@dataclass
class Results:
    """Episodes of an evaluation (or read from run folders), with the paper's tables over them; the
    tables and rates count the policy's own episodes, never one a human steered."""

    episodes: list[Episode]
    label: str = "success"

    @classmethod
    def load(cls, run: str | Path) -> "Results":
        """The episodes of a run folder (or a .jsonl record)."""
        from sparse_react.report import load_runs

        [(label, episodes)] = load_runs([run])
        return cls(episodes, label)

    @property
    def rhythms(self) -> list[str]:
        return list(dict.fromkeys(e.rhythm for e in self.episodes))

    def success(self, rhythm: str | None = None) -> float:
        """The share of episodes won (of one rhythm, or all)."""
        chosen = [e for e in own(self.episodes) if rhythm is None or e.rhythm == rhythm]
        if not chosen:
            raise UserError(f"no episodes of rhythm {rhythm!r}; these results hold {', '.join(self.rhythms)}")
        return sum(e.won for e in chosen) / len(chosen)

    def table(self) -> str:
        """Success by task type, one row per rhythm, as Markdown (the paper's layout)."""
        return success_table(self.episodes, label=self.label, by_rhythm=True)

    def compare(self, first: str, second: str) -> PairedComparison:
        """Two rhythms game by game on the games both played: the discordant pairs and the exact
        McNemar p-value. `str()` of it is a Markdown table."""
        won = {r: {(e.game_name, e.prompt_variant): e.won for e in own(self.episodes) if e.rhythm == r}
               for r in (first, second)}
        for rhythm, games in won.items():
            if not games:
                raise UserError(f"no episodes of rhythm {rhythm!r}; these results hold {', '.join(self.rhythms)}")
        return PairedComparison.of(first, second, won[first], won[second])

    def write_report(self, out: str | Path) -> dict[str, Path]:
        """report.md, report.csv and the PNG plots into `out`, as `sparse-react report` writes them."""
        return write_report([(self.label, self.episodes)], Path(out))


def evaluate(policy: Policy, games: Games = "valid_unseen", rhythms: str | Sequence[str] = (DEFAULT_RHYTHM,),
             variants: Sequence[int] = (0,), limit: int | None = None,
             task_types: Iterable[TaskType | str] | str | None = None, filter: str | None = None,
             max_steps: int = DEFAULT_MAX_STEPS, thoughts_count: bool = True, out: str | Path | None = None,
             workers: int = 1, batch: int | None = None, backend: str = "local", ray_address: str | None = None,
             progress: bool = True, label: str | None = None) -> Results:
    """Play every selected game once per rhythm and prompt variant and return the Results.

    With `out` (a run folder), each episode is appended as it finishes and a rerun resumes; a
    folder holding other settings is refused. `workers` processes play in parallel; `batch`
    episodes per process are decided together (default 16 for a model, else 1); `backend="ray"`
    plays on a Ray cluster. Wrong arguments raise before any game is played."""
    from sparse_react.evaluation import RunSettings
    from sparse_react.evaluation import evaluate as play_all

    check_policy(policy)
    names = [check_rhythm(r).name for r in ([rhythms] if isinstance(rhythms, str) else rhythms)]
    refs = find_games(games, task_types, filter, limit)
    getattr(policy, "prepare", lambda rhythms: None)(names)  # the shipped adapters: each rhythm's loads now
    rules = LoopRules(max_steps=max_steps, thoughts_count=thoughts_count)
    label = label or policy.name
    task_text = task_types if task_types is None or isinstance(task_types, str) else \
        ",".join(t if isinstance(t, str) else t.value for t in task_types)
    settings = RunSettings(str(games) if isinstance(games, (str, Path)) else "list", label, tuple(names),
                           tuple(variants), asdict(rules), {"limit": limit, "task_types": task_text, "filter": filter},
                           policy.spec())
    episodes = play_all(refs, policy, names, list(variants), rules, run_dir=Path(out) if out else None,
                        settings=settings, progress=progress, workers=workers, backend=backend,
                        ray_address=ray_address, batch=batch or (DEFAULT_MODEL_BATCH if policy.batched else 1))
    return Results(episodes, label)



def evaluate_with(model: ModelOptions = ModelOptions(), games: Games = "valid_unseen",
                  rhythms: str | Sequence[str] = DEFAULT_RHYTHM, variants: str | Sequence[int] = (0,),
                  limit: int | None = None, task_types: Iterable[TaskType | str] | str | None = None,
                  filter: str | None = None, max_steps: int = DEFAULT_MAX_STEPS, thoughts_free: bool = False,
                  out: str | Path | None = None, workers: int = 1, batch: int | None = None, backend: str = "local",
                  ray_address: str | None = None, concurrency: int | None = None, progress: bool = True) -> Results:
    """What `sparse-react eval` does, with its options: the policy `model` names plays every selected
    game once per rhythm and prompt variant (`rhythms` and `variants` may be comma-separated). The
    selection and the options are checked before a model loads. `thoughts_free`: the budget counts
    actions only; `concurrency`: a served model's episodes in flight at once. The Results are
    labelled with the policy's name."""
    names = [get_rhythm(r.strip()).name for r in _listed(rhythms)]
    try:
        variant_list = [int(v) for v in _listed(variants)]
    except ValueError:
        raise UserError(f"--variants {variants!r} must be comma-separated numbers") from None
    find_games(games, task_types, filter, limit)  # a bad selection fails before a model loads
    if model.endpoint and (workers > 1 or backend != "local"):
        raise UserError("a served model plays in this process, its requests in flight together: use --concurrency "
                        "rather than --workers or --backend ray")
    if concurrency and not model.endpoint:
        raise UserError("--concurrency is for a served model (--endpoint); a local model plays --batch episodes at once")
    policy = load_policy_from(model, names)
    results = evaluate(policy, games, names, variant_list, limit, task_types, filter, max_steps, not thoughts_free, out,
                       workers, concurrency or batch, backend, ray_address, progress, label=model.label)
    return Results(results.episodes, policy.name)


def _listed(values: str | int | Sequence[Any]) -> list[Any]:
    if isinstance(values, str):
        return [v for v in values.split(",") if v.strip()]
    return [values] if isinstance(values, int) else list(values)


@dataclass
class RunsReport:
    """What `report_runs` wrote: the report's Markdown, the files, and record lines left out."""

    text: str
    paths: dict[str, Path]
    skipped: list[BadLine]


def report_runs(runs: Sequence[str | Path], out: str | Path = "report", anatomy: bool = True) -> RunsReport:
    """What `sparse-react report` does: report.md, report.csv and the plots of run folders (or
    episode files) side by side into `out`; with `anatomy`, where thoughts go too (each thought's kind
    and the triggers it covers, from a replay of every episode's game)."""
    skipped: list[BadLine] = []
    loaded = load_runs(list(runs), skipped)
    paths = write_report(loaded, Path(out), skipped)
    text = markdown_report(loaded, skipped)
    if anatomy:
        from sparse_react.thought_report import write_anatomy

        section, pictures = write_anatomy(loaded, Path(out))
        text = f"{text}\n{section}\n"
        paths["markdown"].write_text(text)
        paths |= pictures
    return RunsReport(text, paths, skipped)
