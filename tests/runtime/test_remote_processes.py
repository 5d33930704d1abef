"""Remote tell/ask/watch between real OS processes; kill -9, link loss and reconnect."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable

import numpy as np
import pytest

from five_actors.errors import ActorDown, AskTimeout, UnknownMessageType
from five_actors.runtime.actor import Actor, Down, message
from five_actors.runtime.link import Link
from five_actors.runtime.node import Node
from tests.runtime.peer_node import Add, Blob, Die, Forward, Probe, Sleep, Total
from tests.runtime.runtime_support import NodeFactory, PeerProcess, free_port

PeerFactory = Callable[..., Awaitable[PeerProcess]]


@message
class OnlyInTests:
    """A message type the peer process has never registered."""

    n: int


class Watcher(Actor):
    """Collects the Down messages it receives."""

    def __init__(self) -> None:
        self.downs: asyncio.Queue[Down] = asyncio.Queue()

    async def on_down(self, msg: Down) -> None:
        await self.downs.put(msg)


async def _wait_link(node: Node, peer: str, state: str = "up") -> None:
    while not any(row["peer"] == peer and row["state"] == state for row in node.links()):
        await asyncio.sleep(0.02)


async def test_tell_ask_and_watch_across_processes(make_node: NodeFactory, peer_process: PeerFactory) -> None:
    node = await make_node("test")
    peer = await peer_process("peer")
    await node.connect(peer.url)
    big = np.random.default_rng(0).standard_normal((256, 1024)).astype(np.float32)
    echoed = await node.ask("peer/echo", Probe(1, big))
    np.testing.assert_array_equal(echoed.payload, big)
    counter = node.ref("peer/counter")
    for n in range(1, 101):
        await counter.tell(Add(n))
    assert await counter.ask(Total()) == 5050  # tells on one link arrive in order, before the ask
    with pytest.raises(UnknownMessageType, match="unknown message type 'OnlyInTests'"):
        await node.ask("peer/echo", OnlyInTests(1))
    with pytest.raises(AskTimeout, match="no reply from peer/echo to Sleep within 0.2s"):
        await node.ask("peer/echo", Sleep(1.0), timeout=0.2)
    assert node.transport.requests.waiting() == 0  # a timed-out ask leaves nothing behind for its late reply

    watcher = Watcher()
    node.system.spawn(watcher, "/watcher")
    node.system.watch(watcher.ref, node.ref("peer/echo"))
    node.system.watch(watcher.ref, node.ref("peer/nobody"))
    assert await asyncio.wait_for(watcher.downs.get(), 10) == Down("peer/nobody", "noproc")
    with pytest.raises(ActorDown, match="peer/echo is down \\(RuntimeError: on purpose\\)"):
        await node.ask("peer/echo", Die("on purpose"))
    assert await asyncio.wait_for(watcher.downs.get(), 10) == Down("peer/echo", "RuntimeError: on purpose")


async def test_kill_9_delivers_link_lost_and_fails_asks_at_once_then_reconnects(
    make_node: NodeFactory, peer_process: PeerFactory
) -> None:
    node = await make_node("test", reconnect_min_s=0.05, reconnect_max_s=0.2)
    port = free_port()
    peer = await peer_process("peer", port=port)
    await node.connect(peer.url)
    watcher = Watcher()
    node.system.spawn(watcher, "/watcher")
    node.system.watch(watcher.ref, node.ref("peer/echo"))
    node.system.watch(watcher.ref, node.ref("peer/counter"))
    await node.ask("peer/echo", Probe(0))  # the watches are registered by the time this returns
    in_flight = asyncio.create_task(node.ask("peer/echo", Sleep(60), timeout=120))
    await asyncio.sleep(0.2)

    peer.kill()
    with pytest.raises(ActorDown, match="link to node peer lost"):
        await in_flight  # not an AskTimeout after 120 s
    downs = {await asyncio.wait_for(watcher.downs.get(), 10) for _ in range(2)}
    assert downs == {Down("peer/echo", "link_lost"), Down("peer/counter", "link_lost")}
    with pytest.raises(ActorDown, match="unreachable"):
        await node.ask("peer/echo", Probe(1), timeout=120)
    await _wait_link(node, "peer", "reconnecting")

    await peer_process("peer", port=port)
    await asyncio.wait_for(_wait_link(node, "peer"), 30)
    assert (await node.ask("peer/echo", Probe(2))).n == 2


async def test_two_child_processes_talk_directly(make_node: NodeFactory, peer_process: PeerFactory) -> None:
    parent = await make_node("parent")
    first = await peer_process("first", connect=parent.url)
    await peer_process("second", connect=parent.url)
    await asyncio.wait_for(_wait_link(parent, "second"), 10)
    # first learned second's URL from the parent and links to it on demand; the reply comes back.
    got = await parent.ask("first/relay", Forward("second/echo", Probe(3)))
    assert got == Probe(3)
    got = await parent.ask("second/relay", Forward("first/echo", Probe(4)))
    assert got == Probe(4)
    assert first.proc.poll() is None


async def test_a_frozen_peer_is_dropped_by_the_heartbeat(make_node: NodeFactory, peer_process: PeerFactory) -> None:
    node = await make_node("test", heartbeat_s=1.0)
    peer = await peer_process("peer")
    await node.connect(peer.url)
    watcher = Watcher()
    node.system.spawn(watcher, "/watcher")
    node.system.watch(watcher.ref, node.ref("peer/echo"))
    await node.ask("peer/echo", Probe(0))
    os.kill(peer.proc.pid, signal.SIGSTOP)  # the socket stays open; only the missing pongs tell
    try:
        assert await asyncio.wait_for(watcher.downs.get(), 30) == Down("peer/echo", "link_lost")
    finally:
        os.kill(peer.proc.pid, signal.SIGCONT)


async def test_tells_wait_while_the_peer_does_not_read(make_node: NodeFactory, peer_process: PeerFactory) -> None:
    node = await make_node("test", heartbeat_s=60.0)
    peer = await peer_process("peer")
    await node.connect(peer.url)
    counter = node.ref("peer/counter")
    blob = np.zeros(1024 * 1024, dtype=np.uint8)

    async def flood() -> None:
        for _ in range(64):
            await counter.tell(Blob(blob))

    os.kill(peer.proc.pid, signal.SIGSTOP)
    try:
        sending = asyncio.create_task(flood())
        done, _ = await asyncio.wait({sending}, timeout=3)
        assert not done  # 64 MiB do not fit in the socket buffers: the sender waits
        assert len(node.transport.links["peer"]._batch) <= Link.BATCH_FRAMES
    finally:
        os.kill(peer.proc.pid, signal.SIGCONT)
    await asyncio.wait_for(sending, 120)
    assert await counter.ask(Total(), timeout=60) == 64 * blob.nbytes
