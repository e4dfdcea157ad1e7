"""Jinja2 templates with autoescaping on: every text from a game or a model shows as text."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from jinja2 import Environment, PackageLoader

from sparse_react.lines import NOTHING_HAPPENS
from sparse_react.view.pages import outcome, task_column


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(loader=PackageLoader("sparse_react.view", "templates"), autoescape=True,
                      trim_blocks=True, lstrip_blocks=True)
    env.globals.update(zip=zip, task_column=task_column, outcome=outcome, NOTHING_HAPPENS=NOTHING_HAPPENS)
    return env


def render(template: str, links: Any, **values: Any) -> str:
    """One page as HTML, its links made by `links` (the app's URLs or a static export's files)."""
    return environment().get_template(template).render(links=links, **values)
