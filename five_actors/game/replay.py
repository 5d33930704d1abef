"""Match replays: record a game frame by frame, save it as one compact msgpack file, load it back.

A frame is the step number, every unit as one float32 row of `UNIT_COLUMNS`, and the
events of that step (dicts with at least `kind`, `x`, `y`). On disk (msgpack map):

    format   "five-actors-replay"       version  FORMAT_VERSION
    meta     the game's description: map_size, lanes, hero_types, game_version, seed,
             steps_per_second, and anything else the recorder was given
    columns  UNIT_COLUMNS
    steps    int64 little-endian bytes, one per frame
    counts   int32 little-endian bytes, units per frame
    units    zlib of all frames' units stacked, float32 little-endian, row-major
    units_crc32  CRC-32 of the uncompressed units
    events   one list of event dicts per frame
    result   e.g. {"winner": 0 | 1 | -1, "steps": N, "reason": "..."}

Nothing here depends on the runtime's wire codec, so a replay file outlives wire changes.
"""

from __future__ import annotations

import dataclasses
import os
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

from five_actors.errors import GameError
from five_actors.files import write_atomic

UNIT_COLUMNS = ("x", "y", "team", "kind", "type", "hp_frac", "alive", "level")
"""The columns of a frame's unit rows, in order."""

KIND_HERO = 0
KIND_CREEP = 1
KIND_TOWER = 2
KIND_ANCIENT = 3
KIND_NAMES = {KIND_HERO: "hero", KIND_CREEP: "creep", KIND_TOWER: "tower", KIND_ANCIENT: "ancient"}
"""Unit kind code -> name."""

COLUMN = {name: index for index, name in enumerate(UNIT_COLUMNS)}
"""Column name -> index into a unit row."""

FORMAT = "five-actors-replay"
FORMAT_VERSION = 1
REQUIRED_META = ("map_size", "lanes", "hero_types", "game_version", "seed", "steps_per_second")
"""Meta keys every replay has."""

_UNIT_DTYPE = np.dtype("<f4")
MAX_UNIT_BYTES = 1 << 28
"""The most unit data a replay may hold once inflated (256 MiB; a long game of the default lane is a few MB)."""


def _plain(value: Any) -> Any:
    """msgpack default hook: numpy scalars and arrays become Python numbers and lists."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    raise TypeError(f"cannot store a {type(value).__name__} in a replay")


@dataclasses.dataclass(frozen=True)
class Frame:
    """One recorded step: its number, units as float32 rows of UNIT_COLUMNS, and its events."""

    step: int
    units: np.ndarray
    events: list[dict[str, Any]]


@dataclasses.dataclass
class Replay:
    """A loaded match: the game's description, its frames in order, and how it ended."""

    meta: dict[str, Any]
    frames: list[Frame]
    result: dict[str, Any]

    def frame_index(self, step: int) -> int:
        """Index of the first frame at or after `step`; GameError when the match ends before it."""
        for index, frame in enumerate(self.frames):
            if frame.step >= step:
                return index
        raise GameError(f"step {step} is after the last frame (steps {self.frames[0].step}..{self.frames[-1].step})")


def _check_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    missing = [key for key in REQUIRED_META if key not in meta]
    if missing:
        raise GameError(f"replay meta lacks {', '.join(missing)} (needs {', '.join(REQUIRED_META)})")
    if not float(meta["map_size"]) > 0:
        raise GameError(f"replay meta map_size must be > 0, got {meta['map_size']!r}")
    if not float(meta["steps_per_second"]) > 0:
        raise GameError(f"replay meta steps_per_second must be > 0, got {meta['steps_per_second']!r}")
    return dict(meta)


