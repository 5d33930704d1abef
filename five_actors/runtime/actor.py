"""Actors: an object, a bounded mailbox and one task that takes messages one at a time.

Messages are frozen dataclasses registered by type name with `@message`. An actor handles
message type `FooBar` in `async def on_foo_bar(self, msg)`; the return value is the reply to
an `ask`. A handler that raises a FiveActorsError refuses that one request (the asker gets a
RemoteError) and the actor goes on; any other exception crashes the actor (let it crash:
its supervisor decides what happens next).

Exit reasons carried by `Down`: "normal" (the actor stopped itself), "shutdown" (it was asked
to stop), "killed" (cancelled without cleanup), "noproc" (it was not running when watched),
"link_lost" (its node became unreachable), or the crash's "ExceptionType: message".
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ClassVar, Protocol, TypeVar, dataclass_transform

import structlog

from five_actors.errors import ActorDown, AskTimeout, FiveActorsError, RemoteError, UnknownMessageType

log = structlog.get_logger("five_actors.actor")

T = TypeVar("T")

MESSAGE_TYPES: dict[str, type] = {}

NORMAL_EXITS = frozenset({"normal", "shutdown"})


@dataclass_transform(frozen_default=True)
def message(cls: type[T]) -> type[T]:
    """Make `cls` a frozen dataclass and register it under its class name for the wire."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    existing = MESSAGE_TYPES.get(cls.__name__)
    # The wire names a message by its class name alone, so two classes may not share one.
    if existing is not None and (existing.__module__, existing.__qualname__) != (cls.__module__, cls.__qualname__):
        raise TypeError(
            f"message type name {cls.__name__!r} is already registered by {existing.__module__}.{existing.__qualname__}"
        )
    MESSAGE_TYPES[cls.__name__] = cls
    return cls


@dataclass_transform(frozen_default=True)
def local_message(cls: type[T]) -> type[T]:
    """Make `cls` a frozen dataclass message that never crosses the wire: it is not registered, so no frame can
    name it (an actor's notes to itself, such as a supervisor's ChildExited, must not come from a peer)."""
    return dataclasses.dataclass(frozen=True)(cls)


def message_type(name: str) -> type:
    """The registered message class called `name`."""
    try:
        return MESSAGE_TYPES[name]
    except KeyError:
        raise UnknownMessageType(f"unknown message type {name!r}") from None


@message
class Down:
    """The watched actor at `address` is gone, for `reason` (see the module docstring)."""

    address: str
    reason: str


Reply = Callable[[Any, BaseException | None], None]
"""Called once with (result, None) or (None, error) to answer an ask."""


class RemoteRouter(Protocol):
    """What a node provides so that refs to other nodes' actors work like local ones.

    `send` with a `reply` must call it exactly once: with the answer, the remote error, or
    ActorDown when the link is lost (so an ask to a remote actor needs no death watch), unless
    `cancel(reply)` is called first because the asker stopped waiting.
    """

    async def send(self, address: str, msg: Any, reply: Reply | None, sender: str | None) -> None: ...

    def cancel(self, reply: Reply) -> None: ...

    def watch(self, address: str, callback: Callable[[str], None]) -> Callable[[], None]: ...


def split_address(address: str) -> tuple[str, str]:
    """`node/path/to/actor` -> (`node`, `/path/to/actor`)."""
    node, sep, rest = address.partition("/")
    if not sep or not node or not rest:
        raise ValueError(f"bad actor address {address!r}: expected NODE/PATH")
    return node, "/" + rest


class ActorRef:
    """A handle on an actor, local or remote; cheap to copy, safe to keep after the actor dies."""

    __slots__ = ("system", "address")

    def __init__(self, system: ActorSystem, address: str) -> None:
        self.system = system
        self.address = address

    @property
    def node(self) -> str:
        return split_address(self.address)[0]

    @property
    def path(self) -> str:
        return split_address(self.address)[1]

    async def tell(self, msg: Any, sender: ActorRef | None = None) -> None:
        """Send and forget; waits only while the mailbox (or the link) is full."""
        await self.system.deliver(self.address, msg, None, sender.address if sender else None)

    async def ask(self, msg: Any, timeout: float = 5.0) -> Any:
        """Send and wait for the reply; raises AskTimeout, ActorDown or RemoteError."""
        return await self.system.ask(self.address, msg, timeout)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorRef) and other.address == self.address

    def __hash__(self) -> int:
        return hash(self.address)

    def __repr__(self) -> str:
        return f"ActorRef({self.address!r})"


