"""A deterministic generator of ALFWorld-compatible household games.

Each game is a PDDL problem for alfworld's domain, built on the object list of one of the 120
AI2-THOR rooms that ship with the alfworld package (kitchens 1-30, living rooms 201-230,
bedrooms 301-330, bathrooms 401-430). The room keeps the scene's receptacle types and instance
counts, its pickupable object types become targets and distractors, and every placement respects
alfworld's `VAL_RECEPTACLE_OBJECTS`. A game is only returned once the planner has solved it and
the solution has been replayed to a win.

Splits: about a quarter of the rooms of each kind and about a quarter of the (task type, object,
parent) combinations are held out for `valid_unseen`; `train` and `valid_seen` draw from the rest
and differ only in their random draws. Everything is derived from `random.Random` instances seeded
with integers (stable hashing through zlib.crc32), so the same arguments give byte-identical games
in any process.
"""

from __future__ import annotations

import json
import random
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from sparse_react.errors import UserError
from sparse_react.household.engine import Engine
from sparse_react.household.game_files import (
    COMPACT_GAME_FILE,
    SPLITS,
    GameFileError,
    alfworld_logic,
    compact_game,
    grammar_for_task,
)
from sparse_react.household.tasks import TRANSFORMS, TaskSpec, TaskType

GENERATOR_VERSION = 1
MAX_ATTEMPTS = 25
MAX_PLAN_STEPS = 25
MIN_RECEPTACLES = 10
MAX_RECEPTACLES = 40
SEEDS_PER_BATCH = 100_000  # generate_games derives game seeds as seed * SEEDS_PER_BATCH + index

ROOM_KINDS: dict[str, range] = {
    "kitchen": range(1, 31),
    "livingroom": range(201, 231),
    "bedroom": range(301, 331),
    "bathroom": range(401, 431),
}
TASK_ROOM_KINDS: dict[TaskType, tuple[str, ...]] = {
    TaskType.PICK: ("kitchen", "livingroom", "bedroom", "bathroom"),
    TaskType.PICK_TWO: ("kitchen", "livingroom", "bedroom", "bathroom"),
    TaskType.LOOK: ("livingroom", "bedroom"),
    TaskType.CLEAN: ("kitchen", "bathroom"),
    TaskType.HEAT: ("kitchen",),
    TaskType.COOL: ("kitchen",),
}
# The receptacle a state-changing task needs, and which a goal may then not name as its parent.
TASK_APPLIANCE: dict[TaskType, str] = {task: t.appliance for task, t in TRANSFORMS.items()}
# Parent receptacle types that ALFWorld's task folders use.
GOAL_PARENTS = frozenset({
    "ArmChair", "Bed", "Cabinet", "Cart", "CoffeeMachine", "CoffeeTable", "CounterTop", "Desk",
    "DiningTable", "Drawer", "Dresser", "Fridge", "GarbageCan", "Microwave", "Ottoman", "Safe",
    "Shelf", "SideTable", "Sofa", "StoveBurner", "Toilet", "ToiletPaperHanger",
})
# Pickupable types that ALFWorld never makes the object of a task.
NON_TARGETS = frozenset({
    "BaseballBat", "BasketBall", "TennisRacket", "Plunger", "ScrubBrush", "Boots", "TeddyBear",
    "WateringCan", "PaperTowel", "PaperTowelRoll", "ToiletPaperRoll", "Footstool",
})
LAMPS = ("DeskLamp", "FloorLamp")
LAMP_HOLDERS: dict[str, tuple[str, ...]] = {
    "DeskLamp": ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable"),
    "FloorLamp": ("SideTable", "Dresser", "Desk", "CoffeeTable", "ArmChair", "Sofa"),
}
# Layout names that are receptacles under another name in the PDDL problems.
LAYOUT_ALIASES = {"Sink": "SinkBasin", "Bathtub": "BathtubBasin"}
# Instance counts for receptacle types a layout's openable.json does not list.
DEFAULT_COUNTS = {"StoveBurner": 4}
# Types that get extra instances when a room has fewer than MIN_RECEPTACLES (or lose some above MAX).
EXPANDABLE = ("Drawer", "Cabinet", "Shelf", "SideTable", "CounterTop", "TowelHolder")
HELD_OUT_FRACTION = 4  # one in this many rooms / combinations is held out for valid_unseen


