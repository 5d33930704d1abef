"""A decoded message's fields checked against the types its dataclass declares (issue 14).

A frame with the right field names and values of the wrong type ("x" for an int version) would
otherwise reach a handler and crash its actor. One generic check, from each registered message's
type hints: str, bytes, bool, int (not bool), float (an int too), numpy arrays, list/tuple/dict of
checked items, unions and Optional; Any and any other class are taken as they come.

Each message class's hints are turned into one predicate per field the first time the class is
decoded, so a frame pays for the isinstance tests its fields need and nothing else (reading the
hints with `typing` on every frame cost more than decoding the frame).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from five_actors.errors import WireError

Check = Callable[[Any], bool]
"""Whether a value fits a field's declared type."""

_BOOLS = (bool, np.bool_)
_INTS = (int, np.integer)
_NUMBERS = (int, float, np.integer, np.floating)


@dataclass(frozen=True)
class FieldChecks:
    """What decoding one message class checks: its tuple fields (msgpack has one array type, so lists are turned
    back) and a predicate per field whose type is checked."""

    tuple_names: tuple[str, ...]
    checks: tuple[tuple[str, Any, Check], ...]
    """(field name, its hint, the predicate) for every field that is not Any or another class."""


_CHECKS: dict[type, FieldChecks] = {}


def field_checks(cls: type) -> FieldChecks:
    """The compiled checks of a message class (none when its annotations cannot be resolved)."""
    cached = _CHECKS.get(cls)
    if cached is None:
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001 - unresolvable annotations: the fields go unchecked
            hints = {}
        tuples = tuple(n for n, h in hints.items() if h is tuple or typing.get_origin(h) is tuple)
        checks = tuple((n, h, check) for n, h in hints.items() if (check := compile_hint(h)) is not None)
        cached = _CHECKS[cls] = FieldChecks(tuples, checks)
    return cached


def check_fields(type_name: str, cls: type, body: dict[str, Any]) -> None:
    """Raise WireError naming the first field of `body` whose value does not fit its declared type."""
    for name, hint, check in field_checks(cls).checks:
        if name in body and not check(body[name]):
            value = repr(body[name])
            value = value if len(value) <= 60 else value[:57] + "..."
            raise WireError(f"{type_name}.{name} must be {_describe(hint)}, got {type(body[name]).__name__} {value}")


def compile_hint(hint: Any) -> Check | None:
    """The predicate for values of type `hint`; None where any value fits (Any, object, another class)."""
    if hint is Any or hint is object:
        return None
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        parts = [compile_hint(arg) for arg in typing.get_args(hint)]
        if any(part is None for part in parts):
            return None
        return lambda v: any(part(v) for part in parts)  # type: ignore[misc]
    if hint is None or hint is type(None):
        return lambda v: v is None
    if hint is bool:
        return lambda v: isinstance(v, _BOOLS)
    if hint is int:
        return lambda v: isinstance(v, _INTS) and not isinstance(v, _BOOLS)
    if hint is float:
        return lambda v: isinstance(v, _NUMBERS) and not isinstance(v, _BOOLS)
    if hint in (str, bytes, np.ndarray):
        return lambda v: isinstance(v, hint)
    args = typing.get_args(hint)
    if origin in (list, tuple) or hint in (list, tuple):
        if not args:
            return lambda v: isinstance(v, (list, tuple))
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            items = [compile_hint(arg) or _anything for arg in args]
            return lambda v: (
                isinstance(v, (list, tuple))
                and len(v) == len(items)
                and all(item(x) for item, x in zip(items, v, strict=True))
            )
        item = compile_hint(args[0])
        if item is None:
            return lambda v: isinstance(v, (list, tuple))
        return lambda v: isinstance(v, (list, tuple)) and all(item(x) for x in v)
    if origin is dict or hint is dict:
        if not args:
            return lambda v: isinstance(v, dict)
        key, val = compile_hint(args[0]) or _anything, compile_hint(args[1]) or _anything
        return lambda v: isinstance(v, dict) and all(key(k) and val(x) for k, x in v.items())
    return None  # another class (a nested message, say): its own fields were checked when it was built


def _anything(value: Any) -> bool:
    return True


def _describe(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) and not typing.get_args(hint) else str(hint).replace("typing.", "")
