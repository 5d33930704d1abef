"""Structured logs: every process writes one JSON line per event to `RUN_DIR/logs/NODE.jsonl`.

`configure_logging(node_id, log_dir)` sets structlog up for the process. Each line carries
`ts` (float UNIX seconds, so files of many nodes merge by time), `node`, `actor` (null unless
bound), `event`, `level`, then the event's own fields; an exception becomes a `traceback`
field (an event's own field named `node`, `ts` or `level` is kept as `node_`, `ts_`,
`level_`). Lines are written with one unbuffered `write` each on a file opened for appending,
so a process killed with `kill -9` loses at most a partial last line, which the reader
(`five_actors.logreplay`) skips with a warning.

Loggers bound before a reconfiguration keep working: the processors read the destination
from this module's state, never from values captured when a logger was created.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import logging
import sys
import threading
import time
import traceback
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import orjson
import structlog

from five_actors.errors import ConfigError

LEVELS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
"""Level names accepted by `configure_logging` (also `warn`), lowest first."""

HEAD_FIELDS = ("ts", "node", "actor", "event", "level")
"""The fields every line starts with, in this order."""

_LARGE_ARRAY = 64
"""Arrays with more elements than this are logged as a summary, not element by element."""


@dataclasses.dataclass
class _State:
    """Where events go; replaced as a whole by each configure_logging call."""

    node: str = ""
    file: BinaryIO | None = None
    console: bool = False
    """Readable lines on stderr: whatever sys.stderr is when a line is written (a test's capture may have replaced
    it)."""
    console_level: int = logging.WARNING


_state = _State()
_lock = threading.Lock()


def _json_default(value: Any) -> Any:
    """Serialise what orjson cannot: numpy values, paths, exceptions, sets, bytes, anything else by repr."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        if value.size > _LARGE_ARRAY:
            return f"array(shape={list(value.shape)}, dtype={value.dtype})"
        return value.tolist()
    if isinstance(value, (Path, enum.Enum)):
        return str(value)
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "backslashreplace")
    return repr(value)


_JSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE


def dumps_line(record: Mapping[str, Any]) -> bytes:
    """One record as one JSON line (with its newline); values orjson refuses become their repr."""
    try:
        return orjson.dumps(record, default=_json_default, option=_JSON_OPTIONS)
    except TypeError:
        # orjson refuses some values outright (ints beyond 64 bits, nested failures in
        # default); fall back field by field so one odd value never loses the event.
        safe: dict[str, Any] = {}
        for key, value in record.items():
            try:
                orjson.dumps(value, default=_json_default, option=orjson.OPT_NON_STR_KEYS)
                safe[str(key)] = value
            except TypeError:
                safe[str(key)] = repr(value)
        return orjson.dumps(safe, default=_json_default, option=_JSON_OPTIONS)


def _format_value(value: Any) -> str:
    """A field value as it reads best after `key=`: bare when simple, JSON otherwise."""
    if isinstance(value, str):
        if value and not any(c.isspace() or c in "\"'=" for c in value):
            return value
        return orjson.dumps(value).decode()
    if value is None or isinstance(value, (bool, int, float)):
        return orjson.dumps(value).decode()
    return orjson.dumps(value, default=_json_default, option=orjson.OPT_NON_STR_KEYS).decode()


