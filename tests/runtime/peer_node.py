"""A small node process for the runtime tests: `python -m tests.runtime.peer_node NODE_ID PORT TOKEN [CONNECT_URL]`.

It serves /echo (Echo), /counter (Counter) and /relay (Relay), prints one JSON line
`READY {"url": ..., "node": ...}` once it listens, and runs until it is killed or gets SIGTERM.
The message classes here are shared with the tests, which import this module.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any

import numpy as np

from five_actors.logs import configure_logging
from five_actors.runtime.actor import Actor, message
from five_actors.runtime.config import NodeConfig
from five_actors.runtime.node import Node, run


@message
class Probe:
    """Echoed back by Echo."""

    n: int
    payload: np.ndarray | None = None


@message
class Sleep:
    """Echo sleeps this long before replying (keeps an ask in flight)."""

    seconds: float


@message
class Die:
    """Echo raises RuntimeError(reason): the actor crashes."""

    reason: str


@message
class Add:
    """Counter adds `n`."""

    n: int


@message
class Blob:
    """Counter adds the array's size in bytes."""

    data: np.ndarray


@message
class Total:
    """Counter replies with its total."""


@message
class Forward:
    """Relay asks `address` with `msg` and replies with the answer."""

    address: str
    msg: Any


class Echo(Actor):
    """Replies with what it gets."""

    async def on_probe(self, msg: Probe) -> Probe:
        return msg

    async def on_sleep(self, msg: Sleep) -> float:
        await asyncio.sleep(msg.seconds)
        return msg.seconds

    async def on_die(self, msg: Die) -> None:
        raise RuntimeError(msg.reason)


class Counter(Actor):
    """Sums Add messages (and Blob sizes)."""

    def __init__(self) -> None:
        self.total = 0

    async def on_add(self, msg: Add) -> None:
        self.total += msg.n

    async def on_blob(self, msg: Blob) -> None:
        self.total += msg.data.nbytes

    async def on_total(self, msg: Total) -> int:
        return self.total


class Relay(Actor):
    """Asks another actor on the sender's behalf, from this node."""

    async def on_forward(self, msg: Forward) -> Any:
        return await self.system.ask(msg.address, msg.msg, 10.0)


async def main(node_id: str, port: int, token: str, connect: str | None) -> None:
    node = Node(node_id, token, NodeConfig(port=port, reconnect_min_s=0.05, reconnect_max_s=0.5))
    await node.start()
    node.system.spawn(Echo(), "/echo")
    node.system.spawn(Counter(), "/counter")
    node.system.spawn(Relay(), "/relay")
    if connect:
        await node.connect(connect)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    sys.stdout.write("READY " + json.dumps({"url": node.url, "node": node_id}) + "\n")
    sys.stdout.flush()
    await stop.wait()
    await node.stop()


if __name__ == "__main__":
    configure_logging(sys.argv[1], None)  # stderr: stdout is for the READY line
    run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None))
