"""Playing replays back: in the terminal as a character map with a timeline, or as one HTML page.

Terminal symbols (legend printed under the map): heroes are their type's initial,
uppercase for team 0 and lowercase for team 1; creeps `o`/`x`, towers `#`/`%`, ancients
`@`/`&` for team 0/team 1; lanes are dots, the current step's events `*`. Team 0's corner
(0, 0) is the bottom left, as in the HTML player.
"""

from __future__ import annotations

import base64
import functools
import html
import importlib.resources
import os
import shutil
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np
import orjson

from five_actors.errors import GameError
from five_actors.game.replay import (
    COLUMN,
    KIND_ANCIENT,
    KIND_CREEP,
    KIND_HERO,
    KIND_TOWER,
    UNIT_COLUMNS,
    Replay,
)

TEAM_SYMBOLS = {KIND_CREEP: ("o", "x"), KIND_TOWER: ("#", "%"), KIND_ANCIENT: ("@", "&")}
"""Kind -> (team 0 symbol, team 1 symbol) for units that are not heroes."""

_DRAW_ORDER = (KIND_CREEP, KIND_TOWER, KIND_ANCIENT, KIND_HERO)
"""Later kinds are drawn over earlier ones: a hero is never hidden behind a creep or tower."""

_COLORS = {0: "\x1b[32m", 1: "\x1b[31m", "lane": "\x1b[2m", "event": "\x1b[33;1m"}
_RESET = "\x1b[0m"
_TEMPLATE = "replay_player.html"
_DATA_MARK = "__REPLAY_DATA__"
_EVENT_LINES = 8


def clock(step: int, steps_per_second: float) -> str:
    """A step as the match clock, `MM:SS.s`."""
    seconds = step / steps_per_second
    return f"{int(seconds // 60):02d}:{seconds % 60:04.1f}"


def ancient_hp(units: np.ndarray) -> dict[int, float]:
    """Team -> health fraction of its ancient (0 when it has fallen)."""
    hp: dict[int, float] = {}
    for row in units[units[:, COLUMN["kind"]] == KIND_ANCIENT]:
        alive = row[COLUMN["alive"]] >= 0.5
        hp[int(row[COLUMN["team"]])] = float(row[COLUMN["hp_frac"]]) if alive else 0.0
    return hp


def describe_event(event: dict[str, Any]) -> str:
    """An event as `kind key=value ... at (x, y)`."""
    fields = " ".join(f"{k}={v}" for k, v in event.items() if k not in ("kind", "x", "y"))
    where = f"at ({float(event['x']):.0f}, {float(event['y']):.0f})"
    return " ".join(part for part in (str(event.get("kind")), fields, where) if part)


def map_cell(x: float, y: float, map_size: float, width: int, height: int) -> tuple[int, int]:
    """(row, column) of map point (x, y) on a width x height grid; y grows upwards."""
    column = round(min(max(x / map_size, 0.0), 1.0) * (width - 1))
    row = round((1.0 - min(max(y / map_size, 0.0), 1.0)) * (height - 1))
    return row, column


@functools.lru_cache(maxsize=8)
def _lane_cells(
    lanes: tuple[tuple[tuple[float, float], ...], ...],
    map_size: float,
    width: int,
    height: int,
) -> frozenset[tuple[int, int]]:
    """The grid cells the lanes pass through; the same for every frame, so computed once."""
    cells = set()
    for lane in lanes:
        for (x0, y0), (x1, y1) in zip(lane, lane[1:]):
            samples = max(int(2 * max(abs(x1 - x0), abs(y1 - y0)) / map_size * width), 1)
            for i in range(samples + 1):
                t = i / samples
                cells.add(map_cell(x0 + (x1 - x0) * t, y0 + (y1 - y0) * t, map_size, width, height))
    return frozenset(cells)


def _hero_symbol(hero_types: Sequence[str], type_id: int, team: int) -> str:
    name = hero_types[type_id] if 0 <= type_id < len(hero_types) and hero_types[type_id] else "H"
    initial = str(name)[0]
    return initial.upper() if team == 0 else initial.lower()


