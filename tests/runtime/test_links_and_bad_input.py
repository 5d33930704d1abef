"""Links between real nodes over loopback websockets: the token, bad frames, limits, routing."""

from __future__ import annotations

import asyncio

import aiohttp
import msgpack
import numpy as np
import pytest
from aiohttp import WSMsgType, web
from structlog.testing import capture_logs

from five_actors.errors import ActorDown, RemoteError, TokenRefused, WireError
from five_actors.runtime import wire
from five_actors.runtime.actor import Actor, Down
from five_actors.runtime.node import Node, require_token
from five_actors.supervisor.tree import ChildExited
from tests.runtime.peer_node import Die, Echo, Probe, Sleep
from tests.runtime.runtime_support import TOKEN, NodeFactory

AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def _receive_envelopes(ws: aiohttp.ClientWebSocketResponse, count: int) -> list[wire.Envelope]:
    """The next `count` frames from a node, across however many batches it sent them in."""
    envelopes: list[wire.Envelope] = []
    while len(envelopes) < count:
        envelopes += [e for e in wire.decode_batch((await ws.receive()).data) if isinstance(e, wire.Envelope)]
    return envelopes


class Refuser(Actor):
    """Refuses every Probe with a FiveActorsError."""

    async def on_probe(self, msg: Probe) -> None:
        raise WireError(f"refusing ping {msg.n}")


async def _raw_client(
    session: aiohttp.ClientSession, node: Node, hello: bool = True
) -> aiohttp.ClientWebSocketResponse:
    ws = await session.ws_connect(f"{node.url}/ws", headers=AUTH)
    if hello:
        await ws.send_bytes(wire.encode("hello", body={"node": "raw", "url": "", "known": {}}))
        reply = wire.decode((await ws.receive()).data)
        assert reply.kind == "hello" and reply.body["node"] == node.node_id
    return ws


async def _still_serves(make_node: NodeFactory, node: Node, name: str) -> None:
    other = await make_node(name)
    await other.connect(node.url)
    assert (await other.ask(f"{node.node_id}/echo", Probe(5))).n == 5


async def test_remote_ask_tell_and_errors_between_two_nodes(make_node: NodeFactory) -> None:
    a, b = await make_node("a"), await make_node("b")
    b.system.spawn(Echo(), "/echo")
    b.system.spawn(Refuser(), "/refuser")
    assert await a.connect(b.url) == "b"
    got = await a.ask("b/echo", Probe(1, np.arange(1000, dtype=np.float32)))
    np.testing.assert_array_equal(got.payload, np.arange(1000, dtype=np.float32))
    with pytest.raises(RemoteError, match="WireError: refusing ping 2"):
        await a.ask("b/refuser", Probe(2))
    with pytest.raises(ActorDown, match="no actor running at b/nobody"):
        await a.ask("b/nobody", Probe(3))
    with pytest.raises(ActorDown, match="b/echo is down \\(RuntimeError: boom\\)"):
        await a.ask("b/echo", Die("boom"))
    with pytest.raises(ActorDown, match="node 'c' is not known"):
        await a.ask("c/echo", Probe(4))
    links = {row["peer"]: row for row in a.links()}
    assert links["b"]["state"] == "up" and links["b"]["frames_out"] == 4 and links["b"]["frames_in"] == 4


async def test_a_message_over_the_size_limit_is_refused_to_the_sender_and_the_link_stays(
    make_node: NodeFactory,
) -> None:
    a, b = await make_node("a", max_message_bytes=64 * 1024), await make_node("b")
    b.system.spawn(Echo(), "/echo")
    await a.connect(b.url)
    with pytest.raises(WireError, match="over the limit of 65536 bytes \\(node.max_message_bytes\\)"):
        await a.ask("b/echo", Probe(1, np.zeros(100_000, dtype=np.uint8)))
    assert (await a.ask("b/echo", Probe(2))).n == 2


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}])
async def test_ws_without_the_token_gets_401_and_no_link(make_node: NodeFactory, headers: dict[str, str]) -> None:
    node = await make_node("a")
    with capture_logs() as logs:
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{node.port}/ws", headers=headers) as resp:
                assert resp.status == 401
                assert "cluster token" in (await resp.json())["message"]
    assert [e["event"] for e in logs if e["event"] == "link_refused"] == ["link_refused"]
    assert node.links() == []


