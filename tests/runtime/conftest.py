"""Fixtures for the runtime tests: in-process nodes and node processes on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest

from five_actors.runtime.config import NodeConfig
from five_actors.runtime.node import Node
from tests.runtime.runtime_support import TOKEN, NodeFactory, PeerProcess


@pytest.fixture
async def make_node() -> AsyncIterator[NodeFactory]:
    """Start in-process nodes on free ports; all are stopped after the test."""
    nodes: list[Node] = []

    async def factory(node_id: str, **config: object) -> Node:
        node = Node(node_id, TOKEN, NodeConfig(port=0, **config))  # type: ignore[arg-type]
        await node.start()
        nodes.append(node)
        return node

    yield factory
    for node in reversed(nodes):
        await node.stop(actor_timeout=1.0)


@pytest.fixture
def peer_process() -> Iterator[Callable[..., Awaitable[PeerProcess]]]:
    """Start `peer_node` processes; each is killed after the test."""
    started: list[PeerProcess] = []

    async def factory(node_id: str, port: int = 0, connect: str | None = None) -> PeerProcess:
        peer = PeerProcess(node_id, port, connect)
        started.append(peer)
        return await peer.ready()

    yield factory
    for peer in started:
        peer.kill()