class Actor:
    """Base class of every actor. Override `on_start`, `on_stop` and `on_<message_type>` handlers."""

    mailbox_size: ClassVar[int] = 1024
    ref: ActorRef
    system: ActorSystem
    context: Any = None
    """The supervisor's TreeContext (run config, run dir), set before a supervised actor starts; None otherwise."""

    async def on_start(self) -> None:
        """Runs before the first message; an exception here is a crash."""

    async def on_stop(self) -> None:
        """Runs after the last message on a graceful stop (not after a crash or kill)."""

    def status(self) -> dict[str, Any]:
        """Extra fields this actor reports in /actors."""
        return {}

    def spawn_task(self, coro: Coroutine[Any, Any, Any], name: str = "") -> asyncio.Task[Any]:
        """A background task owned by this actor: cancelled when it stops, and its crash is the actor's."""
        return self.system._cell(self.ref.path).spawn_task(coro, name)

    def stop_self(self) -> None:
        """Stop after the current message, with reason "normal"."""
        self.system._cell(self.ref.path).request_stop("normal")


_STOP = object()


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


_HANDLERS: dict[tuple[type, type], Callable[..., Awaitable[Any]] | None] = {}


def _handler(actor: Actor, msg_type: type) -> Callable[[Any], Awaitable[Any]] | None:
    key = (type(actor), msg_type)
    if key not in _HANDLERS:
        _HANDLERS[key] = getattr(type(actor), f"on_{_snake(msg_type.__name__)}", None)
    fn = _HANDLERS[key]
    return None if fn is None else fn.__get__(actor)


@dataclasses.dataclass
class _Delivery:
    msg: Any
    reply: Reply | None
    sender: str | None