class Recorder:
    """Collects a match's frames in memory; `save` writes them as one replay file."""

    def __init__(self, meta: Mapping[str, Any]) -> None:
        self.meta = _check_meta(meta)
        self._steps: list[int] = []
        self._units: list[np.ndarray] = []
        self._events: list[list[dict[str, Any]]] = []

    def __len__(self) -> int:
        return len(self._steps)

    def frame(self, step: int, units: np.ndarray, events: Sequence[Mapping[str, Any]] = ()) -> None:
        """Record step `step`: `units` float [n, 8] (copied), `events` dicts with kind, x, y."""
        rows = np.asarray(units)
        if rows.ndim != 2 or rows.shape[1] != len(UNIT_COLUMNS):
            raise GameError(
                f"replay units must be [n, {len(UNIT_COLUMNS)}] ({', '.join(UNIT_COLUMNS)}), got shape {rows.shape}"
            )
        if self._steps and step < self._steps[-1]:
            raise GameError(f"replay frame step {step} comes before the previous frame's step {self._steps[-1]}")
        for event in events:
            missing = [key for key in ("kind", "x", "y") if key not in event]
            if missing:
                raise GameError(f"replay event {dict(event)!r} at step {step} lacks {', '.join(missing)}")
        self._steps.append(int(step))
        # Copy: the game reuses its state arrays from step to step.
        self._units.append(np.array(rows, dtype=_UNIT_DTYPE, copy=True))
        self._events.append([dict(event) for event in events])

    def save(self, path: str | os.PathLike[str], result: Mapping[str, Any]) -> Path:
        """Write the replay to `path` atomically (a temporary file renamed into place); returns the path."""
        if not self._steps:
            raise GameError("nothing to save: the recorder has no frames")
        stacked = np.concatenate(self._units) if self._units else np.zeros((0, len(UNIT_COLUMNS)), _UNIT_DTYPE)
        raw_units = stacked.tobytes()
        document = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "meta": self.meta,
            "columns": list(UNIT_COLUMNS),
            "steps": np.asarray(self._steps, dtype="<i8").tobytes(),
            "counts": np.asarray([len(u) for u in self._units], dtype="<i4").tobytes(),
            "units": zlib.compress(raw_units, 6),
            "units_crc32": zlib.crc32(raw_units),
            "events": self._events,
            "result": dict(result),
        }
        data = msgpack.packb(document, default=_plain, use_bin_type=True)
        return write_atomic(path, data)


def _field(document: dict[str, Any], key: str, kind: type | tuple[type, ...], path: Path) -> Any:
    value = document.get(key)
    if not isinstance(value, kind):
        raise GameError(f"replay {path} is corrupt: field {key!r} is missing or has the wrong type")
    return value


def load_replay(path: str | os.PathLike[str]) -> Replay:
    """Read a replay file; GameError naming the problem when it is missing, truncated or corrupt."""
    source = Path(path)
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise GameError(f"cannot read replay {source}: {exc.strerror or exc}") from None
    try:
        document = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException, TypeError) as exc:
        raise GameError(f"replay {source} is truncated or corrupt (not a complete msgpack document: {exc})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise GameError(f"{source} is not a five-actors replay")
    version = document.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise GameError(
            f"replay {source} has format version {version!r}; this five-actors reads up to {FORMAT_VERSION}"
        )
    columns = _field(document, "columns", list, source)
    if tuple(columns) != UNIT_COLUMNS:
        raise GameError(f"replay {source} has unit columns {columns}, expected {list(UNIT_COLUMNS)}")
    meta = _field(document, "meta", dict, source)
    result = _field(document, "result", dict, source)
    events = _field(document, "events", list, source)
    raw_steps = _field(document, "steps", bytes, source)
    raw_counts = _field(document, "counts", bytes, source)
    if len(raw_steps) % 8 or len(raw_counts) % 4:
        raise GameError(f"replay {source} is corrupt: step or count arrays have a partial element")
    steps = np.frombuffer(raw_steps, dtype="<i8")
    counts = np.frombuffer(raw_counts, dtype="<i4")
    if not len(steps) == len(counts) == len(events):
        raise GameError(
            f"replay {source} is corrupt: {len(steps)} steps, {len(counts)} unit counts and {len(events)} event lists"
        )
    if (counts < 0).any():
        raise GameError(f"replay {source} is corrupt: negative unit count")
    width = len(UNIT_COLUMNS)
    expected = int(counts.sum()) * width * _UNIT_DTYPE.itemsize
    if expected > MAX_UNIT_BYTES:
        raise GameError(
            f"replay {source} is corrupt or too large: its counts say {expected} bytes of units, at most "
            f"{MAX_UNIT_BYTES} are read"
        )
    try:
        # Inflated no further than the counts say (one byte more shows a surplus): a small file cannot claim gigabytes.
        inflater = zlib.decompressobj()
        raw_units = inflater.decompress(_field(document, "units", bytes, source), expected + 1)
    except zlib.error as exc:
        raise GameError(f"replay {source} is corrupt: units do not decompress ({exc})") from None
    if len(raw_units) != expected:
        found = f"more than {expected}" if len(raw_units) > expected else str(len(raw_units))
        raise GameError(f"replay {source} is corrupt: {found} bytes of units, counts say {expected}")
    if zlib.crc32(raw_units) != document.get("units_crc32"):
        raise GameError(f"replay {source} is corrupt: units checksum mismatch")
    # Frames are views into one array: loading does not copy the units again.
    units = np.frombuffer(raw_units, dtype=_UNIT_DTYPE).reshape(-1, width)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    frames = [Frame(int(steps[i]), units[bounds[i] : bounds[i + 1]], list(events[i])) for i in range(len(steps))]
    if not frames:
        raise GameError(f"replay {source} has no frames")
    missing = [key for key in REQUIRED_META if key not in meta]
    if missing:
        raise GameError(f"replay {source} is corrupt: meta lacks {', '.join(missing)}")
    return Replay(meta=meta, frames=frames, result=result)
