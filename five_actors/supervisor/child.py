"""One running incarnation of a supervisor's child, whatever its kind.

A supervisor starts a child by creating an Incarnation; the incarnation's `exited` future
resolves exactly once with the exit reason (see five_actors.runtime.actor), whether the child
stopped, crashed, was killed, or its process or host went away. A restart is a new
incarnation; the old one is never reused.
"""

from __future__ import annotations

import abc
import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from five_actors.runtime.actor import Actor, ActorRef, ActorSystem

if TYPE_CHECKING:
    from five_actors.config import Config
    from five_actors.supervisor.config import ChildSpec


@dataclass
class TreeContext:
    """What starting children of every kind needs from the node that hosts the tree."""

    system: ActorSystem
    """The actor system of this node."""
    run_dir: Path | None = None
    """The run directory (token, logs, config.json, checkpoints); process and host children need it."""
    node: Any = None
    """The five_actors.runtime.node.Node hosting this tree, when there is one (process and host children)."""
    hosts: Any = None
    """The five_actors.supervisor.hosts.HostRegistry of a head node, for host children."""
    log_level: str = "info"
    """Log level handed to child OS processes."""
    config: Config | None = None
    """The run's whole resolved config (RUN_DIR/config.json); actors read their settings from it."""


class Incarnation(abc.ABC):
    """One start of a child: resolves `exited` once, can be stopped gracefully or killed."""

    def __init__(self, spec: ChildSpec, path: str) -> None:
        self.spec = spec
        self.path = path
        self.exited: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    @property
    def address(self) -> str | None:
        """The actor address of the child's top actor, when it has one."""
        return None

    @property
    def pid(self) -> int | None:
        """The OS process id running the child."""
        return None

    @property
    def node(self) -> str | None:
        """The node id the child runs on."""
        return None

    @abc.abstractmethod
    async def start(self) -> None:
        """Start the child; returns once it runs, raises (or resolves `exited`) if it cannot start."""

    @abc.abstractmethod
    async def stop(self, timeout: float) -> str:
        """Ask the child to stop, wait up to `timeout`, then kill it; returns its exit reason."""

    @abc.abstractmethod
    def kill(self) -> None:
        """Kill the child at once, without waiting (used when its supervisor dies abruptly)."""

    def _exit(self, reason: str) -> None:
        if not self.exited.done():
            self.exited.set_result(reason)

    def describe(self) -> dict[str, Any]:
        """Fields for the child's row in /actors."""
        return {"address": self.address, "pid": self.pid, "node": self.node}


class LocalIncarnation(Incarnation):
    """An actor (or a nested supervisor, which is an actor too) in this process."""

    def __init__(self, spec: ChildSpec, path: str, system: ActorSystem, actor: Actor) -> None:
        super().__init__(spec, path)
        self.system = system
        self.actor = actor
        self.ref: ActorRef | None = None

    @property
    def address(self) -> str | None:
        return None if self.ref is None else self.ref.address

    @property
    def node(self) -> str | None:
        return self.system.node_id

    @property
    def pid(self) -> int | None:
        return os.getpid()

    async def start(self) -> None:
        self.ref = self.system.spawn(self.actor, self.path)
        self.system.watch_address(self.ref.address, self._exit)
        reason = await self.system.wait_started(self.ref)
        if reason is not None:
            self._exit(reason)

    async def stop(self, timeout: float) -> str:
        if self.ref is not None and not self.exited.done():
            await self.system.stop(self.ref, timeout)
        return await asyncio.shield(self.exited)

    def kill(self) -> None:
        if self.ref is not None:
            self.system.kill(self.ref)
