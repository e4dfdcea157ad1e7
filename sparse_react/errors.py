"""The user's mistakes (a missing file, an unknown name, a folder made with other settings) are
`UserError`s: the command line prints their message alone. Anything else is a bug and keeps its
traceback."""

from __future__ import annotations


class UserError(Exception):
    """Bad input; the message names the file or value and says what to do."""
