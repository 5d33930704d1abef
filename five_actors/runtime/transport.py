"""Links between nodes: websockets carrying wire frames, and the router that uses them.

A link is opened by GET /ws with `Authorization: Bearer TOKEN`; a wrong or missing token gets
401 before any websocket exists. Then the connecting side sends a hello (its node id, listen
URL and the nodes it knows) and the accepting side answers with its own. After that both
sides read frames until the link closes; a lost link fails the peer's pending asks with
ActorDown and delivers "link_lost" to everyone watching the peer's actors. An outbound link
opened with `connect` is kept: when it drops it is reopened with jittered exponential
backoff. A node sends to a node it knows of but has no link to by connecting on demand.

At most one link per pair of nodes is kept: when both connect at once, the link opened by the
node with the smaller id wins on both sides, so neither fires a spurious `link_lost`.
"""

from __future__ import annotations

import asyncio
import secrets
import traceback
from collections.abc import Callable
from typing import Any

import aiohttp
import structlog
from aiohttp import WSCloseCode, WSMsgType, web

from five_actors.errors import ActorDown, LinkError, WireError
from five_actors.runtime import wire
from five_actors.runtime.actor import ActorSystem, Reply, split_address
from five_actors.runtime.config import NodeConfig
from five_actors.runtime.handshake import agreed_max_bytes, dial, hello_frame, read_hello, unauthorized
from five_actors.runtime.keeper import Keeper
from five_actors.runtime.link import Link, close_message, normalise_url, read_end
from five_actors.runtime.requests import Requests

log = structlog.get_logger("five_actors.runtime")