class _Cell:
    """The runtime side of one live actor: its mailbox, task, counters and exit reason."""

    def __init__(self, system: ActorSystem, actor: Actor, path: str) -> None:
        self.system = system
        self.actor = actor
        self.path = path
        self.mailbox: asyncio.Queue[_Delivery | object] = asyncio.Queue(maxsize=actor.mailbox_size)
        self.state = "starting"
        self.started_at = time.time()
        self.messages_in = 0
        self.messages_out = 0
        self.stop_reason = "shutdown"
        self.tasks: set[asyncio.Task[Any]] = set()
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"actor:{path}")
        self.done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.running: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def exit_if_never_ran(self, task: asyncio.Task[Any]) -> None:
        """Record the exit of a task cancelled before its first step (its `_run` never ran)."""
        if not self.done.done():
            self.state = "crashed"
            log.warning("actor_killed", actor=self.path)
            self.system._exited(self, "killed", None)

    def spawn_task(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name or f"{self.path}:task")
        self.tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and not self.task.done():
            self.crash_from_task = task.exception()
            self.task.cancel()

    crash_from_task: BaseException | None = None

    def request_stop(self, reason: str) -> None:
        self.stop_reason = reason
        try:
            self.mailbox.put_nowait(_STOP)
        except asyncio.QueueFull:
            self.task.cancel()

    async def _run(self) -> None:
        log_ = log.bind(actor=self.path)
        reason = "shutdown"
        error_text = None
        try:
            await self.actor.on_start()
            self.state = "running"
            self.running.set_result(None)
            log_.info("actor_started", cls=type(self.actor).__name__)
            while True:
                item = await self.mailbox.get()
                if item is _STOP:
                    break
                assert isinstance(item, _Delivery)
                self.messages_in += 1
                await self._handle(item)
            self.state = "stopping"
            await self._cancel_tasks()
            await self.actor.on_stop()
            reason = self.stop_reason
            log_.info("actor_stopped", reason=reason)
        except asyncio.CancelledError:
            if self.crash_from_task is not None:
                exc = self.crash_from_task
                reason = f"{type(exc).__name__}: {exc}"
                error_text = "".join(traceback.format_exception(exc))
                log_.error("actor_crashed", reason=reason, traceback=error_text)
            else:
                reason = "killed"
                log_.warning("actor_killed")
        except Exception as exc:  # noqa: BLE001 - a crash is this actor's exit reason
            reason = f"{type(exc).__name__}: {exc}"
            error_text = traceback.format_exc()
            log_.error("actor_crashed", reason=reason, traceback=error_text)
        finally:
            await self._cancel_tasks()
            self.state = "stopped" if reason in NORMAL_EXITS else "crashed"
            self.system._exited(self, reason, error_text)

    async def _handle(self, item: _Delivery) -> None:
        handler = _handler(self.actor, type(item.msg))
        if handler is None:
            error = RemoteError(
                "UnknownMessageType", f"{type(self.actor).__name__} has no handler for {type(item.msg).__name__}"
            )
            log.warning("message_unhandled", actor=self.path, type=type(item.msg).__name__)
            if item.reply:
                item.reply(None, error)
            return
        try:
            result = await handler(item.msg)
        except FiveActorsError as exc:
            log.warning("request_refused", actor=self.path, type=type(item.msg).__name__, error=str(exc))
            if item.reply:
                item.reply(None, exc if isinstance(exc, RemoteError) else RemoteError(type(exc).__name__, str(exc)))
            return
        if isinstance(result, asyncio.Future):
            # A deferred reply: the future answers the ask when it resolves, and the actor takes
            # further messages meanwhile (an InferenceActor batching requests from many askers).
            if item.reply:
                result.add_done_callback(functools.partial(self._reply_deferred, item.reply))
            return
        if item.reply:
            self.messages_out += 1
            item.reply(result, None)

    def _reply_deferred(self, reply: Reply, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            reply(None, ActorDown(f"{self.path} dropped the request before replying"))
            return
        exc = future.exception()
        if exc is None:
            self.messages_out += 1
            reply(future.result(), None)
        elif isinstance(exc, FiveActorsError):
            reply(None, exc if isinstance(exc, (RemoteError, ActorDown)) else RemoteError(type(exc).__name__, str(exc)))
        else:
            reply(None, RemoteError(type(exc).__name__, str(exc)))

    async def _cancel_tasks(self) -> None:
        tasks = [t for t in self.tasks if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


class ActorSystem:
    """The actors of one node by path, local delivery, asks, and death watch.

    A node sets `remote` so that addresses on other nodes are routed over links; without it
    every address must be local.
    """

    def __init__(self, node_id: str = "local") -> None:
        self.node_id = node_id
        self.remote: RemoteRouter | None = None
        self._cells: dict[str, _Cell] = {}
        self._watchers: dict[str, dict[int, Callable[[str], None]]] = {}
        self._next_watch = 0
        self.last_errors: dict[str, str] = {}
        """The last crash traceback per path; kept after the actor is gone, for /actors and restarts."""

    # -- refs and lifecycle ---------------------------------------------------------------

    def ref(self, address_or_path: str) -> ActorRef:
        """A ref from a full address (`node/path`) or a local path (`/path`)."""
        if address_or_path.startswith("/"):
            return ActorRef(self, f"{self.node_id}{address_or_path}")
        split_address(address_or_path)
        return ActorRef(self, address_or_path)

    def spawn(self, actor: Actor, path: str) -> ActorRef:
        """Start `actor` at `path` (`/a/b`); the path must not hold a live actor."""
        if not path.startswith("/") or path.endswith("/") or "//" in path:
            raise ValueError(f"bad actor path {path!r}: expected /name or /group/name")
        if path in self._cells:
            raise ValueError(f"an actor is already running at {path}")
        ref = self.ref(path)
        actor.ref = ref
        actor.system = self
        cell = self._cells[path] = _Cell(self, actor, path)
        cell.task.add_done_callback(cell.exit_if_never_ran)
        return ref

    async def stop(self, ref: ActorRef | str, timeout: float = 5.0) -> str:
        """Ask the actor to stop, wait up to `timeout`, then kill it; returns its exit reason."""
        cell = self._cells.get(ref if isinstance(ref, str) else ref.path)
        if cell is None:
            return "noproc"
        cell.request_stop("shutdown")
        try:
            return await asyncio.wait_for(asyncio.shield(cell.done), timeout)
        except TimeoutError:
            log.warning("actor_shutdown_timeout", actor=cell.path, timeout=timeout)
            cell.task.cancel()
            return await cell.done

    def kill(self, ref: ActorRef | str) -> None:
        """Cancel the actor at once: no on_stop, exit reason "killed"."""
        cell = self._cells.get(ref if isinstance(ref, str) else ref.path)
        if cell is not None:
            cell.task.cancel()

    async def wait(self, ref: ActorRef | str) -> str:
        """Wait until the local actor exits; returns its exit reason ("noproc" if not running)."""
        cell = self._cells.get(ref if isinstance(ref, str) else ref.path)
        return "noproc" if cell is None else await asyncio.shield(cell.done)

    async def wait_started(self, ref: ActorRef | str) -> str | None:
        """Wait until the local actor's on_start has finished: None if it is running, else its exit reason."""
        cell = self._cells.get(ref if isinstance(ref, str) else ref.path)
        if cell is None:
            return "noproc"
        either: list[asyncio.Future[Any]] = [cell.running, cell.done]
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        return cell.done.result() if cell.done.done() else None

    def is_alive(self, path: str) -> bool:
        return path in self._cells

    def actor(self, path: str) -> Actor | None:
        cell = self._cells.get(path)
        return None if cell is None else cell.actor

    def _cell(self, path: str) -> _Cell:
        return self._cells[path]

    def _exited(self, cell: _Cell, reason: str, error_text: str | None) -> None:
        if self._cells.get(cell.path) is cell:
            del self._cells[cell.path]
        if error_text:
            self.last_errors[cell.path] = error_text
        self._fail_pending(cell)
        if not cell.done.done():
            cell.done.set_result(reason)
        for callback in list(self._watchers.pop(cell.path, {}).values()):
            callback(reason)

    @staticmethod
    def _fail_pending(cell: _Cell) -> None:
        while not cell.mailbox.empty():
            item = cell.mailbox.get_nowait()
            if isinstance(item, _Delivery) and item.reply:
                item.reply(None, ActorDown(f"{cell.path} stopped before handling {type(item.msg).__name__}"))

    # -- delivery -------------------------------------------------------------------------

    async def deliver(self, address: str, msg: Any, reply: Reply | None, sender: str | None = None) -> None:
        """Put `msg` in the mailbox at `address` (waiting while it is full) or route it to its node."""
        node, path = split_address(address)
        if node != self.node_id:
            if self.remote is None:
                raise ActorDown(f"{address}: node {node!r} is not linked to this node ({self.node_id!r})")
            await self.remote.send(address, msg, reply, sender)
            return
        cell = self._cells.get(path)
        if cell is None or cell.state == "stopping":
            error = ActorDown(f"no actor running at {address}")
            if reply:
                reply(None, error)
                return
            raise error
        try:
            cell.mailbox.put_nowait(_Delivery(msg, reply, sender))
        except asyncio.QueueFull:
            await cell.mailbox.put(_Delivery(msg, reply, sender))

    def deliver_nowait(self, path: str, msg: Any, reply: Reply | None, sender: str | None = None) -> bool:
        """`deliver` to the local actor at `path` without waiting: False (nothing done) when its
        mailbox is full, so the caller awaits `deliver` instead."""
        cell = self._cells.get(path)
        if cell is None or cell.state == "stopping":
            error = ActorDown(f"no actor running at {self.node_id}{path}")
            if reply:
                reply(None, error)
                return True
            raise error
        try:
            cell.mailbox.put_nowait(_Delivery(msg, reply, sender))
        except asyncio.QueueFull:
            return False
        return True

    async def ask(self, address: str, msg: Any, timeout: float) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def reply(result: Any, error: BaseException | None) -> None:
            if not future.done():
                future.set_exception(error) if error is not None else future.set_result(result)

        remote = self.remote if split_address(address)[0] != self.node_id else None
        # A local ask watches its target so it fails at once when the actor dies mid-request;
        # a remote one relies on the router, which always answers (ActorDown on a lost link).
        unwatch = (
            None
            if remote
            else self.watch_address(address, lambda reason: reply(None, ActorDown(f"{address} is down ({reason})")))
        )
        try:
            await self.deliver(address, msg, reply)
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that
            # arrives as the reply does, leaving an actor's task that cannot be stopped.
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            raise AskTimeout(f"no reply from {address} to {type(msg).__name__} within {timeout:g}s") from None
        finally:
            if unwatch is not None:
                unwatch()
            elif remote is not None:
                remote.cancel(reply)  # a no-op unless the ask timed out or was cancelled

    # -- death watch ----------------------------------------------------------------------

    def watch_address(self, address: str, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call `callback(reason)` once when the actor at `address` exits (at once if it is not
        running). Returns a function that cancels the watch."""
        node, path = split_address(address)
        if node != self.node_id:
            if self.remote is None:
                callback("noproc")
                return lambda: None
            return self.remote.watch(address, callback)
        if path not in self._cells:
            asyncio.get_running_loop().call_soon(callback, "noproc")
            return lambda: None
        self._next_watch += 1
        key = self._next_watch
        self._watchers.setdefault(path, {})[key] = callback
        return lambda: self._watchers.get(path, {}).pop(key, None) and None

    def watch(self, watcher: ActorRef, target: ActorRef) -> Callable[[], None]:
        """Deliver `Down(target.address, reason)` to `watcher` when `target` exits (also if it
        already has). Returns a function that cancels the watch."""

        def notify(reason: str) -> None:
            asyncio.get_running_loop().create_task(self._deliver_down(watcher, target.address, reason))

        return self.watch_address(target.address, notify)

    async def _deliver_down(self, watcher: ActorRef, address: str, reason: str) -> None:
        try:
            await watcher.tell(Down(address, reason))
        except ActorDown:
            pass  # the watcher is gone too; nobody is left to tell

    # -- introspection --------------------------------------------------------------------

    def cells(self) -> list[_Cell]:
        return list(self._cells.values())
