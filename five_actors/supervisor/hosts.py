"""Host children: a whole host supervisor, on another machine, that joined the head.

`five-actors join ws://HEAD:PORT --token-file F [--name NAME]` starts a node whose agent (a
HostAgent) links to the head and announces itself to the head's HostRegistry (`/_hosts`)
every second. A child of kind `host` claims a joined host (the one named like the child, else
any free one), asks it to start the child's subtree at the child's path, and watches that
subtree over the link: the subtree's exit, or the loss of the link, is the child's exit. A
restart claims a host again, so a host that reconnects (or another one) takes over. A host
that loses the head stops its subtrees: no orphans.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any

import structlog

from five_actors.config import Config, config_to_dict, from_mapping, write_run_config
from five_actors.errors import FiveActorsError, SupervisorError
from five_actors.runtime.actor import Actor, message
from five_actors.supervisor.agent import AGENT_PATH, NodeAgent
from five_actors.supervisor.child import Incarnation, TreeContext
from five_actors.supervisor.config import ChildSpec
from five_actors.supervisor.tree import Supervisor

log = structlog.get_logger("five_actors.supervisor")

REGISTRY_PATH = "/_hosts"
"""Where a head node runs its HostRegistry."""

ANNOUNCE_EVERY = 1.0
"""Seconds between a joined host's announcements to the head."""


@message
class HostJoined:
    """A joined host's announcement (repeated every second): its node id and name."""

    node: str
    name: str


@message
class StartSubtree:
    """Ask a joined host to run the subtree `spec` (a ChildSpec as a table) at `path`."""

    spec: dict[str, Any]
    path: str
    config: dict[str, Any] | None = None
    """The head's resolved run config (as config.json holds it), for the subtree's actors."""


@message
class StopSubtree:
    """Ask a joined host to stop the subtree at `path` within `timeout` seconds."""

    path: str
    timeout: float


class HostRegistry(Actor):
    """The head's list of joined hosts and which host child each one serves."""

    def __init__(self) -> None:
        self.hosts: dict[str, str] = {}
        """Joined host node id -> its name."""
        self.assigned: dict[str, str] = {}
        """Host node id -> the path of the host child it serves."""
        self._changed = asyncio.Event()

    async def on_host_joined(self, msg: HostJoined) -> None:
        """Record a host (once; later announcements are heartbeats) and watch for its loss."""
        if msg.node in self.hosts:
            return
        self.hosts[msg.node] = msg.name
        log.info("host_joined", actor=self.ref.path, host=msg.node, name=msg.name)
        self.system.watch_address(f"{msg.node}{AGENT_PATH}", lambda reason: self._lost(msg.node, reason))
        self._changed.set()

    def _lost(self, node: str, reason: str) -> None:
        self.hosts.pop(node, None)
        self.assigned.pop(node, None)
        log.warning("host_lost", actor=self.ref.path, host=node, reason=reason)

    async def claim(self, child_id: str, path: str, timeout: float) -> str:
        """Wait up to `timeout` for a free joined host (preferring one named `child_id`); returns its node id."""
        async with asyncio.timeout(timeout):
            while True:
                free = [node for node in self.hosts if node not in self.assigned]
                named = [node for node in free if self.hosts[node] == child_id]
                if named or free:
                    node = (named or free)[0]
                    self.assigned[node] = path
                    return node
                self._changed.clear()
                await self._changed.wait()

    def release(self, node: str, path: str) -> None:
        """The host child at `path` no longer uses `node`."""
        if self.assigned.get(node) == path:
            del self.assigned[node]
            self._changed.set()

    def status(self) -> dict[str, Any]:
        return {"hosts": dict(self.hosts), "assigned": dict(self.assigned)}


