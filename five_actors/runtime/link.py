"""One websocket link to a peer node, and the small helpers links and routes share.

A link batches the frames queued in one turn of the event loop into one websocket message;
the first frame of a turn on an idle link goes out at once, so a lone ask is not delayed.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from typing import Any

import aiohttp
import structlog
from aiohttp import WSCloseCode, WSMsgType, web

from five_actors.errors import ActorDown

log = structlog.get_logger("five_actors.runtime")


def bearer_token(request: web.Request) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header, if there is one."""
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def token_matches(request: web.Request, token: str) -> bool:
    """Whether the request carries `token` (compared in constant time)."""
    given = bearer_token(request)
    # A header that is not UTF-8 arrives with surrogate escapes: compared as the bytes it was, never an error.
    return given is not None and hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode())


def close_message(reason: str) -> bytes:
    """`reason` cut to fit a close frame (125 bytes, two of them the code) without splitting a character."""
    return reason.encode()[:120].decode("utf-8", "ignore").encode()


def read_end(ws: Any, msg: aiohttp.WSMessage, peer: str) -> tuple[str, bool]:
    """Why a link's reader got `msg` (an error, a close, a lost connection) instead of a frame, and whether the peer
    said it was going (a GOING_AWAY close)."""
    if msg.type == WSMsgType.ERROR:
        error = ws.exception()
        if isinstance(error, aiohttp.WebSocketError):  # e.g. over max_message_bytes: aiohttp closed the link
            reason = f"protocol error: {error}"
            log.warning("frame_rejected", peer=peer, reason=reason)
            return reason, False
        return (f"{type(error).__name__}: {error}" if error else "connection error"), False
    if msg.type != WSMsgType.CLOSE:
        return "connection lost", ws.close_code == WSCloseCode.GOING_AWAY
    extra = f": {msg.extra}" if msg.extra else ""
    return f"closed by peer ({ws.close_code}{extra})", ws.close_code == WSCloseCode.GOING_AWAY


class Link:
    """One open websocket to a peer node, with its counters and its send batch.

    Frames queued in one turn of the event loop go out as one websocket message (fewer
    syscalls and frame headers); a sender waits while the batch is full and the socket is
    slow to drain, which is the link's backpressure.
    """

    BATCH_FRAMES = 256
    """Most frames in one websocket message."""
    BATCH_BYTES = 256 * 1024
    """Frames above this size are sent alone, and a batch stops growing at it."""

    def __init__(
        self,
        ws: web.WebSocketResponse | aiohttp.ClientWebSocketResponse,
        peer: str,
        url: str,
        outbound: bool,
        incarnation: str,
        max_bytes: int,
    ) -> None:
        self.ws = ws
        self.peer = peer
        self.url = url
        self.outbound = outbound
        self.since = time.time()
        self.frames_in = 0
        self.frames_out = 0
        self.closed = asyncio.get_running_loop().create_future()
        """Resolves with the reason when the link is gone."""
        self.replaced = False
        self.incarnation = incarnation
        """The peer's incarnation, from its hello: a new one means the peer restarted."""
        self.dialed_url = ""
        """The URL this node dialled for an outbound link (the peer may advertise another)."""
        self.max_bytes = max_bytes
        """Largest websocket message both ends accept: no frame or batch is bigger."""
        self._batch: list[bytes] = []
        self._batch_bytes = 0
        self._room = asyncio.Event()
        self._room.set()
        self._writing = False
        """True from the first queued frame until the writer has sent the whole batch."""
        self._wake: asyncio.Future[None] | None = None
        self._wrote_this_turn = False
        self._writer = asyncio.get_running_loop().create_task(self._write(), name=f"link:{peer}:writer")

    @property
    def is_up(self) -> bool:
        return not self.closed.done()

    async def send(self, frame: bytes) -> None:
        """Send one frame, waiting while the batch is full or the socket drains (backpressure)."""
        if self.closed.done():
            raise ActorDown(f"link to node {self.peer} is down ({self.closed.result()})")
        if not self._writing and not self._wrote_this_turn:
            # The first frame of a loop turn on an idle link goes out at once (an ask's latency);
            # frames that follow it in the same turn are batched by the writer.
            self._wrote_this_turn = True
            asyncio.get_running_loop().call_soon(self._end_turn)
            self.frames_out += 1
            try:
                await self.ws.send_bytes(frame)
            except (ConnectionError, RuntimeError) as exc:
                self.mark_closed(f"send failed: {exc}")
                raise ActorDown(f"link to node {self.peer} lost while sending: {exc}") from None
            return
        self.post(frame)
        if not self._room.is_set():
            await self._room.wait()
        if self.closed.done():
            raise ActorDown(f"link to node {self.peer} is down ({self.closed.result()})")

    def _end_turn(self) -> None:
        self._wrote_this_turn = False

    def post(self, frame: bytes) -> None:
        """Queue one frame without waiting (for synchronous callers such as reply callbacks).

        On a closed link the frame is dropped: the peer fails its own pending asks and watches
        when it sees the link go.
        """
        if self.closed.done():
            return
        self.frames_out += 1
        self._batch.append(frame)
        self._batch_bytes += len(frame)
        if len(self._batch) >= self.BATCH_FRAMES or self._batch_bytes >= self.BATCH_BYTES:
            self._room.clear()
        self._writing = True
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _write(self) -> None:
        try:
            while not self.closed.done():
                if not self._batch:
                    self._writing = False
                    self._wake = asyncio.get_running_loop().create_future()
                    await self._wake
                    continue
                batch, self._batch, self._batch_bytes = self._batch, [], 0
                self._room.set()
                small: list[bytes] = []
                small_bytes = 0
                for frame in batch:
                    if small and (len(frame) >= self.BATCH_BYTES or small_bytes + len(frame) > self.max_bytes):
                        await self.ws.send_bytes(b"".join(small))
                        small, small_bytes = [], 0
                    if len(frame) >= self.BATCH_BYTES:
                        await self.ws.send_bytes(frame)
                    else:
                        small.append(frame)
                        small_bytes += len(frame)
                if small:
                    await self.ws.send_bytes(b"".join(small) if len(small) > 1 else small[0])
        except Exception as exc:  # noqa: BLE001 - whatever broke the socket ends this link
            # Closing the socket makes the reader run the link-lost handling; what is queued is dropped.
            self.mark_closed(f"send failed: {type(exc).__name__}: {exc}")
            if not self.ws.closed:
                await self.ws.close(
                    code=aiohttp.WSCloseCode.INTERNAL_ERROR, message=close_message(f"send failed: {exc}")
                )

    def mark_closed(self, reason: str) -> None:
        if not self.closed.done():
            self.closed.set_result(reason)
        self._batch.clear()
        self._room.set()
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)  # the writer sees the link closed and ends

    def info(self) -> dict[str, Any]:
        """What /actors shows about this link."""
        return {
            "peer": self.peer,
            "url": self.url,
            "state": "up" if self.is_up else "down",
            "direction": "outbound" if self.outbound else "inbound",
            "since": self.since,
            "frames_in": self.frames_in,
            "frames_out": self.frames_out,
        }


def normalise_url(url: str) -> str:
    """`ws://host:port` for any of `ws://`, `http://` or bare `host:port`, without a trailing / or /ws."""
    url = url.strip().rstrip("/")
    url = url.removesuffix("/ws")
    if url.startswith("http://"):
        url = "ws://" + url[len("http://") :]
    elif url.startswith("https://"):
        url = "wss://" + url[len("https://") :]
    elif "://" not in url:
        url = "ws://" + url
    return url
