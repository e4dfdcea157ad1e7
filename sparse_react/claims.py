"""Claims a thought makes that the record can check: an object "found" (`Now I find a laptop
(laptop 1) in/on the shelf 7`), which some earlier observation must have shown (there)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from sparse_react.lines import Kind
from sparse_react.trajectory import Episode

_FOUND = re.compile(r"\b(?:find|found|see) (?:an? |the )?([a-z]+) \(([^)]*)\)(?: in/on the ([a-z]+ \d+))?",
                    re.IGNORECASE)


@dataclass(frozen=True)
class FoundClaim:
    """A thought's claim that an object (`name`, as the thought spells it) was found, maybe at `place`."""

    kind: str
    name: str
    place: str | None


def found_claims(thought: str) -> list[FoundClaim]:
    """Every "found" claim of a thought, in the project's phrasing (`find a X (X N) in/on the Y`)."""
    return [FoundClaim(kind.lower(), name.strip().lower(), place.lower() or None)
            for kind, name, place in _FOUND.findall(thought)]


def shown(name: str, observations: Iterable[str]) -> list[str]:
    """The observations that name the object `name` (`laptop 1`)."""
    pattern = re.compile(rf"(?<![a-z]){re.escape(name)}(?!\d)")
    return [o for o in observations if name and pattern.search(o)]


def contradicted(claim: FoundClaim, observations: Iterable[str]) -> bool:
    """True when no observation showed the claimed object, or none showed it at the claimed place."""
    seen = shown(claim.name, observations)
    return not seen or (claim.place is not None and not any(claim.place in o for o in seen))


def contradicted_claims(episode: Episode) -> list[tuple[int, FoundClaim]]:
    """(step, claim) for every "found" claim of the episode's thoughts that the observations
    before it contradict."""
    observations = [episode.initial_observation]
    out = []
    for entry in episode.entries:
        if entry.kind is Kind.THOUGHT:
            out += [(entry.step, c) for c in found_claims(entry.text) if contradicted(c, observations)]
        else:
            observations.append(entry.observation)
    return out
