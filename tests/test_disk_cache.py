"""The disk cache of translations: shared across processes, never stale, never trusted when damaged."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

from sparse_react.household import disk_cache, engine
from sparse_react.household.disk_cache import DiskCache
from sparse_react.household.engine import Engine

ROLLOUT = """
import json, random, sys
from sparse_react.household.engine import Engine
from sparse_react.household.engine_cache import EngineCaches
e = Engine()
e.load(sys.argv[1])
s = e.reset(); rng = random.Random(0); trace = [[s.observation, list(s.admissible), s.won]]
for _ in range(15):
    s = e.step(rng.choice(s.admissible)); trace.append([s.observation, list(s.admissible), s.won])
from sparse_react.household import engine
disk = engine._caches().translations.disk
print(json.dumps({"trace": trace, "disk": None if disk is None else [disk.hits, disk.misses, disk.rebuilt]}))
"""


def rollout_in_new_process(game, cache_dir, **env):
    import json
    import os

    environ = dict(os.environ, SPARSE_REACT_CACHE_DIR=str(cache_dir), **env)
    out = subprocess.run([sys.executable, "-c", ROLLOUT, str(game.path)], capture_output=True, text=True,
                         env=environ, timeout=300, check=True)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def game(bundled_unseen):
    return bundled_unseen[7]


@pytest.fixture(scope="module")
def plain_trace(game, tmp_path_factory):
    return rollout_in_new_process(game, tmp_path_factory.mktemp("unused"), SPARSE_REACT_PLAIN_ENGINE="1")["trace"]


def test_new_process_reads_what_an_earlier_one_wrote(game, plain_trace, tmp_path):
    first = rollout_in_new_process(game, tmp_path)
    assert first["disk"] == [0, 2, 0]  # both translations computed and written
    second = rollout_in_new_process(game, tmp_path)
    assert second["disk"] == [2, 0, 0]  # both read back
    assert first["trace"] == second["trace"] == plain_trace


@pytest.mark.parametrize("damage", ["truncate", "garbage", "flip", "other_key"])
def test_damaged_entries_are_rebuilt_not_trusted(game, plain_trace, tmp_path, damage):
    rollout_in_new_process(game, tmp_path)
    entries = DiskCache(tmp_path).entries()
    assert len(entries) == 2
    for path in entries:
        blob = path.read_bytes()
        if damage == "truncate":
            path.write_bytes(blob[: len(blob) // 2])
        elif damage == "garbage":
            path.write_bytes(b"not a cache entry at all")
        elif damage == "flip":
            path.write_bytes(blob[:-10] + bytes(b ^ 0xFF for b in blob[-10:]))
    if damage == "other_key":  # each file holds the other's entry
        a, b = entries
        blob_a = a.read_bytes()
        a.write_bytes(b.read_bytes())
        b.write_bytes(blob_a)
    result = rollout_in_new_process(game, tmp_path)
    assert result["disk"] == [0, 2, 2]
    assert result["trace"] == plain_trace
    assert rollout_in_new_process(game, tmp_path)["disk"] == [2, 0, 0]  # rewritten whole


def test_disk_cache_can_be_turned_off(game, tmp_path):
    result = rollout_in_new_process(game, tmp_path, SPARSE_REACT_DISK_CACHE="0")
    assert result["disk"] is None and DiskCache(tmp_path).entries() == []


def test_keys_change_with_inputs_and_versions(monkeypatch, tmp_path):
    cache = DiskCache(tmp_path)
    key = cache.key("domain", "problem")
    assert key != cache.key("domain", "problem2")
    monkeypatch.setattr(disk_cache, "engine_versions", lambda: "textworld=9.9.9")
    assert cache.key("domain", "problem") != key


def test_cli_clears_the_cache(game, tmp_path):
    rollout_in_new_process(game, tmp_path)
    env = {"SPARSE_REACT_CACHE_DIR": str(tmp_path)}
    import os

    out = subprocess.run([sys.executable, "-m", "sparse_react.cli", "cache", "clear"], capture_output=True,
                         text=True, env=dict(os.environ, **env), check=True)
    assert "removed 2 entries" in out.stdout
    assert DiskCache(tmp_path).entries() == []


def test_unverified_engine_version_falls_back_with_one_warning(monkeypatch):
    monkeypatch.setattr(engine, "VERIFIED_ENGINE", {"textworld": "0.0.1", "fast-downward-textworld": "1"})
    engine.speedups_verified.cache_clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first, second = Engine(), Engine()
        assert (first.fast, second.fast) == (False, False)
        assert len([w for w in caught if "plain" in str(w.message)]) == 1
    finally:
        engine.speedups_verified.cache_clear()
