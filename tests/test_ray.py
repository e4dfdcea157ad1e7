"""The Ray backend on a local Ray instance: same episodes, same resumable run folder, crashes recorded."""

from __future__ import annotations

import sys

import pytest

from sparse_react.evaluation import EPISODES_FILE, RunSettings, evaluate
from sparse_react.policies.expert import ExpertPolicy
from sparse_react.trajectory import Failure, read_episodes
from doubles import DiesOn

ray = pytest.importorskip("ray", reason="the Ray backend needs `pip install ray` (in the test extras)")


def test_ray_backend_matches_local_resumes_and_records_crashes(tmp_path, bundled_unseen):
    ray.cloudpickle.register_pickle_by_value(sys.modules[DiesOn.__module__])  # Ray workers cannot import tests/
    games = bundled_unseen[::20]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        local = evaluate(games, ExpertPolicy(), ["sparse", "act"], progress=False)
        run = tmp_path / "run"
        settings = RunSettings("valid_unseen", "expert", ("sparse", "act"))
        remote = evaluate(games, ExpertPolicy(), ["sparse", "act"], run_dir=run, settings=settings,
                          progress=False, backend="ray")
        texts = [[e.text for e in x.entries] for x in local]
        assert [[e.text for e in x.entries] for x in remote] == texts and all(e.won for e in remote)

        lines = (run / EPISODES_FILE).read_text().splitlines(keepends=True)
        (run / EPISODES_FILE).write_text("".join(lines[:5]))  # as if the run had stopped after five
        resumed = evaluate(games, ExpertPolicy(), ["sparse", "act"], run_dir=run, settings=settings,
                           progress=False, backend="ray")
        stored = read_episodes(run / EPISODES_FILE)
        assert len(stored) == len(resumed) == 2 * len(games)
        assert len({(e.settings["game_name"], e.rhythm) for e in stored}) == len(stored)

        crashed = evaluate(games[:3], DiesOn(games[1].name, 7), "act", progress=False, backend="ray")
        assert [e.won for e in crashed] == [True, False, True]
        assert crashed[1].failure is Failure.ERROR and "Ray task failed" in crashed[1].error
    finally:
        ray.shutdown()
