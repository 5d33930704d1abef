"""Reading a run's logs back: `five-actors logs replay RUN_DIR` and `five-actors logs summary RUN_DIR`.

Every `*.jsonl` file of `RUN_DIR/logs/` is read as a stream and merged by `ts` with
`heapq.merge`, so a run's logs never need to fit in memory. A line that is truncated (a
process killed mid-write) or not a JSON object with a numeric `ts` is skipped with one
warning on stderr naming the file and line number.
"""

from __future__ import annotations

import dataclasses
import datetime
import fnmatch
import heapq
import logging
import re
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import orjson

from five_actors.errors import LogsError
from five_actors.logs import LEVELS, format_record

NORMAL_REASONS = frozenset({"normal", "shutdown"})
"""Exit reasons that are not errors (as in five_actors.runtime.actor)."""

_CHUNK = 1 << 16
_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}

Entry = tuple[dict[str, Any], bytes]
"""A parsed record and its raw line (without the newline)."""


def parse_time(text: str, now: float | None = None) -> float:
    """A `--since/--until` value as UNIX seconds.

    Accepts a duration before now (`30s`, `10m`, `2h`, `1d`, `1h30m`), an ISO date-time
    (naive means local time), a time of day (`17:35` or `17:35:40.123`, today, local), or
    UNIX seconds. Raises ValueError naming the value otherwise.
    """
    now = time.time() if now is None else now
    value = text.strip().replace(" ", "")
    if _DURATION.fullmatch(value):
        return now - sum(float(n) * _UNIT_SECONDS[u] for n, u in _RELATIVE.findall(value))
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        return float(value)
    try:
        if re.fullmatch(r"\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?", value):
            clock = datetime.time.fromisoformat(value.zfill(len(value) + (1 if value.index(":") == 1 else 0)))
            moment = datetime.datetime.combine(datetime.date.fromtimestamp(now), clock)
        else:
            moment = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time: use a duration before now (30s, 10m, 2h), an ISO time "
            "(2026-01-31T17:35:00), a time of day (17:35:40) or UNIX seconds"
        ) from None
    return moment.timestamp()


@dataclasses.dataclass(frozen=True)
class LogFilter:
    """Which records to keep; an empty pattern list keeps everything."""

    actors: Sequence[str] = ()
    """fnmatch globs on the actor path (or `node/path`); records with no actor never match."""
    events: Sequence[str] = ()
    """Event names or fnmatch globs."""
    since: float | None = None
    """Keep records at or after this UNIX time."""
    until: float | None = None
    """Keep records at or before this UNIX time."""
    min_level: str | None = None
    """Keep records at this level or above (debug, info, warning, error, critical)."""

    def keep(self, record: dict[str, Any]) -> bool:
        """Whether `record` passes every filter."""
        ts = record["ts"]
        if self.since is not None and ts < self.since:
            return False
        if self.until is not None and ts > self.until:
            return False
        if self.min_level is not None and LEVELS.get(str(record.get("level")), logging.INFO) < LEVELS[self.min_level]:
            return False
        if self.events:
            event = str(record.get("event"))
            if not any(fnmatch.fnmatchcase(event, pattern) for pattern in self.events):
                return False
        if self.actors:
            actor = record.get("actor")
            if not actor:
                return False
            address = f"{record.get('node')}{actor}" if str(actor).startswith("/") else f"{record.get('node')}/{actor}"
            if not any(fnmatch.fnmatchcase(str(actor), p) or fnmatch.fnmatchcase(address, p) for p in self.actors):
                return False
        return True


def warn(text: str) -> None:
    """One warning line on stderr."""
    sys.stderr.write(f"five-actors: warning: {text}\n")
    sys.stderr.flush()


