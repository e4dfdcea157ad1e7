"""What a line of an episode is: a thought (`think: ...`, answered `OK.`) or a command the game
answers. The one place these literals live, and the one rule of what a thought is (`is_thought`):
every other module asks it rather than looking at a line's start itself."""

from __future__ import annotations

import re
from enum import Enum

THINK_PREFIX = "think:"
THINK = THINK_PREFIX + " "
THOUGHT_REPLY = "OK."
NOTHING_HAPPENS = "Nothing happens."  # the game's answer to a command it does not accept
MAX_ACTION_TOKENS = 32  # a model's freely written command
MAX_THOUGHT_TOKENS = 48  # per thought, unless a fine-tuned model's card says how long its thoughts were


class Kind(str, Enum):
    THOUGHT = "thought"
    ACTION = "action"


def is_thought(line: str) -> bool:
    """A ReAct language step: a line starting with `think:` (case-insensitive)."""
    return line.lstrip().lower().startswith(THINK_PREFIX)


def kind_of(line: str) -> Kind:
    return Kind.THOUGHT if is_thought(line) else Kind.ACTION


def thought_line(text: str) -> str:
    """The line that writes the thought `text`."""
    return THINK + text


EMPTY_THOUGHT = THINK + "..."  # what a model's thought that came out empty is written as


def thought_text(line: str) -> str:
    """The thought a `think: ...` line writes (without its label)."""
    return line.strip()[len(THINK_PREFIX):].strip()


_LEADING = re.compile(r"^\s*(?:>\s*)*(?:(?:action|command)\s*:\s*)?", re.IGNORECASE)


def normalise_action(text: str) -> str:
    """A generated command as the game expects it: the first line, without a leading `>` or
    `Action:` label, quotes, backticks or trailing punctuation, whitespace collapsed."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    line = _LEADING.sub("", line)
    line = line.strip().strip("\"'`").strip()
    line = line.rstrip(".!?;,:").strip().strip("\"'`").strip()
    return " ".join(line.split())
