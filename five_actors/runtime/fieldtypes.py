"""A decoded message's fields checked against the types its dataclass declares (issue 14).

A frame with the right field names and values of the wrong type ("x" for an int version) would
otherwise reach a handler and crash its actor. One generic check, from each registered message's
type hints: str, bytes, bool, int (not bool), float (an int too), numpy arrays, list/tuple/dict of
checked items, unions and Optional; Any and any other class are taken as they come.
"""

from __future__ import annotations

import types
import typing
from typing import Any

import numpy as np

from five_actors.errors import WireError

_HINTS: dict[type, dict[str, Any]] = {}


def field_hints(cls: type) -> dict[str, Any]:
    """The resolved type hints of a message class's fields ({} when they cannot be resolved)."""
    cached = _HINTS.get(cls)
    if cached is None:
        try:
            cached = typing.get_type_hints(cls)
        except Exception:  # noqa: BLE001 - unresolvable annotations: the fields go unchecked
            cached = {}
        _HINTS[cls] = cached
    return cached


def tuple_fields(cls: type) -> frozenset[str]:
    """Fields annotated as tuples: msgpack has one array type, so lists are turned back."""
    return frozenset(n for n, h in field_hints(cls).items() if h is tuple or typing.get_origin(h) is tuple)


def check_fields(type_name: str, cls: type, body: dict[str, Any]) -> None:
    """Raise WireError naming the first field of `body` whose value does not fit its declared type."""
    for name, hint in field_hints(cls).items():
        if name in body and not fits(body[name], hint):
            value = repr(body[name])
            value = value if len(value) <= 60 else value[:57] + "..."
            raise WireError(f"{type_name}.{name} must be {_describe(hint)}, got {type(body[name]).__name__} {value}")


def fits(value: Any, hint: Any) -> bool:
    """Whether `value` is of type `hint` (as far as this module checks types)."""
    if hint is Any or hint is object:
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return any(fits(value, arg) for arg in typing.get_args(hint))
    if hint is None or hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, (bool, np.bool_))
    if hint is int:
        return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if hint is float:
        return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if hint in (str, bytes, np.ndarray):
        return isinstance(value, hint)
    args = typing.get_args(hint)
    if origin in (list, tuple) or hint in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False
        if not args:
            return True
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return len(value) == len(args) and all(fits(v, a) for v, a in zip(value, args, strict=True))
        return all(fits(v, args[0]) for v in value)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            return False
        return not args or all(fits(k, args[0]) and fits(v, args[1]) for k, v in value.items())
    return True  # another class (a nested message, say): its own fields were checked when it was built


def _describe(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) and not typing.get_args(hint) else str(hint).replace("typing.", "")