class GenerateError(UserError, ValueError):
    """A split, seed, count or room the generator cannot make games for; the message names it."""


class GenerationError(RuntimeError):
    """No solvable game could be made from a seed within MAX_ATTEMPTS tries."""


@dataclass(frozen=True)
class GeneratedGame:
    """One generated game: its folder spec, trial name, task sentence, PDDL problem and solution."""

    spec: TaskSpec
    trial: str
    task: str
    pddl_problem: str
    walkthrough: list[str]
    seed: int
    split: str

    def to_json(self) -> str:
        """The compact `game.json` text that `load_game_data` reads."""
        payload = compact_game(self.task, self.pddl_problem, self.walkthrough, seed=self.seed, split=self.split,
                               generator=GENERATOR_VERSION)
        return json.dumps(payload, indent=1) + "\n"


@dataclass(frozen=True)
class Room:
    """What a generated room is built from: one AI2-THOR scene's receptacles and object types."""

    scene: int
    kind: str
    receptacles: tuple[tuple[str, int], ...]  # (type, instance count), sorted by type
    objects: tuple[str, ...]  # pickupable object types found in the scene, sorted
    lamps: tuple[str, ...]

    @property
    def receptacle_types(self) -> frozenset[str]:
        return frozenset(t for t, _ in self.receptacles)

    @property
    def receptacle_count(self) -> int:
        return sum(n for _, n in self.receptacles)


# ---------------------------------------------------------------------------------------------
# Knowledge taken from the alfworld package


@lru_cache(maxsize=1)
def _constants() -> Any:
    from alfworld.gen import constants

    return constants


@lru_cache(maxsize=1)
def _receptacle_rules() -> dict[str, frozenset[str]]:
    """Static receptacle type -> the (unsliced) object types it may hold, from VAL_RECEPTACLE_OBJECTS."""
    c = _constants()
    movable = set(c.MOVABLE_RECEPTACLES)
    return {r: frozenset(o for o in objs if not o.endswith("Sliced"))
            for r, objs in c.VAL_RECEPTACLE_OBJECTS.items() if r not in movable}


@lru_cache(maxsize=1)
def pickupable_types() -> frozenset[str]:
    """Object types that real ALFWorld games mark pickupable (anything a receptacle may hold)."""
    return frozenset().union(*_receptacle_rules().values())


def object_flags(otype: str) -> tuple[str, ...]:
    """The unary facts a real ALFWorld problem states for an object of this type."""
    c = _constants()
    actions = c.VAL_ACTION_OBJECTS
    flags = []
    if otype in pickupable_types():
        flags.append("pickupable")
    if otype in c.MOVABLE_RECEPTACLES:
        flags.append("isReceptacleObject")
    for flag, key in (("cleanable", "Cleanable"), ("heatable", "Heatable"), ("coolable", "Coolable"),
                      ("toggleable", "Toggleable"), ("sliceable", "Sliceable")):
        if otype in actions[key]:
            flags.append(flag)
    return tuple(flags)


def _is_openable(rtype: str) -> bool:
    return rtype in _constants().OPENABLE_CLASS_SET


def room_kind(scene: int) -> str:
    """The room kind ('kitchen', 'livingroom', 'bedroom', 'bathroom') of an AI2-THOR scene number."""
    for kind, scenes in ROOM_KINDS.items():
        if scene in scenes:
            return kind
    raise GenerateError(f"scene {scene} is not one of the 120 AI2-THOR rooms")


def _layouts_dir() -> Path:
    import alfworld.gen

    return Path(alfworld.gen.__file__).parent / "layouts"


@lru_cache(maxsize=None)
def load_room(scene: int) -> Room:
    """Build the Room for an AI2-THOR scene from alfworld's layout files."""
    layouts = _layouts_dir()
    names = json.loads((layouts / f"FloorPlan{scene}-objects.json").read_text())
    instances = json.loads((layouts / f"FloorPlan{scene}-openable.json").read_text())
    rules = _receptacle_rules()
    counts: Counter[str] = Counter()
    for key in sorted(instances):
        rtype = LAYOUT_ALIASES.get(key.split("|")[0], key.split("|")[0])
        if rtype in rules:
            counts[rtype] += 1
    for name in names:
        rtype = LAYOUT_ALIASES.get(name, name)
        if rtype in rules and counts[rtype] == 0:
            counts[rtype] = DEFAULT_COUNTS.get(rtype, 1)
    _fit_receptacle_count(counts)
    objects = tuple(sorted({n for n in names if n in pickupable_types()}))
    lamps = tuple(lamp for lamp in LAMPS if lamp in names)
    return Room(scene, room_kind(scene), tuple(sorted(counts.items())), objects, lamps)