def format_time(ts: float) -> str:
    """UNIX seconds as local `HH:MM:SS.mmm`."""
    moment = datetime.datetime.fromtimestamp(ts)
    return moment.strftime("%H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def format_record(record: Mapping[str, Any]) -> str:
    """A record as one readable line, `HH:MM:SS.mmm node actor event key=value ...`.

    Warnings and errors show `level=` first among the fields; a traceback follows on
    indented lines.
    """
    ts = record.get("ts")
    parts = [
        format_time(ts) if isinstance(ts, (int, float)) else "??:??:??.???",
        str(record.get("node") or "-"),
        str(record.get("actor") or "-"),
        str(record.get("event", "-")),
    ]
    level = record.get("level")
    if level not in (None, "info", "debug"):
        parts.append(f"level={level}")
    tb = None
    for key, value in record.items():
        if key in HEAD_FIELDS:
            continue
        if key == "traceback" and isinstance(value, str):
            tb = value
            continue
        parts.append(f"{key}={_format_value(value)}")
    line = " ".join(parts)
    if tb:
        line += "\n" + "\n".join("    " + row for row in tb.rstrip("\n").splitlines())
    return line


def _add_head_fields(_logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> Any:
    """Put ts, node, actor, event and level first, then the event's fields; exc_info becomes `traceback`."""
    exc_info = event_dict.pop("exc_info", None)
    record: dict[str, Any] = {
        "ts": time.time(),
        "node": _state.node,
        "actor": event_dict.pop("actor", None),
        "event": event_dict.pop("event", None),
        "level": "warning" if method_name == "warn" else method_name,
    }
    for key, value in event_dict.items():
        # A field named like a head field (node=, ts=, level=) must not overwrite it: it is
        # kept with a trailing underscore, as PEP 8 renames clashing names.
        record[f"{key}_" if key in record else key] = value
    if exc_info:
        if exc_info is True:
            exc_info = sys.exc_info()
        elif isinstance(exc_info, BaseException):
            exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
        if exc_info[0] is not None:
            record["traceback"] = "".join(traceback.format_exception(*exc_info))
    return record


def _emit(record: Mapping[str, Any]) -> None:
    """Append the record to this node's file and, at or above the console level, to the console."""
    line = dumps_line(record)
    with _lock:
        # Read under the lock: configure_logging swaps the state and closes the old file under it.
        state = _state
        if state.file is not None:
            state.file.write(line)
        if state.console and LEVELS.get(record["level"], logging.INFO) >= state.console_level:
            sys.stderr.write(format_record(record) + "\n")
            sys.stderr.flush()


def _to_sink(_logger: Any, _method_name: str, event_dict: MutableMapping[str, Any]) -> Any:
    """Last processor: hand the finished record to `_Sink` as one positional argument."""
    return (event_dict,), {}


class _Sink:
    """The wrapped logger structlog calls with each finished record, whatever the level method."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name

    def msg(self, record: Mapping[str, Any]) -> None:
        """Write one record."""
        _emit(record)

    debug = info = warning = warn = error = critical = exception = log = msg


def _sink_factory(*args: Any) -> _Sink:
    return _Sink(str(args[0]) if args else None)


class _StdlibBridge(logging.Handler):
    """Carries warnings and errors of the standard `logging` module (aiohttp, asyncio) into the same file."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields: dict[str, Any] = {
                "ts": record.created,
                "node": _state.node,
                "actor": None,
                "event": record.getMessage(),
                "level": record.levelname.lower(),
                "logger": record.name,
            }
            if record.exc_info and record.exc_info[0] is not None:
                fields["traceback"] = "".join(traceback.format_exception(*record.exc_info))
            _emit(fields)
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)


def _parse_level(level: str) -> int:
    name = level.lower()
    if name == "warn":
        name = "warning"
    if name not in LEVELS:
        raise ConfigError(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    return LEVELS[name]


def configure_logging(node_id: str, log_dir: Path | None, level: str = "info", console: bool = False) -> None:
    """Send this process's structlog events (and stdlib warnings) to `log_dir/NODE.jsonl`.

    `log_dir` None: readable lines on stderr only. `console` True with a `log_dir`: warnings
    and errors also go to stderr as readable lines. Calling it again replaces the previous
    setup (closing the previous file), so nothing is written twice.
    """
    if not node_id or "/" in node_id or node_id in (".", ".."):
        raise ConfigError(f"node id {node_id!r} cannot name a log file (empty or contains '/')")
    min_level = _parse_level(level)
    new_file: BinaryIO | None = None
    if log_dir is not None:
        log_dir = Path(log_dir)
        log_dir.mkdir(parents=True, exist_ok=True)
        # Unbuffered append: each line is a single write(2), so concurrent writers never
        # interleave within a line and a crash loses at most the line being written.
        new_file = open(log_dir / f"{node_id}.jsonl", "ab", buffering=0)  # noqa: SIM115 - lives until reconfigured

    global _state
    with _lock:
        old = _state
        _state = _State(
            node=node_id,
            file=new_file,
            console=log_dir is None or console,
            console_level=min_level if log_dir is None else max(min_level, logging.WARNING),
        )
        if old.file is not None:
            old.file.close()

    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, _add_head_fields, _to_sink],
        wrapper_class=structlog.make_filtering_bound_logger(min_level),
        logger_factory=_sink_factory,
        cache_logger_on_first_use=False,
    )

    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _StdlibBridge)]:
        root.removeHandler(handler)
    bridge = _StdlibBridge(level=max(min_level, logging.WARNING))
    root.addHandler(bridge)
    if root.level > bridge.level or root.level == logging.NOTSET:
        root.setLevel(bridge.level)
