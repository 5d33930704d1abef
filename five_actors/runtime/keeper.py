"""Kept links: an outbound link that drops is reopened with jittered exponential backoff.

`Transport.keep(url)` (a node's `connect`, e.g. a host joining its head) hands the URL to the
Keeper, which watches the link to it and, when it closes, retries between
`reconnect_min_s` and `reconnect_max_s` until it is up again. While it retries, asks to that
node fail at once (ActorDown saying why) instead of each waiting for a connect timeout, and
/actors lists the link as reconnecting with the last error.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

from five_actors.errors import LinkError
from five_actors.runtime.config import NodeConfig
from five_actors.runtime.link import Link


class Keeper:
    """The kept URLs of one node, each with its state (up or reconnecting, since when, why)."""

    def __init__(
        self,
        connect: Callable[[str], Awaitable[Link]],
        links: dict[str, Link],
        config: NodeConfig,
        spawn: Callable[[Any], asyncio.Task[Any]],
    ) -> None:
        self._connect, self._links, self._config, self._spawn = connect, links, config, spawn
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.state: dict[str, dict[str, Any]] = {}
        self._closing = False

    async def keep(self, url: str) -> Link:
        """Connect to `url` (normalised) now, then keep reconnecting it."""
        link = await self._connect(url)
        if url not in self._tasks:
            self.state[url] = {"state": "up", "reason": "", "since": time.time(), "peer": link.peer}
            self._tasks[url] = self._spawn(self._keep(url, link))
        return link

    def reconnecting(self, url: str) -> str | None:
        """Why the kept link to `url` is down while it is being reconnected; None when it is up or not kept."""
        state = self.state.get(url)
        return state["reason"] if state is not None and state["state"] == "reconnecting" else None

    def down_rows(self, up_urls: set[str]) -> list[dict[str, Any]]:
        """/actors rows for the kept links that are down (those not in `up_urls`)."""
        return [
            {
                "peer": state["peer"],
                "url": url,
                "state": state["state"],
                "direction": "outbound",
                "since": state["since"],
                "frames_in": 0,
                "frames_out": 0,
                "reason": state["reason"],
            }
            for url, state in self.state.items()
            if state["state"] != "up" and url not in up_urls
        ]

    def close(self) -> None:
        """Stop reconnecting."""
        self._closing = True
        for task in self._tasks.values():
            task.cancel()

    async def _keep(self, url: str, link: Link) -> None:
        state = self.state[url]
        while not self._closing:
            current = self._links.get(link.peer)
            if current is not None and current.is_up:
                link = current
                await asyncio.shield(link.closed)
                continue
            state.update(
                state="reconnecting",
                reason=link.closed.result() if link.closed.done() else "no link",
                since=time.time(),
            )
            delay = self._config.reconnect_min_s
            while not self._closing:
                # Full jitter in [delay/2, delay]: peers that lost the same node do not retry in step.
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                try:
                    link = await self._connect(url)
                    break
                except (TimeoutError, LinkError, OSError) as exc:
                    state["reason"] = str(exc) or type(exc).__name__
                    delay = min(delay * 2, self._config.reconnect_max_s)
            state.update(state="up", reason="", since=time.time(), peer=link.peer)
