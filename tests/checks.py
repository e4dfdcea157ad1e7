"""Checks that several test files make of recorded episodes."""

from __future__ import annotations

from sparse_react.lines import Kind


def assert_never_walks_to_hidden_objects(episode) -> None:
    """Every object it takes or lamp it uses appeared in an earlier observation."""
    shown = episode.initial_observation
    for entry in episode.entries:
        if entry.kind is Kind.ACTION and entry.text.startswith(("take ", "use ")):
            name = entry.text.split(" ", 1)[1].partition(" from ")[0]
            assert f" {name}" in shown, f"{episode.game}: {entry.text!r} before seeing {name}"
        shown += "\n" + entry.observation


def alfworld_found() -> bool:
    """Whether ALFWorld's games are where ALFWORLD_DATA says (alfworld itself sets a default that may be empty)."""
    from sparse_react.household.catalog import GameSetError, alfworld_data_dir

    try:
        alfworld_data_dir()
    except GameSetError:
        return False
    return True