class HostIncarnation(Incarnation):
    """A host child: a subtree running on a joined host, supervised over the link."""

    def __init__(self, spec: ChildSpec, path: str, context: TreeContext) -> None:
        super().__init__(spec, path)
        if context.hosts is None:
            raise SupervisorError(f"child {spec.id!r} is a host child, but this node is not a head that hosts can join")
        self.context = context
        self.registry: HostRegistry = context.hosts
        self.host: str | None = None

    @property
    def address(self) -> str | None:
        return None if self.host is None else f"{self.host}{self.path}"

    @property
    def node(self) -> str | None:
        return self.host

    async def start(self) -> None:
        try:
            self.host = await self.registry.claim(self.spec.id, self.path, self.spec.start_timeout)
        except TimeoutError:
            raise SupervisorError(
                f"no host joined for child {self.spec.id!r} within {self.spec.start_timeout:g}s"
            ) from None
        self.exited.add_done_callback(lambda _: self.registry.release(self.host or "", self.path))
        agent = f"{self.host}{AGENT_PATH}"
        config = None if self.context.config is None else config_to_dict(self.context.config)
        await self.context.system.ask(
            agent, StartSubtree(dataclasses.asdict(self.spec), self.path, config), self.spec.start_timeout
        )
        self.context.system.watch_address(f"{self.host}{self.path}", self._exit)

    async def stop(self, timeout: float) -> str:
        if self.host is None:
            self._exit("shutdown")  # stopped while still waiting for a host: nothing ran
        elif not self.exited.done():
            with contextlib.suppress(FiveActorsError):
                await self.context.system.ask(
                    f"{self.host}{AGENT_PATH}", StopSubtree(self.path, timeout), timeout + 2.0
                )
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), 2.0)
        self._exit("killed")  # no answer from the host: as far as the head can tell, it is gone
        return await asyncio.shield(self.exited)

    def kill(self) -> None:
        if self.host is not None and not self.exited.done():
            ref = self.context.system.ref(f"{self.host}{AGENT_PATH}")
            task = asyncio.get_running_loop().create_task(ref.tell(StopSubtree(self.path, 0.1)))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
        self._exit("killed")


class HostAgent(NodeAgent):
    """The agent of a joined host: announces itself to the head and runs the subtrees it is given."""

    def __init__(self, node: Any, head: str, name: str, context: TreeContext) -> None:
        super().__init__(node)
        self.head = head
        self.name = name
        self.context = context
        self._unwatch: Any = None

    async def on_start(self) -> None:
        await super().on_start()
        self.spawn_task(self._announce_forever(), "host:announce")

    async def _announce_forever(self) -> None:
        registry = self.system.ref(f"{self.head}{REGISTRY_PATH}")
        while True:
            try:
                await registry.tell(HostJoined(self.system.node_id, self.name))
                if self._unwatch is None:
                    self._unwatch = self.system.watch_address(registry.address, self._head_lost)
            except FiveActorsError:
                pass  # the link is reconnecting; the next announcement will get through
            await asyncio.sleep(ANNOUNCE_EVERY)

    def _head_lost(self, reason: str) -> None:
        self._unwatch = None
        log.warning("head_lost", actor=self.ref.path, head=self.head, reason=reason)
        for path in self._subtrees():
            self.system.kill(path)

    def _subtrees(self) -> list[str]:
        return [c.path for c in self.system.cells() if isinstance(c.actor, Supervisor)]

    async def on_start_subtree(self, msg: StartSubtree) -> str:
        """Start the subtree at its path (replacing a stale one); returns its address once it runs."""
        spec = from_mapping(ChildSpec, msg.spec, msg.path)
        if msg.config is not None:
            # The head's config becomes this host's: its actors and process children read it.
            self.context.config = from_mapping(Config, msg.config, "config")
            if self.context.run_dir is not None:
                write_run_config(self.context.config, self.context.run_dir)
        if self.system.is_alive(msg.path):
            await self.system.stop(msg.path, spec.shutdown_timeout)
        ref = self.system.spawn(Supervisor(spec, self.context), msg.path)
        reason = await self.system.wait_started(ref)
        if reason is not None:
            raise SupervisorError(f"subtree {msg.path} failed to start on {self.system.node_id}: {reason}")
        return ref.address

    async def on_stop_subtree(self, msg: StopSubtree) -> str:
        """Stop the subtree at its path; returns its exit reason."""
        return await self.system.stop(msg.path, msg.timeout)
