"""Every sentence the experts write: the plan at the start, a subgoal done, a surprise, why an
action, the goal and subgoal, where to look, and the relabelling expert's corrections. Each is a
function of what the expert knows; none decides when it is written (`thoughts.py` does)."""

from __future__ import annotations

from sparse_react.policies.expert.knowledge import Knowledge
from sparse_react.policies.expert.task import TRANSFORM, TRANSFORM_VERBS, ExpertTask, a, kind
from sparse_react.policies.search_order import ranked_kinds, search_order


def surprise(subgoal: str) -> str:
    """After a command that did nothing."""
    return f"That did nothing. I still need to {subgoal}; I'll try another way."


def goal(known: Knowledge, subgoal: str) -> str:
    """The goal and the current subgoal (ReAct-IM's only thought)."""
    return f"Goal: {known.task.decomposition()}. Current subgoal: {subgoal}."


def why(known: Knowledge, command: str, subgoal: str) -> str:
    """Why `command` is the next action."""
    verb, _, rest = command.partition(" ")
    place, obj = command.rpartition(" to ")[2], known.task.obj
    reasons = {
        "go": f"I'll go to the {place} to {subgoal}.",
        "open": f"The {rest} is closed; I'll open it.",
        "take": f"There is the {obj}; I'll take it.",
        "move": f"I'm at the {place}; I'll put the {obj} there.",
        "use": f"I'll turn on the {rest} to look at the {obj}.",
        **{v: f"The {rest.rpartition(' with ')[2]} is here; I'll {v} the {obj} with it." for v in TRANSFORM_VERBS},
    }
    return reasons.get(verb, f"I'll {command} to {subgoal}.")


# -- the plain expert, which knows where everything is ----------------------------------------
def likely_places(task: ExpertTask) -> str:
    """Where such an object usually is, by the kinds of receptacle in this room."""
    places = ranked_kinds(task.obj, [kind(r) for r in task.receptacles])[:4]
    if not places:
        return f"I need to find {a(task.obj)}."
    return f"{a(task.obj)} is most likely in or on {', '.join(map(a, places))}."


def planned_opening(known: Knowledge) -> str:
    return f"To solve this I need to {known.task.decomposition()}. First, {likely_places(known.task)}"


def planned_new_subgoal(known: Knowledge, subgoal: str) -> str:
    """A subgoal done, and the next one (`subgoal`)."""
    task, o = known.task, known.task.obj
    if subgoal.startswith("find"):
        return f"One {o} is in place. Now I need a second one: {likely_places(task)}"
    if subgoal.startswith("turn on"):
        return f"I have the {o}. Next I need a lamp to look at it under; it is probably on a desk or a sidetable."
    if subgoal.startswith("put") and known.progress.transformed:
        return f"The {o} is {TRANSFORM[task.task_type][1]} now. Next, I put it in/on the {task.target}."
    if subgoal.startswith("put"):
        return f"Now I have the {o}. Next, I put it in/on the {task.target}."
    verb, _, tool = task.transform or ("", "", "")
    return f"Now I have the {o}. Next, I {verb} it with the {tool}."


# -- the searching experts, which know only what they have seen -------------------------------
def search_for(known: Knowledge, wanted: str) -> str:
    """Where to look for a `wanted` thing next: the likely receptacles not yet searched, in order."""
    order = [r for r in search_order(wanted, known.task.receptacles) if r not in known.reading.searched]
    if not order:
        return f"I'll look for {a(wanted)}."
    kinds = list(dict.fromkeys(kind(r) for r in order))
    return (f"{a(wanted).capitalize()} is more likely to appear in/on {', '.join(kinds[:5])}. "
            f"I'll check them one by one, starting with {order[0]}.")


def search_opening(known: Knowledge) -> str:
    obj = known.task.obj
    return f"To solve this I need to {known.task.decomposition()}. First I need to find {a(obj)}. {search_for(known, obj)}"


def search_new_subgoal(known: Knowledge, subgoal: str) -> str:
    """A subgoal done (a thing found, taken, placed), and the next one (`subgoal`)."""
    o, target = known.task.obj, known.task.target
    if subgoal.startswith("take"):
        name, place = subgoal.removeprefix("take the ").split(" from the ")
        return f"Now I find {a(o)} ({name}) in/on the {place}. Next, I take it."
    if subgoal.startswith("turn on"):
        return f"Now I find the {target} ({subgoal.removeprefix('turn on the ')}). Next, I turn it on to look at the {o}."
    if subgoal.startswith("find") and known.progress.holding:
        return f"I have the {o}. Next, I need to find {a(target)}. {search_for(known, target)}"
    if subgoal.startswith("find"):
        return f"One {o} is in place. Now I need a second one. {search_for(known, o)}"
    return planned_new_subgoal(known, subgoal)


# -- the relabelling expert's corrections -----------------------------------------------------
def correction(known: Knowledge, claimed: str, subgoal: str) -> str:
    """After a thought that claimed a `claimed` thing found which no observation showed."""
    r = known.reading
    if any(kind(name) == claimed for name in r.seen) or (r.held or "").startswith(claimed + " "):
        return f"I was wrong: the {claimed} I named has not appeared anywhere I have looked. " + replan(known, subgoal)
    return (f"I was wrong: I have not found {a(claimed)}; none has appeared anywhere I have looked. "
            + replan(known, subgoal))


def replan(known: Knowledge, subgoal: str) -> str:
    """The plan again from here: what is still to do, and where to look next and why."""
    r, o, target = known.reading, known.task.obj, known.task.target
    if r.held and kind(r.held) != o:
        return f"I am holding the {r.held}, which the task does not need. I'll put it down, then {subgoal}."
    if subgoal.startswith("take the "):
        name, place = subgoal.removeprefix("take the ").split(" from the ")
        there = "It is here; I'll take it." if r.location == place else "I'll go there and take it."
        return f"I have seen {a(o)} ({name}) in/on the {place}. {there}"
    if subgoal.startswith("turn on the "):
        lamp = subgoal.removeprefix("turn on the ")
        there = "It is here" if r.location == r.seen.get(lamp) else "I'll go there"
        return f"I have seen the {target} ({lamp}) in/on the {r.seen.get(lamp)}. {there}; I'll turn it on."
    if subgoal.startswith("find "):
        wanted = known.wanted() or o
        looked = [p for p in search_order(wanted, known.task.receptacles) if p in r.searched]
        done = f"I have already looked in/on {', '.join(looked)}. " if looked else ""
        return f"I still need to {subgoal}. {done}{search_for(known, wanted)}"
    return f"I still need to {subgoal}. I'll go on from here."