class LogFile:
    """One node's log file read incrementally: complete lines only, the partial tail kept for later."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.lineno = 0
        self.partial = b""

    def _parse(self, raw: bytes) -> Entry | None:
        self.lineno += 1
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            warn(f"skipping malformed line {self.path}:{self.lineno} ({exc})")
            return None
        if not isinstance(record, dict) or not isinstance(record.get("ts"), (int, float)):
            warn(f"skipping malformed line {self.path}:{self.lineno} (not a log record with a numeric ts)")
            return None
        return record, raw

    def read_new(self) -> Iterator[Entry]:
        """Yield the records of the complete lines written since the last call, streaming."""
        try:
            handle = open(self.path, "rb")  # noqa: SIM115 - closed in finally; a generator may pause between chunks
        except FileNotFoundError:
            return
        try:
            if handle.seek(0, 2) < self.offset:
                # The file was truncated or replaced: start it over.
                self.offset, self.lineno, self.partial = 0, 0, b""
            handle.seek(self.offset)
            while chunk := handle.read(_CHUNK):
                self.offset += len(chunk)
                lines = (self.partial + chunk).split(b"\n")
                self.partial = lines.pop()
                for raw in lines:
                    if raw.strip():
                        entry = self._parse(raw)
                        if entry is not None:
                            yield entry
                    else:
                        self.lineno += 1
        finally:
            handle.close()

    def finish(self) -> None:
        """At the end of a one-off read: a last line without its newline was cut off mid-write."""
        if self.partial.strip():
            warn(f"skipping truncated last line {self.path}:{self.lineno + 1}")
        self.partial = b""


def find_log_dir(run_dir: Path) -> Path:
    """`RUN_DIR/logs`, or RUN_DIR itself when it holds the `*.jsonl` files; LogsError if neither exists."""
    if not run_dir.is_dir():
        raise LogsError(f"run directory {str(run_dir)!r} does not exist")
    logs = run_dir / "logs"
    if logs.is_dir():
        return logs
    if any(run_dir.glob("*.jsonl")):
        return run_dir
    raise LogsError(f"{str(run_dir)!r} has no logs/ directory and no *.jsonl files")


def log_files(log_dir: Path) -> list[Path]:
    """The node log files of a logs directory, sorted by name."""
    return sorted(p for p in log_dir.glob("*.jsonl") if p.is_file())


def _filtered(source: LogFile, log_filter: LogFilter) -> Iterator[Entry]:
    for entry in source.read_new():
        if log_filter.keep(entry[0]):
            yield entry
    source.finish()


def read_merged(log_dir: Path, log_filter: LogFilter = LogFilter()) -> Iterator[Entry]:
    """Every record of every node file, filtered and merged by ts, streaming; LogsError if there are no files."""
    paths = log_files(log_dir)
    if not paths:
        raise LogsError(f"no *.jsonl log files in {str(log_dir)!r}")
    streams = [_filtered(LogFile(path), log_filter) for path in paths]
    return heapq.merge(*streams, key=lambda entry: entry[0]["ts"])


def _write(out: IO[str], entry: Entry, as_json: bool) -> None:
    out.write((entry[1].decode("utf-8", "replace") if as_json else format_record(entry[0])) + "\n")


def replay(
    run_dir: Path,
    log_filter: LogFilter,
    as_json: bool = False,
    follow: bool = False,
    out: IO[str] = sys.stdout,
    poll_seconds: float = 0.2,
) -> int:
    """Print a run's logs merged by time; with `follow`, keep printing new lines until Ctrl-C. Returns the exit code."""
    log_dir = find_log_dir(run_dir)
    if not follow:
        for entry in read_merged(log_dir, log_filter):
            _write(out, entry, as_json)
        out.flush()
        return 0
    return _follow(log_dir, log_filter, as_json, out, poll_seconds)


def _follow(log_dir: Path, log_filter: LogFilter, as_json: bool, out: IO[str], poll_seconds: float) -> int:
    """Like `tail -f` over every node file, including files that appear later; each poll's lines merged by ts."""
    sources: dict[Path, LogFile] = {}
    first = True
    try:
        while True:
            for path in log_files(log_dir):
                sources.setdefault(path, LogFile(path))
            # A partial last line is not an error while following: its writer may finish it.
            streams = [(e for e in s.read_new() if log_filter.keep(e[0])) for s in sources.values()]
            batch: Iterable[Entry] = (
                heapq.merge(*streams, key=lambda e: e[0]["ts"])
                if first
                else sorted((e for stream in streams for e in stream), key=lambda e: e[0]["ts"])
            )
            for entry in batch:
                _write(out, entry, as_json)
            out.flush()
            first = False
            time.sleep(poll_seconds)
    except KeyboardInterrupt:
        return 0


