"""A content-addressed cache on disk for pure, slow results (PDDL translations).

Entries are keyed by a hash of their inputs and of the versions of the packages that produce
them, so a changed game or an upgraded engine never reads a stale entry. Each file carries its
key and a checksum of its body: an entry that is truncated, corrupt or unreadable is deleted and
rebuilt, never trusted.

Settings: SPARSE_REACT_CACHE_DIR (default `$XDG_CACHE_HOME/sparse_react` or
`~/.cache/sparse_react`); SPARSE_REACT_DISK_CACHE=0 turns the disk cache off.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import sys
import tempfile
import warnings
import zlib
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

CACHE_FORMAT = b"sparse_react.cache/1"
ENGINE_PACKAGES = ("textworld", "fast-downward-textworld")


def cache_dir() -> Path:
    """Where the disk cache lives."""
    explicit = os.environ.get("SPARSE_REACT_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sparse_react"


def disk_cache_enabled() -> bool:
    """False when SPARSE_REACT_DISK_CACHE is 0/off/false/no."""
    return os.environ.get("SPARSE_REACT_DISK_CACHE", "1").strip().lower() not in ("0", "off", "false", "no")


@lru_cache(maxsize=1)
def engine_versions() -> str:
    """The versions an engine result depends on; part of every key."""
    parts = [f"{name}={metadata.version(name)}" for name in ENGINE_PACKAGES]
    parts.append(f"python={sys.version_info.major}.{sys.version_info.minor}")
    parts.append(f"pickle={pickle.HIGHEST_PROTOCOL}")
    return ";".join(parts)


class DiskCache:
    """One namespace of the disk cache (a folder of `<key>.bin` files)."""

    def __init__(self, root: Path | None = None, namespace: str = "translations") -> None:
        self.folder = (root or cache_dir()) / namespace
        self.hits = self.misses = self.rebuilt = 0
        self._write_warned = False

    def key(self, *parts: str) -> str:
        digest = hashlib.sha256(engine_versions().encode())
        for part in parts:
            digest.update(b"\0" + part.encode())
        return digest.hexdigest()

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.bin"

    def get(self, key: str) -> Any | None:
        """The stored value, or None (a miss); a bad entry is removed, counted in `rebuilt` and missed."""
        path = self._path(key)
        try:
            blob = path.read_bytes()
        except OSError:  # absent or unreadable
            self.misses += 1
            return None
        try:
            fmt, stored_key, checksum, body = blob.split(b"\n", 3)
            if fmt != CACHE_FORMAT or stored_key.decode() != key:
                raise ValueError("wrong format or key")
            if hashlib.sha256(body).hexdigest().encode() != checksum:
                raise ValueError("checksum mismatch")
            value = pickle.loads(zlib.decompress(body))
        except Exception:  # any damage: drop the entry, the caller recomputes it
            self.rebuilt += 1
            self.misses += 1
            path.unlink(missing_ok=True)
            return None
        self.hits += 1
        return value

    def put(self, key: str, value: Any) -> None:
        """Store a value atomically; a failure to write (read-only or full disk) only warns once."""
        body = zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), 1)
        blob = b"\n".join([CACHE_FORMAT, key.encode(), hashlib.sha256(body).hexdigest().encode(), body])
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".tmp") as handle:
                handle.write(blob)
            os.replace(handle.name, path)
        except OSError as exc:
            if not self._write_warned:
                warnings.warn(f"sparse_react: cannot write the disk cache at {self.folder}: {exc}", stacklevel=2)
                self._write_warned = True

    def entries(self) -> list[Path]:
        return sorted(self.folder.glob("*/*.bin")) if self.folder.is_dir() else []

    def clear(self) -> int:
        """Delete every entry; return how many there were."""
        count = len(self.entries())
        shutil.rmtree(self.folder, ignore_errors=True)
        return count
