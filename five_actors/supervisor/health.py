"""HTTP routes on a node's app: /health, /actors, /metrics, and the token-checked control routes.

GET  /health            200 when every permanent child in the tree is up and training is not stalled
                        (five_actors.supervisor.watchdog), else 503 with reasons
GET  /actors            the whole tree across processes and hosts, as JSON
GET  /metrics           Prometheus text (restarts, mailbox depth, message rates, links, GPUs, and
                        every number an actor reports in status()["metrics"])
POST /control/kill      {"path": "/root/x"}: kill that actor on this node (needs the token)
POST /control/shutdown  stop this node's tree cleanly, as SIGTERM does (needs the token)

The head adds more at the composition root (`five-actors up`): the dashboard's routes and POST /surgery
(five_actors.dashboard, five_actors.surgery.http), so this package imports no actor.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from five_actors.runtime.node import require_token
from five_actors.supervisor.agent import NodeAgent

VIEW_KEY = web.AppKey("five_actors.agent", NodeAgent)
"""`app[VIEW_KEY]` is the node's agent, which builds every view these routes serve."""
SHUTDOWN_KEY = web.AppKey("five_actors.shutdown", asyncio.Event)
"""Set by POST /control/shutdown; the process's main loop waits on it."""
_METRIC_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def is_problem(actor: dict[str, Any]) -> bool:
    """Whether this row of the view makes /health 503: a permanent child (or a supervisor) that is not up."""
    required = actor.get("restart") == "permanent" or (
        actor.get("restart") is None and actor.get("kind") == "supervisor"
    )
    return required and actor.get("state") != "running"


def problems(view: dict[str, Any]) -> list[str]:
    """Why the tree is not healthy: one line per permanent child (or supervisor) that is not up."""
    reasons = []
    for actor in view["actors"]:
        if is_problem(actor):
            error = f" (last error: {actor['last_error']})" if actor.get("last_error") else ""
            reasons.append(f"{actor['path']} on {actor.get('node')}: {actor.get('state')}{error}")
    return reasons


async def health(request: web.Request) -> web.Response:
    """GET /health: 200 {"status": "ok"} or 503 {"status": "degraded", "problems": [...]}."""
    agent = request.app[VIEW_KEY]
    view = await agent.view()
    reasons = problems(view) + agent.stalls
    head = view["nodes"][0]
    body = {
        "status": "degraded" if reasons else "ok",
        "problems": reasons,
        "node": head["node"],
        "nodes": len(view["nodes"]),
        "actors": len(view["actors"]),
        "gpus": head["gpus"],
        "gpus_reason": head["gpus_reason"],
    }
    return web.json_response(body, status=503 if reasons else 200)


async def actors(request: web.Request) -> web.Response:
    """GET /actors: {"nodes": [...], "actors": [...]} for the whole tree."""
    return web.json_response(await request.app[VIEW_KEY].view())