async def test_a_node_with_the_wrong_token_cannot_connect(make_node: NodeFactory) -> None:
    a = await make_node("a")
    intruder = Node("intruder", "not-the-token")
    try:
        with pytest.raises(TokenRefused, match="refused the cluster token"):
            await intruder.connect(a.url)
    finally:
        await intruder.stop()
    assert a.links() == []


async def test_require_token_answers_401_and_never_runs_the_handler(make_node: NodeFactory) -> None:
    calls: list[str] = []

    @require_token
    async def control(request: web.Request) -> web.Response:
        calls.append(request.path)
        return web.json_response({"ok": True})

    node = Node("ctl", TOKEN)
    node.add_routes([web.post("/control", control)])
    await node.start()
    try:
        url = f"http://127.0.0.1:{node.port}/control"
        async with aiohttp.ClientSession() as session:
            with capture_logs() as logs:
                for headers in ({}, {"Authorization": "Bearer nope"}):
                    async with session.post(url, headers=headers) as resp:
                        assert resp.status == 401 and (await resp.json())["error"] == "unauthorized"
            assert calls == []
            assert [(e["event"], e["route"]) for e in logs if e["event"] == "http_unauthorized"] == [
                ("http_unauthorized", "/control")
            ] * 2
            async with session.post(url, headers=AUTH) as resp:
                assert resp.status == 200
        assert calls == ["/control"]
    finally:
        await node.stop()


def _ask_frame(**fields: object) -> bytes:
    env = {
        "v": 1,
        "kind": "ask",
        "to": "a/echo",
        "from": None,
        "id": 11,
        "type": "Probe",
        "body": {"n": 1, "payload": None},
    }
    env.update(fields)
    return msgpack.packb(env, use_bin_type=True)


