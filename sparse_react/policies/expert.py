"""The expert: the planner's next command, with thoughts in the chosen rhythm's style.

It replans from wherever the game is (following the stored solution while it is on it), so it
recovers from any reachable state and control can be handed to it mid-episode. Its thoughts are
written from the task and the plan:

- sparse: at the start (goal decomposition and where to look), when a subgoal is done and the
  next one is chosen, when the search for an object starts, and after a surprise;
- dense: before every action (the sparse thought where there is one, otherwise why this action);
- im: before every action, only the goal decomposition and the current subgoal;
- act: none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from sparse_react.agent import Context
from sparse_react.claims import found_claims, shown
from sparse_react.lines import NOTHING_HAPPENS, THINK_PREFIX, Kind, thought_line
from sparse_react.planner import Planner
from sparse_react.policies.base import LinePolicy
from sparse_react.policies.search_order import ranked_kinds, search_order
from sparse_react.rhythms import ExpertThoughts
from sparse_react.tasks import TRANSFORMS, TaskType

# (verb, state, appliance as the game text names it) per state-changing task
TRANSFORM = {task: (t.verb, t.state, t.appliance.lower()) for task, t in TRANSFORMS.items()}
TRANSFORM_VERBS = tuple(t.verb for t in TRANSFORMS.values())


class ExpertError(RuntimeError):
    """The planner found no way to win from the current state."""


@dataclass
class Progress:
    """Which subgoals of the task are done, read off the commands sent so far."""

    holding: bool = False
    transformed: bool = False
    placed: int = 0


class ExpertPolicy(LinePolicy):
    """The planner's commands, with the thoughts the context's rhythm declares (`ExpertThoughts`)."""

    name = "expert"

    def __init__(self, planner: Planner | None = None) -> None:
        super().__init__()
        self.planner = planner or Planner()

    def begin(self, context: Context) -> None:
        self._context = context
        self._progress = Progress()
        self._phase = ""
        self._thought_for: str | None = None  # the action the last thought was about
        spec = context.game.spec
        self._obj = spec.obj.lower()
        self._target = spec.parent.lower()
        self._task_type = spec.task_type
        self._receptacles = _receptacles_in(context.last_observation)
        self._places = ranked_kinds(self._obj, [r.rpartition(" ")[0] for r in self._receptacles])[:4]

    def next_line(self, context: Context, admissible: Sequence[str]) -> str:
        self._progress = _progress_of(context.turns)
        command = self.plan_next(admissible)
        thought = self._thought(context, command) if Kind.THOUGHT in context.allowed else None
        if thought and self._thought_for != command:
            self._thought_for = command
            return thought_line(thought)
        if Kind.ACTION not in context.allowed:
            raise ExpertError(f"rhythm {context.rhythm.name!r} wants a thought the expert has none for")
        self._thought_for = None
        return command

    def plan_next(self, admissible: Sequence[str]) -> str:
        """The first command of a winning plan from the current state."""
        game = self._context.game
        plan = self.planner.plan(game, self._context.actions)
        game = game.path
        if not plan:
            raise ExpertError(f"the planner finds no way to win {game} from here")
        if plan[0] not in admissible:
            raise ExpertError(f"the planner's command {plan[0]!r} is not admissible in {game}")
        return plan[0]

    # -- thoughts ---------------------------------------------------------------------------
    def _thought(self, context: Context, command: str) -> str | None:
        phase = self._current_phase()
        style = context.rhythm.expert_thoughts
        if style is ExpertThoughts.GOAL_AND_SUBGOAL:
            return f"Goal: {self._decomposition()}. Current subgoal: {phase}."
        key = self._key_moment(context, phase)
        if style is ExpertThoughts.KEY_MOMENTS:
            return key
        if style is ExpertThoughts.KEY_MOMENTS_ELSE_WHY:
            return key or self._why(command)
        return None

    def _key_moment(self, context, phase: str) -> str | None:
        """The sparse thought due before the next action, if this is a key moment: the start, a
        surprise, or a new phase."""
        surprise = context.turns and context.turns[-1][1] == NOTHING_HAPPENS
        changed, self._phase = phase != self._phase, phase
        if not context.turns:
            return self._opening()
        if surprise:
            return f"That did nothing. I still need to {phase}; I'll try another way."
        return self._new_phase(phase) if changed else None

    def _opening(self) -> str:
        return f"To solve this I need to {self._decomposition()}. First, {self._search()}"

    def _new_phase(self, phase: str) -> str:
        p = self._progress
        if phase.startswith("find"):
            return f"One {self._obj} is in place. Now I need a second one: {self._search()}"
        if phase.startswith("turn on"):
            return f"I have the {self._obj}. Next I need a lamp to look at it under; it is probably on a desk or a sidetable."
        if phase.startswith("put") and p.transformed:
            return f"The {self._obj} is {TRANSFORM[self._task_type][1]} now. Next, I put it in/on the {self._target}."
        if phase.startswith("put"):
            return f"Now I have the {self._obj}. Next, I put it in/on the {self._target}."
        verb, _, tool = TRANSFORM.get(self._task_type, ("", "", ""))
        return f"Now I have the {self._obj}. Next, I {verb} it with the {tool}."

    def _why(self, command: str) -> str:
        verb, _, rest = command.partition(" ")
        place = command.rpartition(" to ")[2]
        reasons = {
            "go": f"I'll go to the {place} to {self._phase}.",
            "open": f"The {rest} is closed; I'll open it.",
            "take": f"There is the {self._obj}; I'll take it.",
            "move": f"I'm at the {place}; I'll put the {self._obj} there.",
            "use": f"I'll turn on the {rest} to look at the {self._obj}.",
            **{v: f"The {rest.rpartition(' with ')[2]} is here; I'll {v} the {self._obj} with it." for v in TRANSFORM_VERBS},
        }
        return reasons.get(verb, f"I'll {command} to {self._phase}.")

    def _decomposition(self) -> str:
        o, t = self._obj, self._target
        if self._task_type is TaskType.LOOK:
            return f"find {_a(o)}, take it, and look at it under the {t}"
        if self._task_type is TaskType.PICK_TWO:
            return f"find two {o}s and put both in/on the {t}"
        if self._task_type in TRANSFORM:
            verb, _, tool = TRANSFORM[self._task_type]
            return f"find {_a(o)}, take it, {verb} it with the {tool}, and put it in/on the {t}"
        return f"find {_a(o)}, take it, and put it in/on the {t}"

    def _search(self) -> str:
        if not self._places:
            return f"I need to find {_a(self._obj)}."
        return f"{_a(self._obj)} is most likely in or on {', '.join(map(_a, self._places))}."

    def _current_phase(self) -> str:
        p, o, t = self._progress, self._obj, self._target
        if self._task_type is TaskType.LOOK:
            return f"find and take {_a(o)}" if not p.holding else f"turn on the {t}"
        if not p.holding:
            return f"find and take a second {o}" if p.placed else f"find and take {_a(o)}"
        if self._task_type in TRANSFORM and not p.transformed:
            verb, _, tool = TRANSFORM[self._task_type]
            return f"{verb} the {o} with the {tool}"
        return f"put the {o} in/on the {t}"


def _progress_of(turns: Sequence[tuple[str, str]]) -> Progress:
    """Subgoals done, read off every command that did something (works mid-episode too)."""
    p = Progress()
    for command, observation in turns:
        verb = command.split(" ", 1)[0]
        if observation == NOTHING_HAPPENS or verb == THINK_PREFIX:
            continue
        if verb == "take":
            p.holding = True
        elif verb == "move":
            p.placed, p.holding = p.placed + 1, False
        elif verb in TRANSFORM_VERBS:
            p.transformed = True
    return p


def _a(noun: str) -> str:
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


_ENTITY = re.compile(r"\b(?:an?|the) ([a-z]+ \d+)")


def _receptacles_in(observation: str) -> list[str]:
    """The receptacles the first observation names (`cabinet 3`), in its order."""
    return list(dict.fromkeys(_ENTITY.findall(observation.partition("Your task is to:")[0])))



@dataclass
class SearchState:
    """What the agent has seen so far, read off the episode (nothing the game has not shown)."""

    location: str | None = None
    searched: set[str] = field(default_factory=set)
    closed_here: bool = False
    seen: dict[str, str] = field(default_factory=dict)  # object name -> receptacle it was last seen in/on
    held: str | None = None


def _search_state(turns: Sequence[tuple[str, str]]) -> SearchState:
    s = SearchState()
    for command, observation in turns:
        verb, _, rest = command.partition(" ")
        if observation == NOTHING_HAPPENS or verb == THINK_PREFIX:
            continue
        if verb == "go":
            s.location = rest.removeprefix("to ")
            s.closed_here = "is closed" in observation
        elif verb == "open":
            s.closed_here = False
        if s.location and not s.closed_here:
            s.searched.add(s.location)
            for name in _ENTITY.findall(observation):
                if name != s.location:
                    s.seen[name] = s.location
        if verb == "take":
            s.held = rest.partition(" from ")[0]
            s.seen.pop(s.held, None)
        elif verb == "move":
            obj, _, place = rest.partition(" to ")
            s.seen[obj], s.held = place, None
    return s


class SearchingExpertPolicy(ExpertPolicy):
    """The expert without privileged knowledge of where things are.

    It looks for the task's object (and, for Look tasks, the lamp) by visiting the room's
    receptacles in a fixed order: kinds ranked by how often training games put that object there
    (`search_order`), instances by number, opening closed ones. Once the thing has been seen it
    goes there, then to the appliance and the goal receptacle, which the room description names
    from the start (the planner only steps in if a command of its own is not admissible). Its
    trajectories are what a model can learn to imitate: they never walk straight to a hidden object.
    """

    name = "search-expert"

    def begin(self, context: Context) -> None:
        super().begin(context)
        self._state = SearchState()

    def next_line(self, context: Context, admissible: Sequence[str]) -> str:
        self._state = _search_state(context.turns)
        return super().next_line(context, admissible)

    def plan_next(self, admissible: Sequence[str]) -> str:
        command = self._search_command(admissible) or self._finish_command(admissible)
        return command if command in admissible else super().plan_next(admissible)

    def _finish_command(self, admissible: Sequence[str]) -> str | None:
        """With the object in hand: to the appliance, then to the goal receptacle (both in view
        from the start). Scripted rather than planned: the planner takes seconds per state here."""
        held, here = self._state.held, self._state.location
        if held is None:
            return None
        if self._task_type in TRANSFORM and not self._progress.transformed:
            verb, _, kind = TRANSFORM[self._task_type]
            place = self._first(kind)
            command = f"{verb} {held} with {place}"
        else:
            place = self._first(self._target)
            command = f"move {held} to {place}"
        if place is None or here != place:
            return place and f"go to {place}"
        return command if command in admissible or f"open {place}" not in admissible else f"open {place}"

    def _first(self, kind: str) -> str | None:
        """The lowest-numbered receptacle of this kind in the room."""
        same = [r for r in self._receptacles if r.rpartition(" ")[0] == kind]
        return min(same, key=lambda r: int(r.rpartition(" ")[2]), default=None)

    def _wanted(self) -> str | None:
        """The object type still to be found: the task's object, or the lamp once it is held."""
        p = self._progress
        if not p.holding:
            return self._obj
        return self._target if self._task_type is TaskType.LOOK else None

    def _found(self, kind: str) -> tuple[str, str] | None:
        for name, place in self._state.seen.items():
            if name.rpartition(" ")[0] == kind and place != self._target_place():
                return name, place
        return None

    def _target_place(self) -> str | None:
        return self._first(self._target) if self._task_type is TaskType.PICK_TWO else None

    def _search_command(self, admissible: Sequence[str]) -> str | None:
        kind = self._wanted()
        if kind is None:
            return None
        s = self._state
        found = self._found(kind)
        if found:
            name, place = found
            if s.location != place:
                return f"go to {place}"
            return f"use {name}" if kind == self._target else f"take {name} from {place}"
        if s.location and s.closed_here:
            return f"open {s.location}"
        # Some receptacles share a spot (stove burners): the game offers no `go to` between them.
        rest = [f"go to {r}" for r in search_order(kind, self._receptacles) if r not in s.searched]
        return next((c for c in rest if c in admissible), None)

    def _current_phase(self) -> str:
        kind = self._wanted()
        if kind is None:
            return super()._current_phase()
        found = self._found(kind)
        if found and kind == self._target:
            return f"turn on the {found[0]}"
        if found:
            return f"take the {found[0]} from the {found[1]}"
        second = "a second " + kind if self._progress.placed else _a(kind)
        return f"find {second}"

    def _opening(self) -> str:
        return f"To solve this I need to {self._decomposition()}. First I need to find {_a(self._obj)}. {self._search()}"

    def _new_phase(self, phase: str) -> str:
        if phase.startswith("take"):
            name, place = phase.removeprefix("take the ").split(" from the ")
            return f"Now I find {_a(self._obj)} ({name}) in/on the {place}. Next, I take it."
        if phase.startswith("turn on"):
            return f"Now I find the {self._target} ({phase.removeprefix('turn on the ')}). Next, I turn it on to look at the {self._obj}."
        if phase.startswith("find") and self._progress.holding:
            return f"I have the {self._obj}. Next, I need to find {_a(self._target)}. {self._search_for(self._target)}"
        if phase.startswith("find"):
            return f"One {self._obj} is in place. Now I need a second one. {self._search_for(self._obj)}"
        return super()._new_phase(phase)

    def _search(self) -> str:
        return self._search_for(self._obj)

    def _search_for(self, kind: str) -> str:
        order = [r for r in search_order(kind, self._receptacles) if r not in self._state.searched]
        if not order:
            return f"I'll look for {_a(kind)}."
        kinds = list(dict.fromkeys(r.rpartition(" ")[0] for r in order))
        return (f"{_a(kind).capitalize()} is more likely to appear in/on {', '.join(kinds[:5])}. "
                f"I'll check them one by one, starting with {order[0]}.")