@dataclasses.dataclass
class ActorSummary:
    """What `logs summary` reports for one actor."""

    actor_starts: int = 0
    """actor_started events of this path (the actor itself starting)."""
    child_starts: int = 0
    """child_started events naming this path (its supervisor starting it)."""
    crashes: int = 0
    restarts: int = 0
    last_error: str | None = None
    nodes: set[str] = dataclasses.field(default_factory=set)
    """The nodes this path ran on (an actor path such as /_node can exist on every node)."""

    @property
    def starts(self) -> int:
        """Starts seen from either side: a supervised actor logs actor_started and its supervisor
        child_started for the same start, so the two are not added up."""
        return max(self.actor_starts, self.child_starts)


def _child_path(record: dict[str, Any]) -> str:
    """The actor a supervisor's child_* event is about: its `child`, under the supervisor's path when relative."""
    child = str(record.get("child"))
    parent = record.get("actor")
    if child.startswith("/") or not parent:
        return child
    return f"{str(parent).rstrip('/')}/{child}"


def summarize(entries: Iterable[Entry]) -> tuple[dict[str, ActorSummary], Counter[str]]:
    """Per actor: starts (actor_started / child_started), crashes, restarts, last error; and counts per event.

    A supervisor's child_* events are about the actor at `SUPERVISOR_PATH/CHILD_ID`; the last
    error is the reason of the latest actor_crashed, child_exited with an abnormal reason, or
    supervisor_gave_up.
    """
    actors: dict[str, ActorSummary] = {}
    events: Counter[str] = Counter()

    def of(name: str) -> ActorSummary:
        return actors.setdefault(name, ActorSummary())

    for record, _raw in entries:
        event = str(record.get("event"))
        events[event] += 1
        actor = record.get("actor")
        error = None
        if event == "actor_started" and actor:
            of(actor).actor_starts += 1
            of(actor).nodes.add(str(record.get("node")))
        elif event == "actor_crashed" and actor:
            of(actor).crashes += 1
            error = (str(actor), record.get("reason"))
        elif event == "child_started":
            of(_child_path(record)).child_starts += 1
            if record.get("node_"):
                # The supervisor logs where it started the child as its own `node` field.
                of(_child_path(record)).nodes.add(str(record["node_"]))
        elif event == "child_restarted":
            of(_child_path(record)).restarts += 1
        elif event == "child_exited" and str(record.get("reason")) not in NORMAL_REASONS:
            error = (_child_path(record), record.get("reason"))
        elif event == "supervisor_gave_up":
            error = (_child_path(record), record.get("reason"))
        if error is not None:
            of(error[0]).last_error = str(error[1])
    return actors, events


def summary_json(actors: dict[str, ActorSummary], events: Counter[str]) -> dict[str, Any]:
    """The summary as the JSON object `logs summary --json` prints."""
    return {
        "actors": {
            name: {
                "starts": s.starts,
                "crashes": s.crashes,
                "restarts": s.restarts,
                "last_error": s.last_error,
                "nodes": sorted(s.nodes),
            }
            for name, s in sorted(actors.items())
        },
        "events": dict(sorted(events.items())),
    }


def summary_text(actors: dict[str, ActorSummary], events: Counter[str]) -> str:
    """The summary as two readable tables: actors, then events."""
    header = ("ACTOR", "NODES", "STARTS", "CRASHES", "RESTARTS", "LAST ERROR")
    rows = [header] + [
        (name, ",".join(sorted(s.nodes)) or "-", str(s.starts), str(s.crashes), str(s.restarts), s.last_error or "-")
        for name, s in sorted(actors.items())
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = []
    for row in rows:
        cells = [row[0].ljust(widths[0]), row[1].ljust(widths[1])] + [row[i].rjust(widths[i]) for i in (2, 3, 4)]
        lines.append("  ".join(cells) + "  " + _one_line(row[5]))
    if len(rows) == 1:
        lines.append("(no actor lifecycle events)")
    lines.append("")
    width = max([len("EVENT")] + [len(name) for name in events])
    lines.append(f"{'EVENT'.ljust(width)}  COUNT")
    for name, count in sorted(events.items(), key=lambda item: (-item[1], item[0])):
        lines.append(f"{name.ljust(width)}  {count}")
    return "\n".join(lines) + "\n"


def _one_line(text: str, limit: int = 120) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