def render_frame(replay: Replay, index: int, width: int = 64, color: bool = False) -> str:
    """Frame `index` as text: timeline, ancients, the map in a border, a legend and the latest events."""
    meta, frame = replay.meta, replay.frames[index]
    map_size, sps = float(meta["map_size"]), float(meta["steps_per_second"])
    height = max(width // 2, 2)
    grid: list[list[tuple[str, Any]]] = [[(" ", None)] * width for _ in range(height)]

    lanes = tuple(tuple((float(x), float(y)) for x, y in lane) for lane in meta.get("lanes", []))
    for row, column in _lane_cells(lanes, map_size, width, height):
        grid[row][column] = (".", "lane")
    for event in frame.events:
        row, column = map_cell(float(event["x"]), float(event["y"]), map_size, width, height)
        grid[row][column] = ("*", "event")
    units = frame.units
    for kind in _DRAW_ORDER:
        for row_values in units[(units[:, COLUMN["kind"]] == kind) & (units[:, COLUMN["alive"]] >= 0.5)]:
            team = int(row_values[COLUMN["team"]])
            if kind == KIND_HERO:
                symbol = _hero_symbol(meta.get("hero_types", []), int(row_values[COLUMN["type"]]), team)
            else:
                symbol = TEAM_SYMBOLS[kind][1 if team else 0]
            row, column = map_cell(
                float(row_values[COLUMN["x"]]), float(row_values[COLUMN["y"]]), map_size, width, height
            )
            grid[row][column] = (symbol, team)

    def paint(cell: tuple[str, Any]) -> str:
        return f"{_COLORS[cell[1]]}{cell[0]}{_RESET}" if color and cell[1] is not None else cell[0]

    last = replay.frames[-1].step
    bar_width = max(width - 40, 10)
    done = int(bar_width * frame.step / last) if last else bar_width
    lines = [
        f"step {frame.step}/{last}  {clock(frame.step, sps)}  frame {index + 1}/{len(replay.frames)}  "
        f"[{'=' * done}{'-' * (bar_width - done)}]",
        "ancients  " + "   ".join(f"team {team} {hp * 100:3.0f}%" for team, hp in sorted(ancient_hp(units).items())),
        "+" + "-" * width + "+",
        *("|" + "".join(paint(cell) for cell in row) + "|" for row in grid),
        "+" + "-" * width + "+",
        "team 0: heroes A-Z, creeps o, towers #, ancient @   team 1: heroes a-z, creeps x, towers %, ancient &",
    ]
    if index == len(replay.frames) - 1 and replay.result:
        lines.append("result  " + " ".join(f"{k}={v}" for k, v in replay.result.items()))
    recent: list[str] = []
    for earlier in reversed(replay.frames[: index + 1]):
        for event in reversed(earlier.events):
            recent.append(f"  {clock(earlier.step, sps)} step {earlier.step}  {describe_event(event)}")
        if len(recent) >= _EVENT_LINES:
            break
    lines.append("events" + ("" if recent else "  (none yet)"))
    lines.extend(reversed(recent[:_EVENT_LINES]))
    return "\n".join(lines) + "\n"


def play_terminal(
    replay: Replay,
    speed: float = 1.0,
    from_step: int | None = None,
    once: bool = False,
    width: int | None = None,
    out: IO[str] = sys.stdout,
    color: bool | None = None,
) -> int:
    """Show the replay from `from_step` at `speed` times real time (or one frame with `once`); Ctrl-C stops.

    `width` None fits the map to the terminal (rows are half as many as columns, since a
    character cell is about twice as tall as it is wide).
    """
    if width is None:
        size = shutil.get_terminal_size((80, 40))
        width = max(20, min(size.columns - 2, 2 * (size.lines - 16)))
    if not speed > 0:
        raise GameError(f"--speed must be > 0, got {speed}")
    if width < 10:
        raise GameError(f"--width must be at least 10 columns, got {width}")
    start = replay.frame_index(from_step) if from_step is not None else 0
    live = out.isatty() if color is None else color
    if once:
        out.write(render_frame(replay, start, width, live))
        out.flush()
        return 0
    sps = float(replay.meta["steps_per_second"])
    first_step, began = replay.frames[start].step, time.monotonic()
    try:
        for index in range(start, len(replay.frames)):
            frame = replay.frames[index]
            # Scheduled against the start, so drawing time does not slow playback down.
            delay = began + (frame.step - first_step) / sps / speed - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            out.write(("\x1b[H\x1b[2J" if live else "\n") + render_frame(replay, index, width, live))
            out.flush()
    except KeyboardInterrupt:
        return 0
    return 0


def replay_data(replay: Replay) -> dict[str, Any]:
    """Everything the HTML player needs; units as base64 of zlib-compressed little-endian float32 rows."""
    units = np.concatenate([frame.units for frame in replay.frames]).astype("<f4", copy=False)
    return {
        "meta": replay.meta,
        "result": replay.result,
        "columns": list(UNIT_COLUMNS),
        "steps": [frame.step for frame in replay.frames],
        "counts": [len(frame.units) for frame in replay.frames],
        "events": [frame.events for frame in replay.frames],
        "units": base64.b64encode(zlib.compress(units.tobytes(), 6)).decode("ascii"),
    }


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot embed a {type(value).__name__} in the HTML player")


def write_html(replay: Replay, out_path: str | os.PathLike[str], source_name: str = "replay") -> Path:
    """Write one self-contained HTML page (no external URLs) that plays the replay in a canvas."""
    template = importlib.resources.files("five_actors.game").joinpath(_TEMPLATE).read_text(encoding="utf-8")
    data = orjson.dumps(replay_data(replay), default=_json_default)
    # Inside <script> the JSON must not contain "</script>"; "<" escaped is still the same JSON.
    embedded = data.replace(b"<", b"\\u003c").decode("utf-8")
    page = template.replace("__REPLAY_TITLE__", html.escape(source_name)).replace(_DATA_MARK, embedded)
    target = Path(out_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(page, encoding="utf-8")
    return target
