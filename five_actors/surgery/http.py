"""POST /surgery on the head node: the live surgery over HTTP (needs the cluster token).

    POST /surgery {"ops": ["widen-lstm", "64"], "dry_run": false, "probe_steps": 128}
        200 the ParamServer's report; 400 a refused surgery (the reason in "message"), 404 no
        ParamServer on this node, 504 no answer in time; 401 without the cluster token.

The route forwards a Surgery message to the ParamServerActor running in this node's process
(the head's, in the bundled configs) and returns its JSON report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web

from five_actors.actors.messages import Surgery
from five_actors.errors import AskTimeout, FiveActorsError, RemoteError, SurgeryRejected, TrainingError
from five_actors.runtime.actor import ActorSystem
from five_actors.runtime.node import require_token

SURGERY_TIMEOUT_S = 600.0
"""How long the route waits for the ParamServer: probes, verification of every pool version, checkpoints."""


def _error(status: int, error: str, message: str) -> web.Response:
    return web.json_response({"error": error, "message": message}, status=status)


def param_server_path(system: ActorSystem) -> str | None:
    """The path of the ParamServerActor running in `system`, None when there is none."""
    from five_actors.actors.param_server import ParamServerActor

    for cell in system.cells():
        if isinstance(cell.actor, ParamServerActor) and cell.state == "running":
            return cell.path
    return None


def _parse(body: Any) -> Surgery:
    if not isinstance(body, dict):
        raise ValueError('expected a JSON object {"ops": ["widen-lstm", "64"], "dry_run": false}')
    ops = body.get("ops")
    if isinstance(ops, str):
        ops = ops.split()
    if not isinstance(ops, list) or not ops or not all(isinstance(w, str) for w in ops):
        raise ValueError('"ops" must be a non-empty list of words, e.g. ["widen-lstm", "64"]')
    dry_run = body.get("dry_run", False)
    probe_steps = body.get("probe_steps", 128)
    if not isinstance(dry_run, bool):
        raise ValueError('"dry_run" must be true or false')
    if not isinstance(probe_steps, int) or isinstance(probe_steps, bool) or probe_steps < 1:
        raise ValueError('"probe_steps" must be a positive integer')
    return Surgery(ops, dry_run, probe_steps)


def make_route(actor_system: Callable[[], ActorSystem]) -> Any:
    """The POST /surgery handler for a node whose actors live in `actor_system()` (known once the node runs)."""

    @require_token
    async def surgery(request: web.Request) -> web.Response:
        try:
            msg = _parse(await request.json())
        except ValueError as exc:  # JSONDecodeError is a ValueError
            return _error(400, "bad request", str(exc))
        system = actor_system()
        path = param_server_path(system)
        if path is None:
            return _error(404, "not found", "no ParamServer runs on this node: send the surgery to the head")
        try:
            report = await system.ref(path).ask(msg, timeout=SURGERY_TIMEOUT_S)
        except AskTimeout as exc:
            return _error(504, "timeout", str(exc))
        except RemoteError as exc:
            return _error(
                400 if exc.is_a(SurgeryRejected) or exc.is_a(TrainingError) else 500, exc.error_type, exc.message
            )
        except FiveActorsError as exc:
            return _error(503, type(exc).__name__, str(exc))
        return web.json_response(report)

    return surgery
