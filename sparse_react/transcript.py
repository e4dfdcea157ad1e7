"""How an episode reads to a model: the one rendering that the model policy plays with
(`policies/react.py`) and fine-tuning trains on (`training/finetune.py`), so the two cannot drift apart.

The text is the episode's fixed head (its prefix, under the tokenizer's chat template when it has
one), then one `> line` and the game's answer per turn, then the `>` that asks for the next line.
It only grows from turn to turn, which is what lets a model keep its KV cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

PROMPT = ">"


@dataclass(frozen=True)
class Transcript:
    """An episode's text and where the agent's lines are in it: character spans of each ` line\\n`
    after a `>` (what fine-tuning puts its loss on)."""

    text: str
    agent_spans: tuple[tuple[int, int], ...]


def render_head(tokenizer: Any, prefix: str, chat: bool) -> str:
    """The episode's fixed prefix as the model reads it: one user message under a chat template,
    after which the turns continue as raw text; or the plain prefix without one."""
    if not chat:
        return prefix
    return tokenizer.apply_chat_template([{"role": "user", "content": prefix.rstrip("\n")}],
                                         tokenize=False, add_generation_prompt=True)


def render(head: str, turns: Sequence[tuple[str, str]], window: int = 0, ask: bool = True) -> Transcript:
    """`head`, then each (line, answer) turn (only the last `window` ones when `window > 0`), then
    the `>` that asks for the next line (`ask=False` leaves it out: a finished episode to train on)."""
    text, spans = head, []
    for line, answer in turns[-window:] if window > 0 else turns:
        text += PROMPT
        spans.append((len(text), len(text) + len(line) + 2))
        text += f" {line}\n{answer}\n"
    return Transcript(text + PROMPT if ask else text, tuple(spans))


def chat_messages(prefix: str, turns: Sequence[tuple[str, str]], window: int = 0) -> list[dict[str, str]]:
    """The same episode as chat messages, for a server that applies its own chat template: the
    prefix as the first user message, then each line as an assistant message and the game's answer
    as the next user message (only the last `window` turns when `window > 0`). Like `render`, it only
    grows from turn to turn, so a server's prefix cache keeps the earlier turns."""
    messages = [{"role": "user", "content": prefix.rstrip("\n")}]
    for line, answer in turns[-window:] if window > 0 else turns:
        messages += [{"role": "assistant", "content": line}, {"role": "user", "content": answer}]
    return messages
