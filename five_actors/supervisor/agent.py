"""The node agent: one actor per node (at `/_node`) that reports the node's part of the tree.

`NodeView` asks an agent for its node's actors (state, mailbox depth, message rates, restarts,
last error), its links and GPUs, and, recursively, the views of the nodes its process and
host children run on: asking the head's agent gives the whole tree across processes and hosts.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from typing import Any

from five_actors.errors import FiveActorsError
from five_actors.runtime.actor import Actor, message
from five_actors.supervisor.gpus import gpu_info
from five_actors.supervisor.tree import Supervisor

AGENT_PATH = "/_node"
"""Where every node runs its agent."""

REMOTE_VIEW_TIMEOUT = 3.0
"""Seconds a node waits for a child node's view before reporting it unreachable."""


@message
class NodeView:
    """Ask an agent for its node's view (and its child nodes', recursively)."""


class NodeAgent(Actor):
    """Samples message rates every second and answers NodeView."""

    def __init__(self, node: Any, sample_every: float = 1.0) -> None:
        self.node = node
        self.sample_every = sample_every
        self.rates: dict[str, tuple[float, float]] = {}
        self._last: dict[str, tuple[int, float, int, int]] = {}
        self.stalls: list[str] = []
        """Why training is stalled, set by the head's watchdog (five_actors.supervisor.watchdog); /health reports it."""

    async def on_start(self) -> None:
        self.spawn_task(self._sample_forever(), "agent:rates")

    async def _sample_forever(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.sample_every)

    def sample(self) -> None:
        """Update each local actor's messages in/out per second since the last sample."""
        now = time.monotonic()
        rates, last = {}, {}
        for cell in self.system.cells():
            key = (id(cell), now, cell.messages_in, cell.messages_out)
            prev = self._last.get(cell.path)
            if prev is not None and prev[0] == id(cell) and now > prev[1]:
                dt = now - prev[1]
                rates[cell.path] = ((cell.messages_in - prev[2]) / dt, (cell.messages_out - prev[3]) / dt)
            last[cell.path] = key
        self.rates, self._last = rates, last

    async def on_node_view(self, _msg: NodeView) -> dict[str, Any]:
        """This node's view, with its child nodes' (see `view`)."""
        return await self.view()

    def local_view(self) -> dict[str, Any]:
        """This node alone: its actors (merged with their supervisors' rows) and links."""
        entries: dict[str, dict[str, Any]] = {}
        for cell in self.system.cells():
            if cell.path == AGENT_PATH:
                continue
            rate_in, rate_out = self.rates.get(cell.path, (0.0, 0.0))
            entries[cell.path] = {
                "path": cell.path,
                "node": self.system.node_id,
                "pid": os.getpid(),
                "kind": "supervisor" if isinstance(cell.actor, Supervisor) else "actor",
                "class": type(cell.actor).__name__,
                "state": cell.state,
                "restart": None,
                "restarts": 0,
                "last_error": None,
                "mailbox": cell.mailbox.qsize(),
                "in_per_s": round(rate_in, 1),
                "out_per_s": round(rate_out, 1),
                "status": _status(cell.actor),
            }
        remote: list[dict[str, Any]] = []
        for cell in self.system.cells():
            if not isinstance(cell.actor, Supervisor):
                continue
            for row in cell.actor.rows():
                entry = entries.get(row["path"])
                if row["kind"] in ("process", "host") or entry is None:
                    entry = entries.setdefault(
                        row["path"], {"path": row["path"], "mailbox": None, "in_per_s": None, "out_per_s": None}
                    )
                    entry.update(kind=row["kind"], state=row["state"], node=row["node"], pid=row["pid"])
                    if row["kind"] in ("process", "host") and row["node"] and row["state"] == "running":
                        remote.append(row)
                entry.update(
                    restart=row["restart"], restarts=row["restarts"], last_error=row["last_error"], device=row["device"]
                )
        links = self.node.links() if self.node is not None else []
        node = {
            "node": self.system.node_id,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "links": links,
            **gpu_info(),
        }
        return {"nodes": [node], "actors": list(entries.values()), "remote": remote}

    async def view(self) -> dict[str, Any]:
        """This node and, recursively, every node its process and host children run on."""
        local = self.local_view()
        remote = local.pop("remote")
        views = await asyncio.gather(*(self._remote_view(row) for row in remote))
        actors = {a["path"]: a for a in local["actors"]}
        for row, view in zip(remote, views, strict=True):
            if "error" in view:
                actors[row["path"]]["state"] = f"unreachable ({view['error']})"
                continue
            local["nodes"].extend(view["nodes"])
            for entry in view["actors"]:
                mine = actors.get(entry["path"])
                if mine is not None:
                    # The supervisor's row knows restarts and the last error; the child node knows the rest.
                    entry = {
                        **entry,
                        "kind": mine["kind"],
                        "restart": mine["restart"],
                        "restarts": mine["restarts"],
                        "last_error": mine["last_error"],
                        "device": mine.get("device"),
                    }
                actors[entry["path"]] = entry
        local["actors"] = sorted(actors.values(), key=lambda a: a["path"])
        return local

    async def _remote_view(self, row: dict[str, Any]) -> dict[str, Any]:
        try:
            view = await self.system.ask(f"{row['node']}{AGENT_PATH}", NodeView(), REMOTE_VIEW_TIMEOUT)
        except FiveActorsError as exc:
            return {"error": str(exc)}
        return dict(view)


def _status(actor: Actor) -> dict[str, Any]:
    try:
        return dict(actor.status())
    except Exception as exc:  # noqa: BLE001 - one actor's broken status() must not break /actors
        return {"status_error": f"{type(exc).__name__}: {exc}"}
