"""Opening a link: the websocket dial with the cluster token, and the hellos both sides exchange first.

The dialling side sends its hello, the accepting side answers with its own; each names its node
id, listen URL, incarnation and largest frame, and the nodes it knows. A hello that is not the
first frame, is malformed, or claims the reader's own id ends the link before any other frame.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import structlog
from aiohttp import WSMsgType, web

from five_actors.errors import LinkError, TokenRefused, WireError
from five_actors.runtime import wire
from five_actors.runtime.config import NodeConfig
from five_actors.runtime.link import bearer_token, token_matches

log = structlog.get_logger("five_actors.runtime")


def unauthorized(request: web.Request, token: str) -> web.Response | None:
    """GET /ws's token check: None when the request carries the cluster token, else the 401 to answer."""
    if token_matches(request, token):
        return None
    reason = "missing token" if bearer_token(request) is None else "wrong token"
    log.warning("link_refused", peer=request.remote, reason=reason)
    message = f"{reason}: /ws needs 'Authorization: Bearer TOKEN' with the cluster token"
    return web.json_response({"error": "unauthorized", "message": message}, status=401)


async def dial(session: aiohttp.ClientSession, url: str, token: str, config: NodeConfig) -> Any:
    """The websocket of GET `url`/ws with the token; TokenRefused on 401, LinkError when it cannot be opened."""
    try:
        return await asyncio.wait_for(
            session.ws_connect(
                f"{url}/ws",
                headers={"Authorization": f"Bearer {token}"},
                heartbeat=config.heartbeat_s,
                max_msg_size=config.max_message_bytes,
                compress=0,
                autoping=True,
            ),
            config.connect_timeout_s,
        )
    except aiohttp.WSServerHandshakeError as exc:
        if exc.status == 401:
            raise TokenRefused(f"node at {url} refused the cluster token (401)") from None
        raise LinkError(f"websocket handshake with {url} failed: {exc.status} {exc.message}") from None
    except aiohttp.ClientError as exc:
        raise LinkError(f"cannot reach node at {url}: {exc}") from None


def hello_frame(node: str, url: str, known: dict[str, str], incarnation: str, max_message_bytes: int) -> bytes:
    """This node's hello: who it is, where it listens, the nodes it knows (not itself)."""
    body = {
        "node": node,
        "url": url,
        "known": known,
        "incarnation": incarnation,
        "max_message_bytes": max_message_bytes,
    }
    return wire.encode("hello", body=body)


async def read_hello(ws: Any, own_node: str, timeout: float, limits: wire.WireLimits) -> dict[str, Any]:
    """The peer's hello, the first frame on `ws`; LinkError saying what is wrong with it."""
    try:
        msg = await ws.receive(timeout=timeout)
    except TimeoutError:
        raise LinkError(f"no hello within {timeout:g}s") from None
    if msg.type != WSMsgType.BINARY:
        raise LinkError(f"expected a binary hello frame, got {msg.type.name}")
    try:
        env = wire.decode(msg.data, limits)
    except WireError as exc:
        raise LinkError(f"bad hello frame: {exc}") from None
    body = env.body
    if env.kind != "hello" or not isinstance(body, dict):
        raise LinkError(f"expected a hello frame first, got {env.kind!r}")
    node, url, known = body.get("node"), body.get("url"), body.get("known", {})
    if not isinstance(node, str) or not node or "/" in node:
        raise LinkError(f"hello must name the peer's node id (a non-empty string without '/'), got {node!r}")
    if node == own_node:
        raise LinkError(f"peer claims this node's own id {node!r}")
    if not isinstance(url, str) or not isinstance(known, dict):
        raise LinkError("hello 'url' must be a string and 'known' a map of node id to URL")
    return body


def agreed_max_bytes(hello: dict[str, Any], own: int) -> int:
    """The largest frame a link carries: the smaller of this node's limit and the one the peer's hello states."""
    peer = hello.get("max_message_bytes")
    return min(own, peer) if type(peer) is int and peer > 0 else own
