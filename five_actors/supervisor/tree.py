"""Supervisors with Erlang/OTP semantics.

A Supervisor is an actor that starts its children in order and stops them in reverse. When a
child exits, its restart type decides whether it comes back: `permanent` always, `transient`
only after an abnormal exit (any reason other than "normal" or "shutdown"), `temporary`
never (it is removed). The strategy decides who comes back with it: `one_for_one` (the child
alone), `one_for_all` (every sibling is stopped and all are restarted in order) or
`rest_for_one` (the children started after it are stopped and restarted with it). More than
`max_restarts` restarts within `max_seconds` and the supervisor gives up: it stops all its
children and exits abnormally, so that its own parent decides. Restarts wait a backoff that
doubles with each restart inside the intensity window.

Lifecycle events: child_started, child_exited, child_restarted, supervisor_gave_up.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import structlog

from five_actors.errors import SupervisorError
from five_actors.runtime.actor import NORMAL_EXITS, Actor, local_message, message
from five_actors.supervisor.child import Incarnation, LocalIncarnation, TreeContext
from five_actors.supervisor.config import ChildSpec, SupervisorSpec, import_class

log = structlog.get_logger("five_actors.supervisor")


@local_message
class ChildExited:
    """Internal: the incarnation `generation` of child `child` exited for `reason`."""

    child: str
    generation: int
    reason: str


@local_message
class RestartPending:
    """Internal: the backoff before restart round `token` is over."""

    token: int


@message
class RestartChild:
    """Restart child `child` as if it had crashed (its restart type and the strategy apply): the head's watchdog, for a
    stuck child."""

    child: str
    reason: str


@message
class WhichChildren:
    """Ask a supervisor for one row per child (id, kind, state, restarts, last error, ...)."""


@dataclass
class _Child:
    """A supervisor's bookkeeping for one child spec."""

    spec: ChildSpec
    generation: int = 0
    incarnation: Incarnation | None = None
    state: str = "stopped"
    restarts: int = 0
    last_error: str | None = None
    last_reason: str | None = None


def make_incarnation(spec: ChildSpec, path: str, context: TreeContext) -> Incarnation:
    """A not-yet-started incarnation of `spec` at actor path `path`."""
    if spec.kind == "actor":
        cls = import_class(spec.actor, f"{spec.id}.actor")
        actor = cls(**spec.args)
        actor.context = context  # before it starts: on_start may read the run's config and run dir
        return LocalIncarnation(spec, path, context.system, actor)
    if spec.kind == "supervisor":
        return LocalIncarnation(spec, path, context.system, Supervisor(spec, context))
    if spec.kind == "process":
        from five_actors.supervisor.processes import ProcessIncarnation

        return ProcessIncarnation(spec, path, context)
    from five_actors.supervisor.hosts import HostIncarnation

    return HostIncarnation(spec, path, context)


async def _raise(exc: BaseException) -> None:
    raise exc