def _kind(name: str) -> str:
    return name.rpartition(" ")[0]


@dataclass(frozen=True)
class Label:
    """The line(s) a good agent writes next from a state: a thought where one is due, then the action."""

    thought: str | None
    action: str


@dataclass
class History:
    """Everything an episode's lines have shown, beyond `SearchState`: when each place was last
    visited, where the held object came from, what has been transformed and placed."""

    state: SearchState
    progress: Progress
    last_visit: dict[str, int] = field(default_factory=dict)
    taken_from: str | None = None
    placed: dict[str, str] = field(default_factory=dict)  # the task's objects put in/on a goal receptacle -> where
    last_thought: str | None = None
    last_is_thought: bool = False
    last_action: str | None = None
    surprise: bool = False


class RelabellingExpertPolicy(SearchingExpertPolicy):
    """The search expert, writing from any state of any episode (a model's too) only what its
    history has shown: the places looked in, what was seen there, what is held.

    Unlike the search expert it never asks the planner (which knows where hidden objects are): with
    every likely place searched it looks in the others, then again in those seen longest ago. It
    puts down an object the task does not need, and counts only the task's own objects as taken,
    transformed or placed. Beside the search expert's own thoughts (the plan, a surprise, a subgoal
    done) it corrects the last thought when it claims an object no observation showed. With
    `replan_detours` it also re-plans after every detour (the last action was not the one this
    expert would have chosen), saying where to look next and why; off by default, since under the
    paper's step rule each such thought costs a step, and a model trained on them thinks where it
    used to act (see the README's Rounds). `label` answers for one state without playing; as a
    policy it plays from wherever it is handed control.
    """

    name = "relabel-expert"

    def __init__(self, planner: Planner | None = None, replan_detours: bool = False) -> None:
        super().__init__(planner)
        self.replan_detours = replan_detours

    def begin(self, context: Context) -> None:
        super().begin(context)
        self._receptacles = _receptacles_in(context.first_observation)
        self._places = ranked_kinds(self._obj, [_kind(r) for r in self._receptacles])[:4]
        self._admissible_before: dict[int, list[str]] = {}  # admissible commands by actions sent so far

    def next_line(self, context: Context, admissible: Sequence[str]) -> str:
        label = self.label_state(context, admissible)
        if label.thought and Kind.THOUGHT in context.allowed and self._thought_for != label.action:
            self._thought_for = label.action
            return thought_line(label.thought)
        if Kind.ACTION not in context.allowed:
            raise ExpertError(f"rhythm {context.rhythm.name!r} wants a thought the expert has none for")
        self._thought_for = None
        return label.action

    # -- one state ---------------------------------------------------------------------------
    def label_state(self, context: Context, admissible: Sequence[str]) -> Label:
        """`label` for the state `context` has reached, in its rhythm's thought style; remembers
        what the game offered before each action, to tell a detour from its own plan."""
        sent = len(context.actions)
        self._admissible_before.setdefault(sent, list(admissible))
        return self.label(context.turns, admissible, self._admissible_before.get(sent - 1),
                          context.rhythm.expert_thoughts)

    def label(self, turns: Sequence[tuple[str, str]], admissible: Sequence[str],
              admissible_before: Sequence[str] | None = None,
              style: ExpertThoughts = ExpertThoughts.KEY_MOMENTS) -> Label:
        """The next line(s) from the state `turns` lead to. `admissible_before` (the commands the
        game offered before the last action) lets it tell a detour from its own plan."""
        history = self._read(turns)
        action = self._action(admissible)
        phase = self._current_phase()
        if style is ExpertThoughts.NONE:
            return Label(None, action)
        if style is ExpertThoughts.GOAL_AND_SUBGOAL and history.last_is_thought:
            return Label(None, action)
        if style is ExpertThoughts.GOAL_AND_SUBGOAL:
            return Label(f"Goal: {self._decomposition()}. Current subgoal: {phase}.", action)
        thought = self._due_thought(turns, history, phase, action, admissible_before)
        if style is ExpertThoughts.KEY_MOMENTS_ELSE_WHY and thought is None and not history.last_is_thought:
            self._phase = phase
            thought = self._why(action)
        return Label(thought, action)

    def _due_thought(self, turns, history: History, phase: str, action: str,
                     admissible_before: Sequence[str] | None) -> str | None:
        if not turns:
            return self._opening()
        wrong = history.last_thought and false_belief(history.last_thought, turns)
        if history.last_is_thought:
            return self._correction(wrong, phase) if wrong else None
        if wrong:
            return self._correction(wrong, phase)
        if history.surprise:
            return f"That did nothing. I still need to {phase}; I'll try another way."
        self._read(turns[:_last_action_index(turns)])
        earlier_phase = self._current_phase()
        try:
            planned = self._action(admissible_before) if admissible_before is not None else history.last_action
        except ExpertError:
            planned = None
        self._read(turns)
        if earlier_phase != phase:  # a subgoal done, on the plan or by a detour that found the thing
            self._phase = earlier_phase
            return self._new_phase(phase)
        if self.replan_detours and planned != history.last_action:
            return self._replan(phase)
        return None

    # -- thoughts ----------------------------------------------------------------------------
    def _correction(self, kind: str, phase: str) -> str:
        if any(_kind(name) == kind for name in self._state.seen) or (self._state.held or "").startswith(kind + " "):
            return f"I was wrong: the {kind} I named has not appeared anywhere I have looked. " + self._replan(phase)
        return f"I was wrong: I have not found {_a(kind)}; none has appeared anywhere I have looked. " + self._replan(phase)

    def _replan(self, phase: str) -> str:
        """The plan again from here: what is still to do, and where to look next and why."""
        s = self._state
        if s.held and _kind(s.held) != self._obj:
            return f"I am holding the {s.held}, which the task does not need. I'll put it down, then {phase}."
        if phase.startswith("take the "):
            name, place = phase.removeprefix("take the ").split(" from the ")
            there = "It is here; I'll take it." if s.location == place else "I'll go there and take it."
            return f"I have seen {_a(self._obj)} ({name}) in/on the {place}. {there}"
        if phase.startswith("turn on the "):
            lamp = phase.removeprefix("turn on the ")
            there = "It is here" if s.location == s.seen.get(lamp) else "I'll go there"
            return f"I have seen the {self._target} ({lamp}) in/on the {s.seen.get(lamp)}. {there}; I'll turn it on."
        if phase.startswith("find "):
            kind = self._wanted() or self._obj
            looked = [r for r in search_order(kind, self._receptacles) if r in s.searched]
            done = f"I have already looked in/on {', '.join(looked)}. " if looked else ""
            return f"I still need to {phase}. {done}{self._search_for(kind)}"
        return f"I still need to {phase}. I'll go on from here."

    # -- actions -----------------------------------------------------------------------------
    def _action(self, admissible: Sequence[str]) -> str:
        s = self._state
        if s.held and _kind(s.held) != self._obj:
            return self._put_down(admissible)
        command = self._search_command(admissible) or self._finish_command(admissible)
        if command and command in admissible:
            return command
        if command and command.startswith("go to "):  # places that share a spot (a desk and its drawers): no `go to`
            here, s.location = s.location, command.removeprefix("go to ")
            there = self._search_command(admissible) or self._finish_command(admissible)
            s.location = here
            if there in admissible:
                return there
        kind = self._wanted()
        if kind is not None and not self._found(kind):
            return self._search_anywhere(kind, admissible)
        raise ExpertError(f"no command from what the history shows ({command!r} is not admissible)")

    def _put_down(self, admissible: Sequence[str]) -> str:
        s = self._state
        here = f"move {s.held} to {s.location}"
        if here in admissible:
            return here
        if s.location and f"open {s.location}" in admissible:
            return f"open {s.location}"
        back = f"go to {self._history.taken_from}"
        if back in admissible:
            return back
        raise ExpertError(f"cannot put down the {s.held} from what the history shows")

    def _search_anywhere(self, kind: str, admissible: Sequence[str]) -> str:
        """Past the likely places: the others never searched, then every place again, the one seen
        longest ago first (the agent may have moved things, or seen a place while it was closed)."""
        s, ranked = self._state, search_order(kind, self._receptacles)
        places = ranked + [r for r in self._receptacles if r not in ranked]
        unseen = [r for r in places if r not in s.searched]
        again = sorted((r for r in places if r != s.location), key=lambda r: self._history.last_visit.get(r, -1))
        for place in unseen + again:
            if f"go to {place}" in admissible:
                return f"go to {place}"
        raise ExpertError(f"nowhere left to look for {_a(kind)}")

    def _first(self, kind: str) -> str | None:
        """As the search expert's, except that the goal receptacle is the one the task's objects
        were already put in (a second object must join the first)."""
        history = getattr(self, "_history", None)
        if kind == self._target and history and history.placed:
            return next(iter(history.placed.values()))
        return super()._first(kind)

    def _found(self, kind: str) -> tuple[str, str] | None:
        placed = self._history.placed
        for name, place in self._state.seen.items():
            if _kind(name) == kind and name not in placed and place != self._target_place():
                return name, place
        return None

    # -- reading the history -----------------------------------------------------------------
    def _read(self, turns: Sequence[tuple[str, str]]) -> History:
        """Set the expert's state to what `turns` show (and return it)."""
        state = _search_state(turns)
        history = History(state, Progress())
        placed = history.placed
        transformed: set[str] = set()
        for step, (line, observation) in enumerate(turns):
            verb, _, rest = line.partition(" ")
            if verb.lower() == THINK_PREFIX:
                history.last_thought, history.last_is_thought = line.partition(" ")[2], True
                continue
            history.last_is_thought, history.last_action = False, line
            history.surprise = observation == NOTHING_HAPPENS
            if history.surprise:
                continue
            if verb == "go":
                history.last_visit[rest.removeprefix("to ")] = step
            elif verb == "take":
                name, _, history.taken_from = rest.partition(" from ")
                placed.pop(name, None)
            elif verb == "move":
                name, _, place = rest.partition(" to ")
                if _kind(name) == self._obj and _kind(place) == self._target:
                    placed[name] = place
            elif verb in TRANSFORM_VERBS:
                transformed.add(rest.partition(" with ")[0])
        if state.held:
            state.seen.pop(state.held, None)
        holding = state.held is not None and _kind(state.held) == self._obj
        history.progress = Progress(holding, holding and state.held in transformed, len(placed))
        self._state, self._progress, self._history = state, history.progress, history
        return history


def _last_action_index(turns: Sequence[tuple[str, str]]) -> int:
    return max((i for i, (line, _) in enumerate(turns) if not line.lower().startswith(THINK_PREFIX)), default=0)


def false_belief(thought: str, turns: Sequence[tuple[str, str]]) -> str | None:
    """The kind of object a thought claims found that no observation of `turns` has shown, else None
    (an object shown since, even elsewhere, needs no correction: the plan says where it is)."""
    observations = [o for line, o in turns if not line.lower().startswith(THINK_PREFIX)]
    for claim in found_claims(thought):
        if not shown(claim.name, observations):
            return claim.kind
    return None