class _ViewCollector(Collector):
    """Turns one view of the tree into Prometheus gauges at scrape time."""

    def __init__(self, view: dict[str, Any]) -> None:
        self.view = view

    def collect(self) -> Any:
        labels = ["path", "node"]
        restarts = GaugeMetricFamily("five_actors_actor_restarts", "Restarts of the child at this path", labels=labels)
        up = GaugeMetricFamily("five_actors_actor_up", "1 when the actor at this path is running", labels=labels)
        mailbox = GaugeMetricFamily(
            "five_actors_mailbox_depth", "Messages waiting in the actor's mailbox", labels=labels
        )
        rate_in = GaugeMetricFamily("five_actors_messages_in_per_second", "Messages handled per second", labels=labels)
        rate_out = GaugeMetricFamily("five_actors_messages_out_per_second", "Replies sent per second", labels=labels)
        for a in self.view["actors"]:
            key = [a["path"], str(a.get("node"))]
            restarts.add_metric(key, a.get("restarts") or 0)
            up.add_metric(key, 1 if a.get("state") == "running" else 0)
            if a.get("mailbox") is not None:
                mailbox.add_metric(key, a["mailbox"])
                rate_in.add_metric(key, a["in_per_s"])
                rate_out.add_metric(key, a["out_per_s"])
        link = GaugeMetricFamily(
            "five_actors_link_up", "1 when the link from node to peer is up", labels=["node", "peer"]
        )
        gpu_util = GaugeMetricFamily("five_actors_gpu_utilization_percent", "GPU utilisation", labels=["node", "gpu"])
        gpu_mem = GaugeMetricFamily("five_actors_gpu_memory_used_bytes", "GPU memory in use", labels=["node", "gpu"])
        for node in self.view["nodes"]:
            for lk in node["links"]:
                link.add_metric([node["node"], str(lk["peer"])], 1 if lk["state"] == "up" else 0)
            for gpu in node["gpus"]:
                gpu_util.add_metric([node["node"], str(gpu["index"])], gpu["utilization_pct"])
                gpu_mem.add_metric([node["node"], str(gpu["index"])], gpu["memory_used_bytes"])
        yield from (restarts, up, mailbox, rate_in, rate_out, link, gpu_util, gpu_mem)
        yield from _actor_metrics(self.view)


def _actor_metrics(view: dict[str, Any]) -> list[GaugeMetricFamily]:
    """Each number an actor reports in `status()["metrics"]` as gauge `five_actors_NAME{path, node}`.

    This is how the training facts (losses, staleness, reuse, throughput, ratings, reward
    components) of the five actors reach /metrics.
    """
    families: dict[str, GaugeMetricFamily] = {}
    for a in view["actors"]:
        for name, value in ((a.get("status") or {}).get("metrics") or {}).items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not _METRIC_NAME.match(name):
                continue
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(
                    f"five_actors_{name}", f"{name} reported by the actor at path", labels=["path", "node"]
                )
            family.add_metric([a["path"], str(a.get("node"))], float(value))
    return list(families.values())


async def metrics(request: web.Request) -> web.Response:
    """GET /metrics: the tree's gauges in the Prometheus text format."""
    registry = CollectorRegistry()
    registry.register(_ViewCollector(await request.app[VIEW_KEY].view()))
    return web.Response(body=generate_latest(registry), content_type="text/plain", charset="utf-8")


@require_token
async def control_kill(request: web.Request) -> web.Response:
    """POST /control/kill {"path": "/root/x"}: kill a local actor (its supervisor decides what follows)."""
    try:
        path = (await request.json())["path"]
    except (ValueError, KeyError, TypeError):
        return web.json_response(
            {"error": "bad request", "message": 'expected a JSON body {"path": "/root/..."}'}, status=400
        )
    agent = request.app[VIEW_KEY]
    if not isinstance(path, str) or not agent.system.is_alive(path):
        return web.json_response(
            {"error": "not found", "message": f"no actor running at {path!r} on this node"}, status=404
        )
    agent.system.kill(path)
    return web.json_response({"killed": path})


@require_token
async def control_shutdown(request: web.Request) -> web.Response:
    """POST /control/shutdown: stop this node's tree cleanly and exit."""
    request.app[SHUTDOWN_KEY].set()
    return web.json_response({"shutdown": True})


def install(app: web.Application, agent: NodeAgent, shutdown: asyncio.Event) -> None:
    """Add the routes to a node's app (before the node starts)."""
    app[VIEW_KEY] = agent
    app[SHUTDOWN_KEY] = shutdown
    routes: list[tuple[str, str, Callable[[web.Request], Any]]] = [
        ("GET", "/health", health),
        ("GET", "/actors", actors),
        ("GET", "/metrics", metrics),
        ("POST", "/control/kill", control_kill),
        ("POST", "/control/shutdown", control_shutdown),
    ]
    for method, path, handler in routes:
        app.router.add_route(method, path, handler)
