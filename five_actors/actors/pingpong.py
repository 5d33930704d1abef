"""Ping-pong: the smallest real tree, two actors in two OS processes that message each other.

A Pinger asks its peer Ponger for a Pong to each Ping, `window` pings in flight at a time,
for as long as it runs. Both report their counts in /actors; the progress line of
`five-actors up` shows them per second.
"""

from __future__ import annotations

import asyncio
from typing import Any

from five_actors.errors import FiveActorsError
from five_actors.runtime.actor import Actor, message


@message
class Ping:
    """One ping, numbered by its sender."""

    seq: int


@message
class Pong:
    """The answer to Ping `seq`."""

    seq: int


class Ponger(Actor):
    """Answers every Ping with a Pong."""

    def __init__(self) -> None:
        self.pongs = 0

    async def on_ping(self, msg: Ping) -> Pong:
        """Answer a ping."""
        self.pongs += 1
        return Pong(msg.seq)

    def status(self) -> dict[str, Any]:
        return {"progress": {"pongs": self.pongs}}


class Pinger(Actor):
    """Pings `peer` (an actor address, `node/path`) continuously, `window` asks in flight."""

    def __init__(self, peer: str, window: int = 8, retry_delay: float = 0.2) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.peer = peer
        self.window = window
        self.retry_delay = retry_delay
        self.pings = 0
        self.failures = 0
        self.last_failure: str | None = None

    async def on_start(self) -> None:
        for lane in range(self.window):
            self.spawn_task(self._ping_forever(lane), f"pinger:{lane}")

    async def _ping_forever(self, lane: int) -> None:
        ref = self.system.ref(self.peer)
        seq = lane
        while True:
            try:
                reply = await ref.ask(Ping(seq), timeout=5.0)
            except FiveActorsError as exc:
                # The ponger is restarting or its node is unreachable: its supervisor deals with
                # that; the pinger keeps trying.
                self.failures += 1
                self.last_failure = str(exc)
                await asyncio.sleep(self.retry_delay)
                continue
            if reply.seq != seq:
                raise RuntimeError(f"pong {reply.seq} answered ping {seq}")
            self.pings += 1
            seq += self.window

    def status(self) -> dict[str, Any]:
        return {"progress": {"pings": self.pings}, "failures": self.failures, "last_failure": self.last_failure}
