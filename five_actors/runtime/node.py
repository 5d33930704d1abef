"""A node: one OS process's runtime: its actors, its links and its HTTP server.

    node = Node("head", token, config.node)
    node.add_routes([web.get("/health", health)])     # before start
    await node.start()                                 # serves /ws and the added routes
    node.system.spawn(Pinger(), "/ping")
    await node.connect("ws://127.0.0.1:8781")          # kept: reconnects when it drops
    await node.stop()

`run(main())` runs a node's main coroutine under uvloop. Control routes wrap their handler in
`require_token`, which answers 401 (and logs `http_unauthorized`) unless the request carries
`Authorization: Bearer TOKEN` with this node's token.
"""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

import structlog
import uvloop
from aiohttp import web

from five_actors.runtime.actor import ActorRef, ActorSystem
from five_actors.runtime.config import NodeConfig
from five_actors.runtime.link import bearer_token, normalise_url, token_matches
from five_actors.runtime.transport import Transport

log = structlog.get_logger("five_actors.runtime")

T = TypeVar("T")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Node:
    """One OS process's runtime: an ActorSystem routed over websocket links, and one aiohttp app."""

    def __init__(self, node_id: str, token: str, config: NodeConfig | None = None) -> None:
        if not node_id or "/" in node_id or node_id.strip() != node_id:
            raise ValueError(f"bad node id {node_id!r}: expected a non-empty name without '/' or spaces")
        if not token:
            raise ValueError("the cluster token must not be empty")
        self.node_id = node_id
        self.token = token
        self.config = config or NodeConfig()
        self.system = ActorSystem(node_id)
        self.transport = Transport(self.system, token, self.config)
        self.system.remote = self.transport
        self.app = web.Application(client_max_size=self.config.max_message_bytes)
        """The node's aiohttp app: add routes (`node.app.router` or `add_routes`) before `start`."""
        self.app[NODE_KEY] = self
        self.app.router.add_get("/ws", self.transport.handle_ws)
        self.port: int = self.config.port
        """The port actually bound (differs from config when it asked for 0), valid after start."""
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        """This node's websocket base URL (`ws://host:port`), valid after `start`."""
        return self.transport.url

    def add_routes(self, routes: Iterable[web.AbstractRouteDef]) -> None:
        """Add HTTP routes to the node's app; only before `start`."""
        if self._runner is not None:
            raise RuntimeError("add routes before node.start(): the app is frozen once it serves")
        self.app.add_routes(routes)

    async def start(self) -> None:
        """Bind the HTTP/websocket server on config host:port (port 0: any free port)."""
        runner = web.AppRunner(self.app, handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.config.host, self.config.port, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            raise OSError(
                exc.errno, f"node {self.node_id} cannot listen on {self.config.host}:{self.config.port}: {exc.strerror}"
            ) from None
        self._runner = runner
        self.port = runner.addresses[0][1]
        host = self.config.advertise_host or self.config.host
        if host in ("0.0.0.0", "::"):
            host = socket.gethostname()
        self.transport.url = normalise_url(f"{host}:{self.port}")
        self.transport.known[self.node_id] = self.transport.url
        log.info("node_listening", node_id=self.node_id, url=self.url)

    async def connect(self, url: str) -> str:
        """Link to the node at `url` (ws://host:port) and keep the link up; returns the peer's node id.

        Raises TokenRefused or LinkError if the first attempt fails; later drops are reconnected
        with jittered exponential backoff.
        """
        link = await self.transport.keep(url)
        return link.peer

    def links(self) -> list[dict[str, Any]]:
        """The node's links: peer, url, state, direction, since, frames in/out (and reason while down)."""
        return self.transport.link_info()

    def known_nodes(self) -> dict[str, str]:
        """Node id -> URL of every node this node has heard of (itself included)."""
        return dict(self.transport.known)

    def ref(self, address_or_path: str) -> ActorRef:
        """A ref from a full address (`node/path`) or a path on this node (`/path`)."""
        return self.system.ref(address_or_path)

    async def ask(self, address: str, msg: Any, timeout: float | None = None) -> Any:
        """Ask the actor at `address`, with `node.ask_timeout_s` unless `timeout` is given."""
        return await self.system.ask(address, msg, self.config.ask_timeout_s if timeout is None else timeout)

    async def stop(self, actor_timeout: float = 5.0) -> None:
        """Stop every local actor (newest first), close the links, then the server."""
        for cell in reversed(self.system.cells()):
            await self.system.stop(cell.path, actor_timeout)
        await self.transport.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


NODE_KEY = web.AppKey("five_actors.node", Node)
"""`request.app[NODE_KEY]` is the Node serving the request."""


def require_token(handler: Handler) -> Handler:
    """Wrap a control route: without this node's token it answers 401 JSON and never runs `handler`."""

    @functools.wraps(handler)
    async def checked(request: web.Request) -> web.StreamResponse:
        node = request.config_dict[NODE_KEY]
        if not token_matches(request, node.token):
            reason = "missing token" if bearer_token(request) is None else "wrong token"
            log.warning("http_unauthorized", route=request.path, remote=request.remote, reason=reason)
            return web.json_response(
                {
                    "error": "unauthorized",
                    "message": f"{reason}: this route needs 'Authorization: Bearer TOKEN' with the cluster token",
                },
                status=401,
            )
        return await handler(request)

    return checked


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run a node's main coroutine to completion on a uvloop event loop."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)