class Supervisor(Actor):
    """Starts, watches and restarts its children as its spec says (see the module docstring)."""

    def __init__(self, spec: SupervisorSpec, context: TreeContext) -> None:
        self.spec = spec
        self.context = context
        self.children = [_Child(c) for c in spec.children]
        self._restart_times: deque[float] = deque()
        self._round = 0
        self._gave_up = False
        self.log: Any = log  # bound to this supervisor's path once it runs

    # -- lifecycle ------------------------------------------------------------------------

    async def on_start(self) -> None:
        self.log = log.bind(actor=self.ref.path)
        # If this supervisor dies without on_stop (crash, kill), its children must not outlive it.
        self.system.watch_address(self.ref.address, self._kill_orphans)
        try:
            for child in self.children:
                reason = await self._start(child)
                if reason is not None:
                    await self._stop_all()
                    raise SupervisorError(f"child {child.spec.id!r} failed to start: {reason}")
        except asyncio.CancelledError:
            await self._stop_all()  # killed while starting (a host that never joined): stop what did start
            raise

    async def on_stop(self) -> None:
        try:
            await self._stop_all()
        finally:
            self._kill_orphans("shutdown")

    def _kill_orphans(self, _reason: str) -> None:
        for child in self.children:
            if child.incarnation is not None:
                child.generation += 1
                child.incarnation.kill()

    # -- messages -------------------------------------------------------------------------

    async def on_child_exited(self, msg: ChildExited) -> None:
        """Apply the restart type and strategy to a child's exit."""
        child = self._find(msg.child)
        if child is None or child.generation != msg.generation or self._gave_up:
            return  # an incarnation this supervisor already stopped or replaced
        await self._handle_exit(child, msg.reason)

    async def on_restart_pending(self, msg: RestartPending) -> None:
        """The backoff is over: start, in order, every child waiting to restart."""
        if msg.token != self._round or self._gave_up:
            return
        for child in list(self.children):
            if child.state != "restarting":
                continue
            reason = await self._start(child)
            if reason is not None:
                await self._handle_exit(child, reason)
                return  # that exit scheduled the next round, which starts the rest
            child.restarts += 1
            self.log.info("child_restarted", child=child.spec.id, restarts=child.restarts)

    async def on_restart_child(self, msg: RestartChild) -> None:
        """Kill a running child; its exit is handled as any crash (an unknown or stopped child: nothing happens)."""
        child = self._find(str(msg.child))
        if child is None or child.incarnation is None or self._gave_up:
            return
        self.log.warning("child_restart_requested", child=child.spec.id, reason=str(msg.reason))
        child.incarnation.kill()

    async def on_which_children(self, _msg: WhichChildren) -> list[dict[str, Any]]:
        """One row per child (see `rows`)."""
        return self.rows()

    def status(self) -> dict[str, Any]:
        return {"strategy": self.spec.strategy, "children": len(self.children)}

    def rows(self) -> list[dict[str, Any]]:
        """One row per child, in start order, for /actors and `five-actors health`."""
        rows = []
        for child in self.children:
            row: dict[str, Any] = {
                "id": child.spec.id,
                "kind": child.spec.kind,
                "path": f"{self.ref.path}/{child.spec.id}",
                "state": child.state,
                "restart": child.spec.restart,
                "restarts": child.restarts,
                "last_error": child.last_error,
                "device": child.spec.device if child.spec.kind == "process" else None,
                "address": None,
                "pid": None,
                "node": None,
            }
            if child.incarnation is not None:
                row.update(child.incarnation.describe())
            rows.append(row)
        return rows

    # -- starting, stopping, restarting ---------------------------------------------------

    def _find(self, child_id: str) -> _Child | None:
        return next((c for c in self.children if c.spec.id == child_id), None)

    async def _start(self, child: _Child) -> str | None:
        """Start one child; None when it runs, else why it could not start."""
        child.generation += 1
        generation = child.generation
        child.state = "starting"
        try:
            incarnation = make_incarnation(child.spec, f"{self.ref.path}/{child.spec.id}", self.context)
        except Exception as exc:  # noqa: BLE001 - a child that cannot be built failed to start
            child.state = "exited"
            return f"{type(exc).__name__}: {exc}"
        child.incarnation = incarnation
        try:
            await incarnation.start()
        except Exception as exc:  # noqa: BLE001 - same: the reason goes to the restart logic
            incarnation.kill()
            child.incarnation, child.state = None, "exited"
            return f"{type(exc).__name__}: {exc}"
        if incarnation.exited.done() and incarnation.exited.result() not in NORMAL_EXITS:
            child.incarnation, child.state = None, "exited"
            return incarnation.exited.result()
        child.state = "running"
        self.log.info(
            "child_started", child=child.spec.id, kind=child.spec.kind, pid=incarnation.pid, node=incarnation.node
        )
        incarnation.exited.add_done_callback(lambda f: self._notify_exit(child.spec.id, generation, f.result()))
        return None

    def _notify_exit(self, child_id: str, generation: int, reason: str) -> None:
        if self._gave_up or not self.system.is_alive(self.ref.path):
            return
        self.spawn_task(self._tell_self(ChildExited(child_id, generation, reason)), f"{self.ref.path}:exit:{child_id}")

    async def _tell_self(self, msg: Any) -> None:
        try:
            await self.ref.tell(msg)
        except Exception:  # noqa: BLE001 - this supervisor is stopping; the exit no longer matters
            pass

    async def _after(self, delay: float, msg: Any) -> None:
        await asyncio.sleep(delay)
        await self._tell_self(msg)

    async def _stop_child(self, child: _Child) -> None:
        incarnation = child.incarnation
        if incarnation is None:
            return
        child.generation += 1  # its exit is expected: no ChildExited handling for it
        child.state = "stopping"
        reason = await incarnation.stop(child.spec.shutdown_timeout)
        child.incarnation, child.state, child.last_reason = None, "stopped", reason
        self.log.info("child_exited", child=child.spec.id, reason=reason)

    async def _stop_all(self) -> None:
        for child in reversed(self.children):
            await self._stop_child(child)

    async def _handle_exit(self, child: _Child, reason: str) -> None:
        abnormal = reason not in NORMAL_EXITS
        child.incarnation, child.last_reason = None, reason
        child.state = "exited" if abnormal else "stopped"
        if abnormal:
            child.last_error = reason
        self.log.info("child_exited", child=child.spec.id, reason=reason)
        if child.spec.restart == "temporary" or (child.spec.restart == "transient" and not abnormal):
            if child.spec.restart == "temporary":
                self.children.remove(child)
            return
        if self._intensity_exceeded():
            await self._give_up(child, reason)
            return
        for other in reversed(self._group(child)):
            was_running = other.incarnation is not None or other.state == "restarting"
            if other is not child and other.incarnation is not None:
                await self._stop_child(other)
            if other.spec.restart == "temporary" and other is not child:
                self.children.remove(other)  # OTP: a temporary child is never restarted, so it goes
            elif other is child or was_running:
                other.state = "restarting"
        self._round += 1
        self.spawn_task(self._after(self._backoff(), RestartPending(self._round)), f"{self.ref.path}:backoff")

    def _group(self, child: _Child) -> list[_Child]:
        """The children that restart when `child` does, in start order."""
        if self.spec.strategy == "one_for_one":
            return [child]
        if self.spec.strategy == "one_for_all":
            return list(self.children)
        return self.children[self.children.index(child) :]

    def _intensity_exceeded(self) -> bool:
        now = time.monotonic()
        self._restart_times.append(now)
        while self._restart_times and self._restart_times[0] < now - self.spec.max_seconds:
            self._restart_times.popleft()
        return len(self._restart_times) > self.spec.max_restarts

    def _backoff(self) -> float:
        if self.spec.backoff <= 0:
            return 0.0
        return min(self.spec.backoff * 2.0 ** (len(self._restart_times) - 1), self.spec.backoff_max)

    async def _give_up(self, child: _Child, reason: str) -> None:
        self._gave_up = True
        restarts = len(self._restart_times) - 1
        self.log.error("supervisor_gave_up", child=child.spec.id, reason=reason, restarts=restarts)
        await self._stop_all()
        error = SupervisorError(
            f"gave up (more than max_restarts={self.spec.max_restarts} within {self.spec.max_seconds:g}s): "
            f"child {child.spec.id!r} exited with {reason}"
        )
        # A FiveActorsError raised in a handler only refuses one request; raised in an owned task it
        # crashes this actor, which is what giving up means.
        self.spawn_task(_raise(error), f"{self.ref.path}:give_up")