def _fit_receptacle_count(counts: Counter[str]) -> None:
    """Add or remove instances of expandable types so the room has MIN..MAX receptacles."""
    present = [t for t in EXPANDABLE if counts[t] > 0] or ["Drawer"]
    step = 0
    while sum(counts.values()) < MIN_RECEPTACLES:
        counts[present[step % len(present)]] += 1
        step += 1
    while sum(counts.values()) > MAX_RECEPTACLES:
        largest = max(present, key=lambda t: (counts[t], t))
        counts[largest] -= 1


@lru_cache(maxsize=1)
def all_scenes() -> tuple[int, ...]:
    """The scene numbers whose layout files ship with alfworld."""
    layouts = _layouts_dir()
    return tuple(s for scenes in ROOM_KINDS.values() for s in scenes
                 if (layouts / f"FloorPlan{s}-objects.json").exists()
                 and (layouts / f"FloorPlan{s}-openable.json").exists())


# ---------------------------------------------------------------------------------------------
# Splits


def _stable_hash(text: str) -> int:
    return zlib.crc32(text.encode("utf-8"))


def _scene_number(scene: str | int) -> int:
    text = str(scene)
    return int(text[1:] if text.startswith("g") else text)


@lru_cache(maxsize=1)
def unseen_scenes() -> frozenset[int]:
    """The scenes held out for valid_unseen: the quarter of each room kind with the lowest hash."""
    held: set[int] = set()
    available = set(all_scenes())
    for scenes in ROOM_KINDS.values():
        kind = sorted((s for s in scenes if s in available), key=lambda s: (_stable_hash(f"scene:{s}"), s))
        held.update(kind[: len(kind) // HELD_OUT_FRACTION])
    return frozenset(held)


def is_unseen_scene(scene: str | int) -> bool:
    """Whether a scene ('g7', '7' or 7) is reserved for the valid_unseen split."""
    return _scene_number(scene) in unseen_scenes()


def _combo_key(task_type: TaskType, obj: str, parent: str) -> str:
    return f"combo:{task_type.value}|{obj}|{parent}"


@lru_cache(maxsize=None)
def unseen_combos(task_type: TaskType) -> frozenset[tuple[str, str]]:
    """The (object, parent) pairs held out for valid_unseen.

    Of the combinations that fit at least one held-out room, the quarter (rounded up) with the
    lowest hash, so every task type keeps several unseen combinations.
    """
    task_type = TaskType(task_type)
    held_rooms = [load_room(s) for s in sorted(unseen_scenes())]
    fitting = [c for c in task_combos(task_type) if any(_combo_fits_room(task_type, *c, r) for r in held_rooms)]
    fitting.sort(key=lambda c: (_stable_hash(_combo_key(task_type, *c)), c))
    return frozenset(fitting[: -(-len(fitting) // HELD_OUT_FRACTION)])


def is_unseen_combo(spec: TaskSpec | tuple[TaskType, str, str]) -> bool:
    """Whether a (task type, object, parent) combination is reserved for the valid_unseen split."""
    task_type, obj, parent = (spec.task_type, spec.obj, spec.parent) if isinstance(spec, TaskSpec) else spec
    return (obj, parent) in unseen_combos(TaskType(task_type))


def _split_allows(split: str, unseen: bool) -> bool:
    return unseen == (split == "valid_unseen")


# ---------------------------------------------------------------------------------------------
# Task combinations


@lru_cache(maxsize=None)
def task_combos(task_type: TaskType) -> tuple[tuple[str, str], ...]:
    """All (object, parent) pairs a task type may use, in the style of ALFWorld's task folders."""
    c = _constants()
    rules = _receptacle_rules()
    targets = sorted(pickupable_types() - NON_TARGETS)
    if task_type is TaskType.LOOK:
        return tuple((obj, lamp) for obj in targets for lamp in LAMPS)
    needed = {TaskType.CLEAN: "Cleanable", TaskType.HEAT: "Heatable", TaskType.COOL: "Coolable"}.get(task_type)
    appliance = TASK_APPLIANCE.get(task_type)
    combos = []
    for obj in targets:
        if needed and obj not in c.VAL_ACTION_OBJECTS[needed]:
            continue
        for parent in sorted(GOAL_PARENTS):
            if parent != appliance and obj in rules.get(parent, ()):
                combos.append((obj, parent))
    return tuple(combos)


def _combo_fits_room(task_type: TaskType, obj: str, parent: str, room: Room) -> bool:
    """Whether a room has what the task needs: the object, the parent (or lamp) and an appliance."""
    if room.kind not in TASK_ROOM_KINDS[task_type] or obj not in room.objects:
        return False
    types = room.receptacle_types
    appliance = TASK_APPLIANCE.get(task_type)
    if appliance and appliance not in types:
        return False
    rules = _receptacle_rules()
    if task_type is TaskType.LOOK:
        if parent not in room.lamps or not any(h in types for h in LAMP_HOLDERS[parent]):
            return False
        return any(obj in rules[t] for t in types)
    if parent not in types:
        return False
    return any(obj in rules[t] for t in types if t != parent)


@lru_cache(maxsize=None)
def split_combos(task_type: TaskType, split: str) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
    """The (object, parent, scenes) choices a split offers for a task type; scenes sorted."""
    _check_split(split)
    rooms = [load_room(s) for s in all_scenes() if _split_allows(split, is_unseen_scene(s))]
    choices = []
    for obj, parent in task_combos(task_type):
        if not _split_allows(split, is_unseen_combo((task_type, obj, parent))):
            continue
        scenes = tuple(r.scene for r in rooms if _combo_fits_room(task_type, obj, parent, r))
        if scenes:
            choices.append((obj, parent, scenes))
    return tuple(choices)


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise GenerateError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")


# ---------------------------------------------------------------------------------------------
# Building one PDDL problem


def _receptacle_id(rtype: str, index: int) -> str:
    if rtype.endswith("Basin"):
        base = rtype[: -len("Basin")]
        return f"{base}_bar_{index}_bar_{rtype}"
    return f"{rtype}_bar_{index}"


@dataclass
class _Layout:
    """The instances of one candidate game while it is being built."""

    receptacles: list[tuple[str, str]]  # (id, type)
    objects: list[tuple[str, str]]  # (id, type)
    placement: dict[str, str]  # object id -> receptacle id
    counts: Counter[str]

    def add_object(self, otype: str, receptacle: str) -> str:
        self.counts[otype] += 1
        oid = f"{otype}_bar_{self.counts[otype]}"
        self.objects.append((oid, otype))
        self.placement[oid] = receptacle
        return oid


def _holders(layout: _Layout, otype: str, exclude: str | None = None) -> list[str]:
    rules = _receptacle_rules()
    return [rid for rid, rtype in layout.receptacles if otype in rules[rtype] and rtype != exclude]


def _target_receptacles(
    rng: random.Random, layout: _Layout, task_type: TaskType, obj: str, exclude: str | None, count: int
) -> list[str]:
    """Where the target instances go. A pick-two game keeps at most one in a closed receptacle:
    with several targets behind doors the planner's search grows by orders of magnitude."""
    holders = _holders(layout, obj, exclude)
    closed_limit = 1 if task_type is TaskType.PICK_TWO else count
    kinds = dict(layout.receptacles)
    open_holders = [r for r in holders if not _is_openable(kinds[r])]
    chosen: list[str] = []
    for _ in range(count):
        closed_used = sum(_is_openable(kinds[r]) for r in chosen)
        pool = holders if closed_used < closed_limit or not open_holders else open_holders
        chosen.append(rng.choice(pool))
    return chosen


def _build_layout(rng: random.Random, room: Room, task_type: TaskType, obj: str, parent: str) -> _Layout:
    """Place the lamp, the target objects and the distractors in the room's receptacles."""
    receptacles = [(_receptacle_id(t, i), t) for t, n in room.receptacles for i in range(1, n + 1)]
    layout = _Layout(receptacles, [], {}, Counter())
    if task_type is TaskType.LOOK:
        holders = [rid for rid, t in receptacles if t in LAMP_HOLDERS[parent]]
        layout.add_object(parent, rng.choice(holders))
    exclude = None if task_type is TaskType.LOOK else parent
    count = rng.randint(2, 4) if task_type is TaskType.PICK_TWO else rng.randint(1, 3)
    for receptacle in _target_receptacles(rng, layout, task_type, obj, exclude, count):
        layout.add_object(obj, receptacle)
    distractor_types = [t for t in room.objects if t != obj and _holders(layout, t)]
    rng.shuffle(distractor_types)
    wanted = min(MAX_RECEPTACLES, round(len(receptacles) * rng.uniform(0.9, 1.4)))
    placed = 0
    for index in range(len(distractor_types) * 3):
        if placed >= wanted:
            break
        otype = distractor_types[index % len(distractor_types)]
        if index >= len(distractor_types) and rng.random() < 0.5:
            continue  # a second or third instance only sometimes
        layout.add_object(otype, rng.choice(_holders(layout, otype)))
        placed += 1
    return layout


def _location_ids(layout: _Layout) -> dict[str, str]:
    return {rid: f"loc_bar_{i}" for i, (rid, _) in enumerate(layout.receptacles, start=1)}


def _goal_pddl(task_type: TaskType, obj: str, parent: str) -> str:
    from alfworld.gen.goal_library import gdict

    template = gdict[task_type.value]["pddl"].replace("#", "-")
    return template.format(obj=obj, recep=parent, toggle=parent).strip()


def _task_sentence(rng: random.Random, task_type: TaskType, obj: str, parent: str) -> str:
    from alfworld.gen.goal_library import gdict

    template = rng.choice(gdict[task_type.value]["templates"])
    return template.format(obj=obj.lower(), recep=parent.lower(), toggle=parent.lower()) + "."


def render_problem(name: str, layout: _Layout, goal: str, keep: frozenset[str] | None = None) -> str:
    """Write a layout and a goal as an alfworld PDDL problem.

    With `keep` (the object and receptacle types a solution can touch) the problem is the planning
    version: other objects are left out and only receptacles of a kept type or holding a kept
    object stay openable. Its optimal plans are optimal plans of the full problem, and the
    planner's search over every closed door in the room is what makes full problems slow.
    """
    rules = _receptacle_rules()
    locations = _location_ids(layout)
    objects = [(o, t) for o, t in layout.objects if keep is None or t in keep]
    relevant = {layout.placement[o] for o, _ in objects}
    otypes = sorted({t for _, t in objects})
    rtypes = sorted({t for _, t in layout.receptacles})
    start = "loc_bar_0"
    lines = [f"(define (problem {name})", "(:domain alfred)", "(:objects", "agent1 - agent"]
    lines += [f"{t}Type - otype" for t in otypes]
    lines += [f"{t}Type - rtype" for t in rtypes]
    lines += [f"{oid} - object" for oid, _ in objects]
    lines += [f"{rid} - receptacle" for rid, _ in layout.receptacles]
    lines += [f"{start} - location"] + [f"{loc} - location" for loc in locations.values()]
    lines += [")", "(:init", f"(atLocation agent1 {start})"]
    for rid, rtype in layout.receptacles:
        lines.append(f"(receptacleType {rid} {rtype}Type)")
        lines.append(f"(receptacleAtLocation {rid} {locations[rid]})")
        if _is_openable(rtype) and (keep is None or rtype in keep or rid in relevant):
            lines.append(f"(openable {rid})")
    lines += [f"(canContain {r}Type {o}Type)" for r in rtypes for o in otypes if o in rules[r]]
    for oid, otype in objects:
        lines.append(f"(objectType {oid} {otype}Type)")
        lines += [f"({flag} {oid})" for flag in object_flags(otype)]
        rid = layout.placement[oid]
        lines.append(f"(inReceptacle {oid} {rid})")
        lines.append(f"(objectAtLocation {oid} {locations[rid]})")
    lines += [")", goal, ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Solving and checking


_ENGINE: Any = None


def _engine() -> Any:
    """The process's shared Engine (creating one is slow)."""
    global _ENGINE
    if _ENGINE is None:
        _ENGINE = Engine()
    return _ENGINE


def game_data(task: str, pddl_problem: str, walkthrough: Sequence[str] = ()) -> dict[str, Any]:
    """The mapping Engine.load takes for a generated game (what load_game_data makes of game.json)."""
    domain, _ = alfworld_logic()
    return {"pddl_domain": domain, "grammar": grammar_for_task(task), "pddl_problem": pddl_problem,
            "walkthrough": list(walkthrough)}


def solve(task: str, pddl_problem: str, planning_problem: str | None = None,
          max_steps: int = MAX_PLAN_STEPS) -> list[str] | None:
    """A checked solution of a game, or None.

    The planner solves `planning_problem` (default: the game itself); the plan is kept only if it
    has 1..max_steps commands and, replayed on the game from its start, every command is
    admissible, the game is not won before the last command and is won after it.
    """
    engine = _engine()
    try:
        if planning_problem is not None:
            engine.load(Path("<planning>"), data=game_data(task, planning_problem))
            engine.reset()
            plan = engine.plan()
        engine.load(Path("<generated>"), data=game_data(task, pddl_problem))
        state = engine.reset()
        if planning_problem is None:
            plan = engine.plan()
    except (GameFileError, KeyError):
        return None
    if state.won or not plan or len(plan) > max_steps:
        return None
    for command in plan:
        if state.won or command not in state.admissible:
            return None
        state = engine.step(command)
    return plan if state.won else None


# ---------------------------------------------------------------------------------------------
# Public API


def _attempt_seed(seed: int, task_type: TaskType, split: str, attempt: int) -> int:
    return (seed << 32) | _stable_hash(f"{task_type.value}|{split}|{attempt}")


def _candidate(rng: random.Random, task_type: TaskType, split: str, seed: int) -> tuple[TaskSpec, str, str, str]:
    """Draw a combination, a room and a layout; return (spec, task, PDDL problem, planning problem)."""
    choices = split_combos(task_type, split)
    if not choices:
        raise GenerationError(f"no {task_type.value} combinations for split {split}")
    obj, parent, scenes = rng.choice(choices)
    room = load_room(rng.choice(scenes))
    layout = _build_layout(rng, room, task_type, obj, parent)
    spec = TaskSpec(task_type, obj, "None", parent, f"g{room.scene}")
    task = _task_sentence(rng, task_type, obj, parent)
    goal = _goal_pddl(task_type, obj, parent)
    keep = frozenset({obj, parent, TASK_APPLIANCE.get(task_type, parent)})
    problem = render_problem(f"gen_{seed}", layout, goal)
    return spec, task, problem, render_problem(f"gen_{seed}", layout, goal, keep)


def generate_game(seed: int, task_type: TaskType | str, split: str = "train") -> GeneratedGame:
    """Generate one solvable game of a task type for a split; the same arguments give the same game.

    Raises ValueError for a negative seed or an unknown split, GenerationError when MAX_ATTEMPTS
    candidates all fail the solvability check.
    """
    task_type = task_type if isinstance(task_type, TaskType) else TaskType.parse(task_type)
    _check_split(split)
    if seed < 0:
        raise GenerateError(f"seed must be >= 0, got {seed}")
    for attempt in range(MAX_ATTEMPTS):
        rng = random.Random(_attempt_seed(seed, task_type, split, attempt))
        spec, task, problem, planning = _candidate(rng, task_type, split, seed)
        walkthrough = solve(task, problem, planning)
        if walkthrough:
            return GeneratedGame(spec, f"trial_g{seed:06d}", task, problem, walkthrough, seed, split)
    raise GenerationError(f"no solvable {task_type.value} game for seed {seed} in {MAX_ATTEMPTS} attempts")


def generate_games(
    seed: int,
    count: int,
    task_types: Sequence[TaskType] | None = None,
    split: str = "train",
) -> Iterator[GeneratedGame]:
    """Generate `count` games, cycling through `task_types` (default all six) in order.

    Game i uses the seed `seed * SEEDS_PER_BATCH + i`, so the output depends only on the arguments.
    """
    types = tuple(task_types) if task_types else tuple(TaskType)
    if count > SEEDS_PER_BATCH:
        raise GenerateError(f"count must be at most {SEEDS_PER_BATCH}, got {count}")
    for index in range(count):
        yield generate_game(seed * SEEDS_PER_BATCH + index, types[index % len(types)], split)


def write_game(game: GeneratedGame, root: str | Path) -> Path:
    """Write `root/<task folder>/<trial>/game.json` and return its path."""
    path = Path(root) / game.spec.folder / game.trial / COMPACT_GAME_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(game.to_json())
    return path
