"""What the engine may compute once and reuse: parsed game logic, PDDL translations, and the
parses of the grammar's text templates and logic queries; and a bound on what textworld itself
keeps for the life of a process.

All are pure functions of their text inputs. The grammar of a game differs from the shared one
only in its task sentence, so the parse of everything else is shared by all games of a process.
textworld re-parses the same few dozen template strings with TatSu on every step; a memoised
parse hands out a deep copy, exactly what a fresh parse would have built.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import itertools
import json
import re
from collections import OrderedDict
from typing import Any, Iterator

from sparse_react.household.disk_cache import DiskCache

TASK_RULE = re.compile(r'("task"\s*:\s*\[\s*\{\s*"rhs"\s*:\s*)"((?:[^"\\]|\\.)*)"')
TASK_SLOT = "__SPARSE_REACT_TASK__"


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


class LogicCache:
    """Parsed GameLogic per (domain, grammar-without-task); each game gets a copy with its own task."""

    def __init__(self) -> None:
        self._logic: dict[str, Any] = {}

    def get(self, domain: str, grammar: str) -> Any:
        from textworld.envs.pddl.logic import GameLogic
        from textworld.envs.pddl.textgen import ContextSensitiveGrammar

        match = TASK_RULE.search(grammar)
        if match is None:  # no task rule to swap: parse as textworld would
            return GameLogic(domain=domain, grammar=grammar)
        template = grammar[: match.start(2) - 1] + f'"{TASK_SLOT}"' + grammar[match.end(2) + 1:]
        key = _digest(domain, template)
        if key not in self._logic:
            self._logic[key] = GameLogic(domain=domain, grammar=template)
        base = self._logic[key]
        logic = copy.copy(base)
        logic.grammar = ContextSensitiveGrammar()
        logic.grammar._rules.update(base.grammar._rules)
        task_rhs = json.loads(f'"{match.group(2)}"')
        task = ContextSensitiveGrammar.parse(json.dumps({"task": [{"rhs": task_rhs}]}))
        logic.grammar._rules["task"] = task._rules["task"]
        return logic


class TranslationCache:
    """Fast Downward's PDDL→SAS translation memoised by its inputs: in memory (LRU over `size`
    entries) and, when given a DiskCache, on disk across processes.

    textworld's PDDL state calls `fast_downward.pddl2sas` through its module, so this object
    stands in for that module (everything but `pddl2sas` is passed through).
    """

    def __init__(self, size: int = 64, disk: DiskCache | None = None) -> None:
        import fast_downward

        self._module = fast_downward
        self._size = size
        self._memo: OrderedDict[str, Any] = OrderedDict()
        self.disk = disk

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def pddl2sas(self, domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
        key = _digest(domain, problem, str(bool(optimize)))
        if key in self._memo:
            self._memo.move_to_end(key)
            return self._memo[key]
        disk_key = self.disk.key(domain, problem, str(bool(optimize))) if self.disk else ""
        result = self.disk.get(disk_key) if self.disk else None
        if result is None:
            result = self._module.pddl2sas(domain, problem, verbose=verbose, optimize=optimize)
            if self.disk:
                self.disk.put(disk_key, result)
        self._memo[key] = result
        if len(self._memo) > self._size:
            self._memo.popitem(last=False)
        return result



class ParseCache:
    """A memoised `_parse_and_convert` of one textworld module; callers get fresh deep copies."""

    def __init__(self, parse: Any, size: int = 4096) -> None:
        self._parse = parse
        self._size = size
        self._memo: dict[tuple, Any] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = (args, tuple(sorted(kwargs.items())))
        if key not in self._memo:
            if len(self._memo) >= self._size:  # the grammar has far fewer strings: only a safety net
                self._memo.clear()
            self._memo[key] = self._parse(*args, **kwargs)
        return copy.deepcopy(self._memo[key])


PROPOSITION_MEMO_SIZE = 20_000  # an ALFWorld game adds a few hundred; 0 leaves textworld's memo unbounded


class BoundedMemo(dict):
    """textworld's memo of Propositions and Signatures with a bound: past `size` entries the oldest
    half is dropped (the current game's entries are the newest), so the memo holds a few dozen
    games' worth and no more.

    textworld makes both classes through `mementos`, whose one process-wide dict keeps every
    instance ever made, forever. Object names are unique to a game (`Apple_bar__minus_01_dot_23...`),
    so a process that plays many games grows by every game's propositions (about 0.4 MB an
    ALFWorld game: benchmarks/bench_soak.py). Both classes compare and hash by value and are never
    changed once made, so an evicted entry is only made again, equal, when next asked for: no game
    plays differently.
    """

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def __setitem__(self, key: Any, value: Any) -> None:
        if len(self) >= self.size:  # dicts keep insertion order: drop the oldest half in one go
            for old in list(itertools.islice(self, max(1, self.size // 2))):
                del self[old]
        super().__setitem__(key, value)


def bound_proposition_memo(size: int | None = None) -> BoundedMemo | None:
    """Put a `BoundedMemo` of `size` (default PROPOSITION_MEMO_SIZE) in place of the unbounded memo
    textworld's logic classes use, keeping its newest entries, and return it; a memo already
    bounded takes `size` when one is given. A size of 0 leaves textworld's own (what the soak
    benchmark's baseline measures), and so does a mementos of another shape than this was written for."""
    import mementos.core

    current = getattr(mementos.core, "_memento_cache", None)
    if isinstance(current, BoundedMemo):
        current.size = current.size if size is None else max(1, size)
        return current
    size = PROPOSITION_MEMO_SIZE if size is None else size
    if size <= 0 or type(current) is not dict:
        return None
    memo = BoundedMemo(size)
    memo.update(list(current.items())[-size:])
    mementos.core._memento_cache = memo
    return memo


def shallow_copy_context(context: dict[str, Any]) -> dict[str, Any]:
    """textgen's copy_context without deep copies: derivations only read the entities and
    variables they are given and replace (never mutate) those mappings' values."""
    return {
        "state": context["state"],
        "facts": context["facts"],
        "variables": dict(context["variables"]),
        "mapping": dict(context["mapping"]),
        "entity_infos": context["entity_infos"],
    }


class EngineCaches:
    """The caches of one process, stood in for textworld's own functions while the engine runs."""

    def __init__(self, disk: DiskCache | None = None) -> None:
        import textworld.envs.pddl.logic as pddl_logic
        import textworld.envs.pddl.textgen as textgen
        import textworld.logic as logic

        self.logic = LogicCache()
        self.translations = TranslationCache(disk=disk)
        self._swaps = [
            (pddl_logic, "fast_downward", self.translations),
            (textgen, "_parse_and_convert", ParseCache(textgen._parse_and_convert)),
            (textgen, "copy_context", shallow_copy_context),
            (logic, "_parse_and_convert", ParseCache(logic._parse_and_convert)),
        ]

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Swap the caches in for the duration of one engine call, then put textworld back."""
        previous = [getattr(module, name) for module, name, _ in self._swaps]
        for module, name, replacement in self._swaps:
            setattr(module, name, replacement)
        try:
            yield
        finally:
            for (module, name, _), original in zip(self._swaps, previous):
                setattr(module, name, original)
