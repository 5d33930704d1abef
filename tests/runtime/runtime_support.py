"""Helpers shared by the runtime tests: the cluster token, free ports, node processes.

(A module of its own, not conftest.py: test modules import it as `tests.runtime.runtime_support`.)
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from five_actors.runtime.node import Node

TOKEN = "test-token-0123456789"
ROOT = Path(__file__).resolve().parent.parent.parent

NodeFactory = Callable[..., Awaitable[Node]]


def free_port() -> int:
    """A port that was free a moment ago (for a peer that must come back on the same port)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PeerProcess:
    """A `peer_node` OS process; `url` is where it listens."""

    def __init__(self, node_id: str, port: int, connect: str | None) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        args = [sys.executable, "-m", "tests.runtime.peer_node", node_id, str(port), TOKEN] + (
            [connect] if connect else []
        )
        self.proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.node_id = node_id
        self.url = ""

    async def ready(self) -> PeerProcess:
        """Wait for its "listening" line (in a thread: the test's own node must keep serving)."""
        assert self.proc.stdout is not None
        while True:
            line = await asyncio.to_thread(self.proc.stdout.readline)
            if not line:
                raise RuntimeError(f"peer node {self.node_id} exited before listening (code {self.proc.wait()})")
            if line.startswith("READY "):
                break
        self.url = json.loads(line.removeprefix("READY "))["url"]
        return self

    def kill(self) -> None:
        """kill -9, and reap it."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
