"""typer options from the options dataclasses (`sparse_react.options`): a command takes a whole
`ModelOptions` (or `RelabelOptions`, ...) as one parameter, and its `--help` lists one option per
field, under the dataclass's heading, with the field's help."""

from __future__ import annotations

import functools
import inspect
import types
import typing
from typing import Any, Callable, Optional, TypeVar

import typer

from sparse_react.options import Leaf, from_flat, leaves

Command = TypeVar("Command", bound=Callable[..., Any])


def with_options(**groups: type) -> Callable[[Command], Command]:
    """Spread each parameter named in `groups` (an options dataclass) into one typer option per field;
    the command is called with the dataclass built from them. Two options of one name fail here, at
    import time."""

    def spread(command: Command) -> Command:
        hints = typing.get_type_hints(command)
        parameters, spread_names = [], {}
        for parameter in inspect.signature(command).parameters.values():
            if parameter.name in groups:
                found = leaves(groups[parameter.name])
                spread_names[parameter.name] = found
                parameters += [_parameter(leaf) for leaf in found]
            else:
                parameters.append(parameter.replace(annotation=hints[parameter.name]))
        names = [p.name for p in parameters]
        clashes = sorted({n for n in names if names.count(n) > 1})
        if clashes:
            raise TypeError(f"{command.__name__}: more than one option named {', '.join(clashes)}")

        @functools.wraps(command)
        def call(**values: Any) -> Any:
            for name, found in spread_names.items():
                values[name] = from_flat(groups[name], {leaf.name: _parsed(leaf, values.pop(leaf.name)) for leaf in found})
            return command(**values)

        keyword = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in parameters]
        call.__signature__ = inspect.Signature(keyword)  # type: ignore[attr-defined]
        call.__annotations__ = {p.name: p.annotation for p in keyword}
        return call  # type: ignore[return-value]

    return spread


def _is_tuple(leaf: Leaf) -> bool:
    return typing.get_origin(leaf.type) is tuple


def _parameter(leaf: Leaf) -> inspect.Parameter:
    on, off = leaf.flags
    decls = [f"{on}/{off}" if off else on]
    if _is_tuple(leaf):  # a comma-separated list
        annotation: Any = str
        default: Any = ",".join(map(str, leaf.default))
    else:
        args = [a for a in typing.get_args(leaf.type) if a is not type(None)]
        annotation = Optional[args[0]] if typing.get_origin(leaf.type) in (typing.Union, types.UnionType) else leaf.type
        default = leaf.default
    info = typer.Option(default, *decls, help=leaf.help, min=leaf.metadata.get("min"), rich_help_panel=leaf.panel,
                        show_default=leaf.metadata.get("show_default", True))
    return inspect.Parameter(leaf.name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=annotation)


def _parsed(leaf: Leaf, value: Any) -> Any:
    if _is_tuple(leaf):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value
