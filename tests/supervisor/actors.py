"""Actors for the supervisor tests; referred to by `module:Class` like any configured actor."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from five_actors.runtime.actor import Actor, message

EVENTS: list[tuple[float, str]] = []
"""(monotonic time, "start NAME" / "stop NAME") for every Worker in this process, in order."""


def names(prefix: str = "") -> list[str]:
    """The recorded events (optionally only those starting with `prefix`), without times."""
    return [e for _, e in EVENTS if e.startswith(prefix)]


@message
class Crash:
    """Make the worker raise (an abnormal exit)."""


@message
class Finish:
    """Make the worker stop itself (a normal exit)."""


class Worker(Actor):
    """Records its starts and stops; crashes or finishes on request."""

    def __init__(self, name: str, stop_delay: float = 0.0) -> None:
        self.name = name
        self.stop_delay = stop_delay

    async def on_start(self) -> None:
        EVENTS.append((time.monotonic(), f"start {self.name}"))

    async def on_stop(self) -> None:
        EVENTS.append((time.monotonic(), f"stopping {self.name}"))
        await asyncio.sleep(self.stop_delay)
        EVENTS.append((time.monotonic(), f"stop {self.name}"))

    async def on_crash(self, _msg: Crash) -> None:
        raise RuntimeError(f"{self.name} was told to crash")

    async def on_finish(self, _msg: Finish) -> None:
        self.stop_self()


class FailsToStart(Actor):
    """Crashes in on_start, every time."""

    async def on_start(self) -> None:
        raise RuntimeError("cannot start")


class Crasher(Actor):
    """Runs for `after` seconds, then crashes (from a background task, as real work would)."""

    def __init__(self, after: float = 0.2) -> None:
        self.after = after

    async def on_start(self) -> None:
        self.spawn_task(self._crash_later())

    async def _crash_later(self) -> None:
        await asyncio.sleep(self.after)
        raise ZeroDivisionError("crasher divided by zero")


class EnvReporter(Actor):
    """Reports its process id and the device variables its supervisor set, in /actors."""

    def status(self) -> dict[str, object]:
        return {
            "pid": os.getpid(),
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "FIVE_ACTORS_DEVICE": os.environ.get("FIVE_ACTORS_DEVICE"),
            "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "autogroup": Path("/proc/self/autogroup").read_text().strip()
            if Path("/proc/self/autogroup").exists()
            else None,
        }
