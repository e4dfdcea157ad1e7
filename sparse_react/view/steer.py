"""Steering from the browser: edit (or insert) a thought and let the run's own policy carry on,
through `sparse_react.resume`; the new episode is appended to the run's record under the lock every writer takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sparse_react.agent import Policy
from sparse_react.policies import make_policy, policy_from_spec
from sparse_react.resume import edited_lines, resume
from sparse_react.trajectory import Episode, read_records, record_lock, write_episode
from sparse_react.view.records import Run, RunSet

PolicyFor = Callable[[Run, Episode], Policy]


def run_policy(run: Run, episode: Episode, endpoint: str | None = None) -> Policy:
    """The policy the run used: a scripted file as its settings name it, else the one the episode
    records (the shipped adapter, a model, the expert, ...); a served model at `endpoint`, the
    server the user named, never at the endpoint in the record."""
    spec = str(run.settings.get("policy") or "")
    if spec.startswith("scripted:"):
        return make_policy(spec)
    return policy_from_spec(episode.policy, episode.policy_spec, endpoint=endpoint)


@dataclass(frozen=True)
class Steering:
    """Whether the episode page offers steering, and what it says about who would carry on."""

    allowed: bool
    note: str


def steering(run: Run, episode: Episode, endpoint: str | None) -> Steering:
    """What the page says before it asks to steer: for a served model, the server that would carry
    on (the one named with --endpoint), or that none was named."""
    if episode.policy_spec.get("kind") != "served":
        return Steering(True, "")
    model = episode.policy_spec.get("model")
    if not endpoint:
        return Steering(False, f"A served model ({model}) played this episode. The endpoint its record names is "
                               "never contacted: to steer, start the view with --endpoint URL.")
    return Steering(True, f"Steering carries on with the served model {model} at {endpoint}, the server named "
                          "with --endpoint.")


def steer(runs: RunSet, run_index: int, index: int, step: int, thought: str, insert: bool,
          policy_for: PolicyFor = run_policy) -> int:
    """Resume episode `index` of run `run_index` after the edit and append it; returns the new
    episode's index. Bad input raises RecordError before any file changes."""
    run, old = runs.episode(run_index, index)
    edited_lines(old, step, thought, insert)  # every check resume makes, before a game loads
    policy = policy_for(run, old)
    new, _ = resume(run.record, index, step, thought, policy, insert=insert, old=old)
    with record_lock(run.record) as handle:  # an eval may be appending to the same record
        position = len(read_records(run.record).episodes)
        write_episode(handle, new)
    return position