BAD_INPUT = {
    "random bytes": (b"\xc1\xff\x00 not msgpack at all", None, "not valid msgpack"),
    "truncated msgpack": (_ask_frame()[:-4], None, "not valid msgpack"),
    "wrong envelope": (msgpack.packb({"hello": "world"}), None, "envelope keys do not match"),
    "unknown message type": (_ask_frame(type="NoSuchMessage"), 11, "unknown message type 'NoSuchMessage'"),
    "array larger than its data": (
        _ask_frame(
            body={
                "n": 1,
                "payload": msgpack.ExtType(1, b"\x03<f4\x01" + (10**6).to_bytes(8, "little") + b"\0" * 3 + b"\0" * 8),
            }
        ),
        11,
        "carries 8 bytes",
    ),
    "a field of the wrong type": (_ask_frame(body={"n": "x", "payload": None}), 11, "Probe.n must be int, got str 'x'"),
    "a bool for an int": (_ask_frame(body={"n": True, "payload": None}), 11, "Probe.n must be int, got bool"),
    "a list for an array": (
        _ask_frame(body={"n": 1, "payload": [1, 2]}),
        11,
        "Probe.payload must be numpy.ndarray | None",
    ),
    "a node-internal message": (
        _ask_frame(type=ChildExited.__name__, body={"child": "echo", "generation": 1, "reason": "killed"}),
        11,
        "unknown message type 'ChildExited'",
    ),
    "a sender on another node": (_ask_frame(**{"from": "b/echo"}), 11, "sender 'b/echo' is not an actor of 'raw'"),
    "object dtype": (
        _ask_frame(
            body={
                "n": 1,
                "payload": msgpack.ExtType(1, b"\x02|O\x01" + (1).to_bytes(8, "little") + b"\0" * 4 + b"\0" * 8),
            }
        ),
        11,
        "kind 'O'",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
async def test_bad_frames_get_a_clear_error_a_log_line_and_the_node_serves_on(
    make_node: NodeFactory, case: str
) -> None:
    frame, request_id, message = BAD_INPUT[case]
    node = await make_node("a")
    node.system.spawn(Echo(), "/echo")
    async with aiohttp.ClientSession() as session:
        ws = await _raw_client(session, node)
        with capture_logs() as logs:
            await ws.send_bytes(frame)
            error = wire.decode((await ws.receive()).data)
        assert error.kind == "error" and error.id == request_id
        assert message in error.body["message"]
        assert [e["reason"] for e in logs if e["event"] == "frame_rejected"] == [error.body["message"]]
        await ws.send_bytes(wire.encode("ask", to="a/echo", id=12, body=Probe(9)))
        reply = wire.decode((await ws.receive()).data)
        assert (reply.kind, reply.id, reply.body) == ("reply", 12, Probe(9))
        await ws.close()
    await _still_serves(make_node, node, "b")


async def test_frames_over_the_limit_and_bad_hellos_close_the_link_with_a_reason(make_node: NodeFactory) -> None:
    node = await make_node("a", max_message_bytes=4096)
    node.system.spawn(Echo(), "/echo")
    async with aiohttp.ClientSession() as session:
        ws = await _raw_client(session, node)
        with capture_logs() as logs:
            await ws.send_bytes(b"\0" * 10_000)
            msg = await ws.receive()
        assert msg.type == WSMsgType.CLOSE and msg.data == aiohttp.WSCloseCode.MESSAGE_TOO_BIG
        assert any(e["event"] == "frame_rejected" and "10000" in e["reason"] for e in logs)

        ws = await _raw_client(session, node, hello=False)
        with capture_logs() as logs:
            await ws.send_bytes(wire.encode("tell", to="a/echo", body=Probe(1)))
            msg = await ws.receive()
        assert msg.type == WSMsgType.CLOSE and msg.data == aiohttp.WSCloseCode.PROTOCOL_ERROR
        assert "expected a hello frame first" in msg.extra
        assert [e["event"] for e in logs] == ["link_refused"]

        ws = await _raw_client(session, node, hello=False)
        await ws.send_str("hello?")
        msg = await ws.receive()
        assert msg.type == WSMsgType.CLOSE and "expected a binary hello frame" in msg.extra
    await _still_serves(make_node, node, "b")


async def test_nodes_learn_each_other_through_a_hub_and_connect_directly(make_node: NodeFactory) -> None:
    hub, left, right = await make_node("hub"), await make_node("left"), await make_node("right")
    right.system.spawn(Echo(), "/echo")
    await left.connect(hub.url)
    await right.connect(hub.url)
    assert (await left.ask("right/echo", Probe(7))).n == 7
    assert {row["peer"] for row in left.links()} == {"hub", "right"}
    assert left.known_nodes()["right"] == right.url


async def test_nodes_connecting_to_each_other_at_once_keep_one_link(make_node: NodeFactory) -> None:
    a, b = await make_node("a"), await make_node("b")
    a.system.spawn(Echo(), "/echo")
    b.system.spawn(Echo(), "/echo")
    with capture_logs() as logs:
        await asyncio.gather(a.connect(b.url), b.connect(a.url))
        assert (await a.ask("b/echo", Probe(1))).n == 1
        assert (await b.ask("a/echo", Probe(2))).n == 2
    assert [row["peer"] for row in a.links()] == ["b"] and [row["peer"] for row in b.links()] == ["a"]
    assert not [e for e in logs if e["event"] == "link_down"]


class Watcher(Actor):
    """Collects the Down messages it receives."""

    def __init__(self) -> None:
        self.downs: asyncio.Queue[Down] = asyncio.Queue()

    async def on_down(self, msg: Down) -> None:
        await self.downs.put(msg)


async def test_a_peer_back_under_the_same_id_before_its_old_link_dropped_is_a_new_peer(make_node: NodeFactory) -> None:
    hub, old = await make_node("hub"), await make_node("x")
    old.system.spawn(Echo(), "/echo")
    await old.transport.connect(hub.url)  # not kept: the old node must not reconnect once replaced
    watcher = Watcher()
    hub.system.spawn(watcher, "/watcher")
    hub.system.watch(watcher.ref, hub.ref("x/echo"))
    await hub.ask("x/echo", Probe(1))
    new = await make_node("x")  # same node id, old link still open: as after a half-open socket
    new.system.spawn(Echo(), "/echo")
    await new.connect(hub.url)
    assert await asyncio.wait_for(watcher.downs.get(), 10) == Down("x/echo", "link_lost")
    assert (await hub.ask("x/echo", Probe(2))).n == 2
    assert [row["url"] for row in hub.links()] == [new.url]


async def test_the_smaller_size_limit_of_the_two_ends_applies_to_frames_and_batches(make_node: NodeFactory) -> None:
    big, small = await make_node("big"), await make_node("small", max_message_bytes=8192)
    small.system.spawn(Echo(), "/echo")
    await big.connect(small.url)
    with pytest.raises(WireError, match="over the limit of 8192 bytes"):
        await big.ask("small/echo", Probe(1, np.zeros(10_000, dtype=np.uint8)))
    # 500 tells in one loop turn are batched into messages the small end accepts.
    for n in range(500):
        await big.ref("small/echo").tell(Probe(n, np.zeros(100, dtype=np.uint8)))
    assert (await big.ask("small/echo", Probe(7))).n == 7
    assert [row["state"] for row in big.links()] == ["up"]


async def test_frames_for_addresses_that_are_not_here_get_answers_not_a_broken_link(make_node: NodeFactory) -> None:
    node = await make_node("a")
    node.system.spawn(Echo(), "/echo")
    async with aiohttp.ClientSession() as session:
        ws = await _raw_client(session, node)
        await ws.send_bytes(wire.encode("tell", to="elsewhere/echo", body=Probe(1)))
        await ws.send_bytes(wire.encode("tell", to="a/nobody", body=Probe(1)))
        await ws.send_bytes(wire.encode("ask", to="a/", id=1, body=Probe(1)))
        await ws.send_bytes(wire.encode("ask", to="elsewhere/echo", id=2, body=Probe(1)))
        await ws.send_bytes(wire.encode("watch", to="a/", id=3))
        await ws.send_bytes(wire.encode("watch", to="a/nobody", id=4))
        answers = await _receive_envelopes(ws, 4)
        assert [(e.kind, e.id) for e in answers] == [("error", 1), ("error", 2), ("down", 3), ("down", 4)]
        assert "links do not forward" in answers[1].body["message"]
        assert [e.body for e in answers[2:]] == ["noproc", "noproc"]
        await ws.send_bytes(wire.encode("ask", to="a/echo", id=5, body=Probe(5)))
        assert wire.decode((await ws.receive()).data).body == Probe(5)


async def test_connecting_again_by_another_spelling_of_the_url_keeps_one_link(make_node: NodeFactory) -> None:
    a, b = await make_node("a"), await make_node("b")
    await a.connect(b.url)
    assert await a.connect(f"http://localhost:{b.port}/") == "b"  # b advertises ws://127.0.0.1:PORT
    assert await a.connect(f"http://localhost:{b.port}") == "b"
    assert [row["peer"] for row in a.links()] == ["b"] and len(b.links()) == 1


async def test_replies_and_downs_are_taken_only_from_the_node_they_concern(make_node: NodeFactory) -> None:
    # A peer holding the token forged replies to other nodes' asks and downs for watches it never got (issue 14).
    a, b = await make_node("a"), await make_node("b")
    b.system.spawn(Echo(), "/echo")
    await a.connect(b.url)
    fired: list[str] = []
    a.system.watch_address("b/echo", fired.append)
    asking = asyncio.ensure_future(a.ask("b/echo", Sleep(1.0)))
    await asyncio.sleep(0.2)  # the ask and the watch are out
    async with aiohttp.ClientSession() as session:
        ws = await _raw_client(session, a)
        with capture_logs() as logs:
            for id_ in range(1, 20):
                await ws.send_bytes(wire.encode("reply", id=id_, body="forged"))
                await ws.send_bytes(wire.encode("down", sender="b/echo", id=id_, body="forged"))
            assert await asyncio.wait_for(asyncio.shield(asking), 10) == 1.0
        assert fired == []
        refused = [e for e in logs if e["event"] == "frame_refused"]
        assert {e["kind"] for e in refused} == {"reply", "down"} and all(e["peer"] == "raw" for e in refused)
        await ws.close()
    assert (await a.ask("b/echo", Probe(3))).n == 3  # the real link serves on


@pytest.mark.parametrize("route", ["/ws", "/control"])
async def test_an_authorization_header_that_is_not_utf8_gets_401(route: str) -> None:
    @require_token
    async def control(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    node = Node("ctl", TOKEN)
    node.add_routes([web.post("/control", control)])
    await node.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
        method = b"GET" if route == "/ws" else b"POST"
        writer.write(
            method + b" " + route.encode() + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\xc3(\r\n"
            b"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nContent-Length: 0\r\n\r\n"
        )
        await writer.drain()
        status = (await asyncio.wait_for(reader.readline(), 10)).decode()
        writer.close()
        assert status.split()[1] == "401", status
    finally:
        await node.stop()


async def test_a_peer_cannot_point_a_linked_node_at_another_url(make_node: NodeFactory) -> None:
    # A hello whose `known` map sent a linked node's id to a dead URL cut the link to it (issue 14).
    a, b = await make_node("a"), await make_node("b")
    b.system.spawn(Echo(), "/echo")
    await a.connect(b.url)
    async with aiohttp.ClientSession() as session:
        ws = await session.ws_connect(f"{a.url}/ws", headers=AUTH)
        await ws.send_bytes(
            wire.encode(
                "hello", body={"node": "raw", "url": "", "known": {"b": "ws://127.0.0.1:9", "c": "ws://127.0.0.1:9"}}
            )
        )
        assert wire.decode((await ws.receive()).data).kind == "hello"
        await asyncio.sleep(0.2)
        assert (
            a.known_nodes()["b"] == b.url and a.known_nodes()["c"] == "ws://127.0.0.1:9"
        )  # an unknown node is learned
        await ws.close()
    assert (await a.ask("b/echo", Probe(4))).n == 4


async def test_replies_to_a_reader_that_falls_behind_all_arrive_in_order(make_node: NodeFactory) -> None:
    # 48 replies of 256 KiB each overfill the socket while the asker reads nothing: the node's
    # writer waits for it to drain and must lose or reorder none.
    node = await make_node("a")
    node.system.spawn(Echo(), "/echo")
    payload = np.arange(256 * 1024, dtype=np.uint8)
    async with aiohttp.ClientSession() as session:
        ws = await _raw_client(session, node)
        for n in range(48):
            await ws.send_bytes(wire.encode("ask", to="a/echo", id=n, body=Probe(n, payload)))
        await asyncio.sleep(0.5)
        replies = await _receive_envelopes(ws, 48)
    assert [(e.kind, e.id, e.body.n) for e in replies] == [("reply", n, n) for n in range(48)]
    assert all(np.array_equal(e.body.payload, payload) for e in replies)
    assert [row["state"] for row in node.links()] == ["up"]
