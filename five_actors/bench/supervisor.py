"""Supervisor benchmark: how fast a crashed child is running again, and how fast /actors answers.

In one head node (no backoff, generous restart intensity) this measures: the time from a
local actor's crash to its replacement running, the time from `kill -9` of an OS-process
child to its replacement reporting ready, and the time the agent takes to build the
whole-tree view that /actors serves (two nodes). Each as p50/p99 over repeats, in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import time
from typing import Any

from five_actors.config import from_mapping
from five_actors.logs import configure_logging
from five_actors.runtime.config import NodeConfig
from five_actors.runtime.node import Node
from five_actors.runtime.node import run as run_on_uvloop
from five_actors.supervisor.agent import AGENT_PATH, NodeAgent
from five_actors.supervisor.child import TreeContext
from five_actors.supervisor.config import TreeConfig
from five_actors.supervisor.tree import Supervisor


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options."""
    parser.add_argument(
        "--local-restarts", type=int, default=200, help="local actor crashes to time (default: %(default)s)"
    )
    parser.add_argument(
        "--process-restarts", type=int, default=5, help="kill -9 of the process child to time (default: %(default)s)"
    )
    parser.add_argument("--views", type=int, default=50, help="/actors views to time (default: %(default)s)")


def _summary(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples_s)
    return {
        "p50_ms": round(statistics.median(ms), 2),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2),
        "n": len(ms),
    }


async def _until(check: Any) -> None:
    while not check():
        await asyncio.sleep(0.0005)


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    configure_logging("bench", None, level="error")
    node = Node("head", "bench-token", NodeConfig(port=0))
    agent = NodeAgent(node)
    await node.start()
    node.system.spawn(agent, AGENT_PATH)
    tree = {
        "max_restarts": 10_000,
        "max_seconds": 1.0,
        "backoff": 0.0,
        "children": [
            {"id": "local", "actor": "five_actors.actors.pingpong:Ponger"},
            {"id": "proc", "kind": "process", "actor": "five_actors.actors.pingpong:Ponger"},
        ],
    }
    root_actor = Supervisor(
        from_mapping(TreeConfig, tree, "tree"), TreeContext(node.system, None, node, log_level="error")
    )
    root = node.system.spawn(root_actor, "/root")
    try:
        if await node.system.wait_started(root) is not None:
            raise RuntimeError("the benchmark tree did not start")
        local, proc = root_actor.children
        local_s = []
        for _ in range(args.local_restarts):
            before = local.restarts
            started = time.perf_counter()
            node.system.kill("/root/local")
            await _until(lambda: local.restarts > before and node.system.is_alive("/root/local"))
            local_s.append(time.perf_counter() - started)
        process_s = []
        for _ in range(args.process_restarts):
            before = proc.restarts
            assert proc.incarnation is not None and proc.incarnation.pid is not None
            started = time.perf_counter()
            os.kill(proc.incarnation.pid, signal.SIGKILL)
            await _until(lambda: proc.restarts > before and proc.state == "running")
            process_s.append(time.perf_counter() - started)
        view_s = []
        for _ in range(args.views):
            started = time.perf_counter()
            view = await agent.view()
            view_s.append(time.perf_counter() - started)
        return {
            "local_actor_restart": _summary(local_s),
            "process_child_restart_after_kill_9": _summary(process_s),
            "actors_view_two_nodes": {**_summary(view_s), "actors": len(view["actors"])},
        }
    finally:
        await node.system.stop(root, 30.0)
        await node.stop()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the measurements; returns the figures as one dict."""
    return {"benchmark": "supervisor", **run_on_uvloop(_measure(args))}