class Transport:
    """The links of one node and the RemoteRouter that sends over them."""

    def __init__(self, system: ActorSystem, token: str, config: NodeConfig) -> None:
        self.system = system
        self.node_id = system.node_id
        self._prefix = f"{self.node_id}/"
        self.token = token
        self.config = config
        self.url = ""
        """This node's listen URL (set by the node once its server is up)."""
        self.limits = wire.WireLimits(config.max_message_bytes, config.max_arrays_per_message, config.max_nesting_depth)
        self.links: dict[str, Link] = {}
        self.known: dict[str, str] = {}
        """Node id -> listen URL of every node this one has heard of."""
        self.requests = Requests()
        self._connecting: dict[str, asyncio.Task[Link]] = {}
        self.keeper = Keeper(self.connect, self.links, config, self._spawn)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._session: aiohttp.ClientSession | None = None
        self._closing = False
        self.incarnation = secrets.token_hex(8)
        """Differs each time a node starts: a peer back under the same id is a new peer."""

    # -- the RemoteRouter side ------------------------------------------------------------

    async def send(self, address: str, msg: Any, reply: Reply | None, sender: str | None) -> None:
        """Send a tell (reply None) or an ask to an actor on another node."""
        node = address.partition("/")[0]
        link = self.links.get(node)
        if link is None or not link.is_up:
            link = await self._link_for(node)
        if reply is None:
            await link.send(wire.encode("tell", to=address, sender=sender, body=msg, max_bytes=link.max_bytes))
            return
        id_ = self.requests.ask(node, reply)
        try:
            await link.send(wire.encode("ask", to=address, sender=sender, id=id_, body=msg, max_bytes=link.max_bytes))
        except BaseException:
            self.requests.forget(id_)
            raise

    def cancel(self, reply: Reply) -> None:
        """The asker stopped waiting: drop its pending entry."""
        self.requests.cancel(reply)

    def watch(self, address: str, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call `callback(reason)` once when the remote actor exits or its link is lost."""
        node = split_address(address)[0]
        id_ = self.requests.watch(node, address, callback)
        frame = wire.encode("watch", to=address, id=id_)
        link = self.links.get(node)
        if link is not None and link.is_up:
            link.post(frame)
        else:
            self._spawn(self._watch_via_new_link(node, id_, frame))

        def unwatch() -> None:
            if self.requests.unwatch(id_):
                current = self.links.get(node)
                if current is not None:
                    current.post(wire.encode("unwatch", to=address, id=id_))

        return unwatch

    async def _watch_via_new_link(self, node: str, id_: int, frame: bytes) -> None:
        try:
            link = await self._link_for(node)
        except ActorDown:
            self.requests.fire(id_, "link_lost")
            return
        link.post(frame)

    async def _link_for(self, node: str) -> Link:
        link = self.links.get(node)
        if link is not None and link.is_up:
            return link
        url = self.known.get(node)
        if url is None:
            raise ActorDown(f"node {node!r} is not known to node {self.node_id!r} (no link, no URL)")
        reason = self.keeper.reconnecting(url)
        if reason is not None:
            raise ActorDown(f"node {node!r} is unreachable: its link is down and reconnecting ({reason})")
        try:
            return await self.connect(url)
        except (TimeoutError, LinkError, OSError) as exc:
            raise ActorDown(f"node {node!r} at {url} is unreachable: {exc}") from None

    # -- opening links --------------------------------------------------------------------

    async def connect(self, url: str) -> Link:
        """Open (or reuse) a link to the node listening at `url`; one attempt, no retries."""
        url = normalise_url(url)
        for link in self.links.values():
            if url in (link.url, link.dialed_url) and link.is_up:
                return link
        task = self._connecting.get(url)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._open(url), name=f"link:connect:{url}")
            self._connecting[url] = task
            task.add_done_callback(lambda _: self._connecting.pop(url, None))
        return await asyncio.shield(task)

    async def keep(self, url: str) -> Link:
        """Connect to `url` now and reconnect with backoff whenever that link drops."""
        return await self.keeper.keep(normalise_url(url))

    async def _open(self, url: str) -> Link:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        ws = await dial(self._session, url, self.token, self.config)
        try:
            await ws.send_bytes(self._hello())
            hello = await read_hello(ws, self.node_id, self.config.connect_timeout_s, self.limits)
        except (LinkError, ConnectionError) as exc:
            await ws.close(code=WSCloseCode.PROTOCOL_ERROR, message=close_message(str(exc)))
            raise LinkError(f"handshake with {url} failed: {exc}") from None
        link = self._add_link(ws, hello, outbound=True)
        link.dialed_url = url
        if link.ws is ws:
            self._spawn(self._serve(link))
        return link

    async def handle_ws(self, request: web.Request) -> web.StreamResponse:
        """GET /ws: check the token, exchange hellos, then serve the link until it closes."""
        refused = unauthorized(request, self.token)
        if refused is not None:
            return refused
        ws = web.WebSocketResponse(
            heartbeat=self.config.heartbeat_s, max_msg_size=self.config.max_message_bytes, compress=False
        )
        await ws.prepare(request)
        try:
            hello = await read_hello(ws, self.node_id, self.config.connect_timeout_s, self.limits)
        except LinkError as exc:
            log.warning("link_refused", peer=request.remote, reason=str(exc))
            await ws.close(code=WSCloseCode.PROTOCOL_ERROR, message=close_message(str(exc)))
            return ws
        await ws.send_bytes(self._hello())
        link = self._add_link(ws, hello, outbound=False)
        if link.ws is ws:
            await self._serve(link)
        return ws

    def _hello(self) -> bytes:
        known = {node: url for node, url in self.known.items() if node != self.node_id}
        return hello_frame(self.node_id, self.url, known, self.incarnation, self.config.max_message_bytes)

    def _add_link(self, ws: Any, hello: dict[str, Any], outbound: bool) -> Link:
        peer: str = hello["node"]
        url = normalise_url(hello["url"]) if hello["url"] else ""
        max_bytes = agreed_max_bytes(hello, self.config.max_message_bytes)
        link = Link(ws, peer, url, outbound, str(hello.get("incarnation", "")), max_bytes)
        existing = self.links.get(peer)
        if existing is not None and existing.is_up and existing.incarnation != link.incarnation:
            # The peer restarted before its old link was seen to drop (a half-open socket):
            # its old actors are gone, so their watchers and askers must hear it.
            self._link_lost(existing, "peer restarted")
            self._spawn(existing.ws.close(code=WSCloseCode.GOING_AWAY, message=b"peer restarted"))
        elif existing is not None and existing.is_up:
            if self._initiator(existing) == min(self.node_id, peer) != self._initiator(link):
                link.mark_closed("duplicate link")
                self._spawn(ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"duplicate link"))
                return existing
            existing.replaced = True
            existing.mark_closed("replaced by a newer link")
            self._spawn(existing.ws.close(code=WSCloseCode.GOING_AWAY, message=b"replaced by a newer link"))
        self.links[peer] = link
        new_nodes = self._learn(peer, url, hello.get("known", {}))
        log.info("link_up", peer=peer, url=url, direction="outbound" if outbound else "inbound")
        if new_nodes:
            for other in self.links.values():
                if other is not link:
                    other.post(self._hello())
        return link

    def _initiator(self, link: Link) -> str:
        return self.node_id if link.outbound else link.peer

    def _learn(self, peer: str, url: str, known: dict[Any, Any]) -> bool:
        """Merge a hello's URLs; True when this node learned a node or URL it did not know.

        A peer speaks for its own URL; what it says of another node is taken only while this node has no
        open link to that one (a peer cannot point a linked node's id at a dead URL)."""
        changed = False
        for node, node_url in [(peer, url), *known.items()]:
            linked = node != peer and (link := self.links.get(node)) is not None and link.is_up
            if isinstance(node, str) and isinstance(node_url, str) and node_url and node != self.node_id and not linked:
                node_url = normalise_url(node_url)
                if self.known.get(node) != node_url:
                    self.known[node] = node_url
                    changed = True
        return changed

    # -- serving a link -------------------------------------------------------------------

    async def _serve(self, link: Link) -> None:
        ws = link.ws
        reason = "closed"
        clean = False
        try:
            while True:
                msg = await ws.receive()
                if msg.type == WSMsgType.BINARY:
                    for item in wire.decode_batch(msg.data, self.limits):
                        link.frames_in += 1
                        if isinstance(item, wire.Rejected):
                            self._reject(link, item.error, item.id)
                        elif item.kind == "tell" or item.kind == "ask":
                            delivery = self._delivery(link, item)
                            try:
                                # Only a full mailbox makes the reader wait (and so the peer: backpressure).
                                if delivery is not None and not self.system.deliver_nowait(*delivery):
                                    await self.system.deliver(item.to, *delivery[1:])  # type: ignore[arg-type]
                            except ActorDown as exc:  # a tell to no actor (an ask gets the error as its reply)
                                log.info("message_dropped", peer=link.peer, to=item.to, type=item.type, reason=str(exc))
                        else:
                            self._on_frame(link, item)
                elif msg.type == WSMsgType.TEXT:
                    self._reject(
                        link, WireError("text frames are not accepted: links carry binary msgpack frames"), None
                    )
                else:
                    reason, clean = read_end(ws, msg, link.peer)
                    break
        except asyncio.CancelledError:
            reason = "node stopping"
            raise
        except Exception as exc:  # noqa: BLE001 - a bug here must drop this link, not the node
            reason = f"internal error: {type(exc).__name__}: {exc}"
            log.error("link_crashed", peer=link.peer, reason=reason, traceback=traceback.format_exc())
        finally:
            if not ws.closed:
                await asyncio.shield(ws.close(code=WSCloseCode.GOING_AWAY, message=close_message(reason)))
            self._link_lost(link, reason, clean)

    def _reject(self, link: Link, error: WireError, request_id: int | None) -> None:
        log.warning("frame_rejected", peer=link.peer, reason=str(error), id=request_id)
        link.post(wire.encode_error(error, request_id))

    def _on_frame(self, link: Link, env: wire.Envelope) -> None:
        kind = env.kind
        if kind == "reply":
            reply = self.requests.answered(link.peer, env.id)
            if reply is not None:
                reply(env.body, None)
        elif kind == "error":
            reply = self.requests.answered(link.peer, env.id) if env.id is not None else None
            try:
                error = wire.decode_error(env.body)
            except WireError as exc:
                self._reject(link, exc, None)
                return
            if reply is not None:
                reply(None, error)
            else:
                log.warning("frame_refused_by_peer", peer=link.peer, reason=str(error))
        elif kind == "watch":
            self._serve_watch(link, env)
        elif kind == "unwatch":
            unwatch = self.requests.served(link.peer, env.id)  # type: ignore[arg-type]
            if unwatch is not None:
                unwatch()
        elif kind == "down":
            self.requests.down(link.peer, env.id, env.body if isinstance(env.body, str) else "unknown")  # type: ignore[arg-type]
        elif kind == "hello" and isinstance(env.body, dict) and env.body.get("node") == link.peer:
            known = env.body.get("known")
            self._learn(link.peer, link.url, known if isinstance(known, dict) else {})
        else:
            self._reject(link, WireError(f"unexpected {kind} frame on an open link"), None)

    def _delivery(self, link: Link, env: wire.Envelope) -> tuple[str, Any, Reply | None, str | None] | None:
        """(path, message, reply, sender) for a tell or ask to a local actor; None when it was
        answered (or dropped) here because no actor can get it."""
        to: str = env.to  # type: ignore[assignment]
        if env.sender is not None and not env.sender.startswith(f"{link.peer}/"):
            # A node's identity is its link: a peer may not speak for another node's actors.
            self._reject(
                link,
                WireError(f"sender {env.sender!r} is not an actor of {link.peer!r}, the node on this link"),
                env.id,
            )
            return None
        path = to[len(self.node_id) :]
        local = to.startswith(self._prefix) and len(path) > 1
        if env.kind == "tell":
            if local:
                return path, env.body, None, env.sender
            log.info(
                "message_dropped", peer=link.peer, to=to, type=env.type, reason=f"{to} is not on node {self.node_id}"
            )
            return None
        peer, id_ = link.peer, env.id
        answered = False

        def reply(result: Any, error: BaseException | None) -> None:
            nonlocal answered
            if answered:
                return
            answered = True
            if unwatch is not None:
                unwatch()
            current = self.links.get(peer)
            if current is None:
                return  # the asker's node is gone; it has failed this ask itself
            if error is None:
                try:
                    frame = wire.encode("reply", id=id_, body=result, max_bytes=current.max_bytes)
                except WireError as exc:
                    frame = wire.encode_error(WireError(f"{to} replied with a value that cannot be sent: {exc}"), id_)
            else:
                frame = wire.encode_error(error, id_)
            current.post(frame)

        unwatch: Callable[[], None] | None = None
        if not local:
            reply(None, ActorDown(f"{to} is not on node {self.node_id}: links do not forward"))
            return None
        # Answer ActorDown if the actor dies while handling this ask; `answered` keeps it to one reply.
        unwatch = self.system.watch_address(to, lambda reason: reply(None, ActorDown(f"{to} is down ({reason})")))
        return path, env.body, reply, env.sender

    def _serve_watch(self, link: Link, env: wire.Envelope) -> None:
        peer, id_, to = link.peer, env.id, env.to

        def notify(reason: str) -> None:
            self.requests.served(peer, id_)  # type: ignore[arg-type]
            current = self.links.get(peer)
            if current is not None:
                current.post(wire.encode("down", sender=to, id=id_, body=reason))

        assert to is not None  # the decoder refuses a watch frame without `to`
        if not to.startswith(self._prefix) or len(to) == len(self._prefix):
            notify("noproc")
            return
        self.requests.serve(peer, id_, self.system.watch_address(to, notify))  # type: ignore[arg-type]

    def _link_lost(self, link: Link, reason: str, clean: bool = False) -> None:
        """Forget the link; fail the peer's pending asks and watches. `clean`: the peer said it was going."""
        link.mark_closed(reason)
        if link.replaced or self.links.get(link.peer) is not link:
            return
        del self.links[link.peer]
        if clean or self._closing:
            log.info("link_down", peer=link.peer, reason=reason)
        else:
            log.warning("link_down", peer=link.peer, reason=reason)
        self.requests.fail(link.peer, reason)

    # -- introspection and shutdown -------------------------------------------------------

    def link_info(self) -> list[dict[str, Any]]:
        """Every link (and every kept link that is reconnecting), for /actors."""
        rows = [link.info() for link in self.links.values()]
        return rows + self.keeper.down_rows({link.url for link in self.links.values()})

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        """Close every link (peers see "node stopping") and stop reconnecting."""
        self._closing = True
        self.keeper.close()
        for link in list(self.links.values()):
            self._link_lost(link, "node stopping")
            if not link.ws.closed:
                await link.ws.close(code=WSCloseCode.GOING_AWAY, message=b"node stopping")
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
