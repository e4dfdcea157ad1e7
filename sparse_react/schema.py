"""What pydantic says about a file that does not fit its schema, as one line naming the field."""

from __future__ import annotations

from pydantic import ValidationError

QUIET_TYPES = ("json_invalid", "missing", "format")  # errors whose input is not worth quoting


def field_path(location: tuple) -> str:
    """`entries[3].text` for pydantic's ('entries', 3, 'text')."""
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in location).lstrip(".")


def first_error(exc: ValidationError) -> tuple[str, str]:
    """The first error's field and message (with the value it got, and how many more errors there are)."""
    error = exc.errors(include_url=False)[0]
    got = "" if error["type"] in QUIET_TYPES else f", got {str(error.get('input'))[:40]!r}"
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return field_path(error["loc"]), f"{error['msg']}{got}{more}"
