"""The wire codec: round trips, zero-copy arrays, and every malformed input -> WireError."""

from __future__ import annotations

import re
import struct

import msgpack
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from five_actors.errors import ActorDown, RemoteError, UnknownMessageType, WireError
from five_actors.runtime import wire
from five_actors.runtime.actor import message
from tests.runtime.peer_node import Forward, Probe, Total


@message
class Shapes:
    """A message with a tuple field and a list of arrays."""

    dims: tuple[int, ...]
    arrays: list


def test_message_with_arrays_round_trips_and_arrays_view_the_frame() -> None:
    arrays = [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.array([True, False]),
        np.zeros((0, 5), dtype=np.int64),
        np.arange(6, dtype=np.uint8)[::2],  # not contiguous: sent as a contiguous copy
        np.array(3.5 + 1j, dtype=np.complex128),
        np.arange(5, dtype=">f4"),  # big-endian: the dtype string keeps the byte order
        np.arange(6, dtype=np.float16).reshape(2, 3).T,
    ]
    frame = wire.encode("ask", to="n/echo", sender="m/me", id=7, body=Shapes((3, 4), arrays))
    env = wire.decode(frame)
    assert (env.kind, env.to, env.sender, env.id, env.type) == ("ask", "n/echo", "m/me", 7, "Shapes")
    assert env.body.dims == (3, 4)
    for sent, got in zip(arrays, env.body.arrays):
        assert got.dtype == sent.dtype and got.shape == sent.shape
        np.testing.assert_array_equal(got, sent)
        assert not got.flags.owndata and not got.flags.writeable  # a view of the frame, not a copy
    assert env.body.arrays[0].flags.aligned


def test_nested_messages_torch_tensors_and_plain_replies() -> None:
    frame = wire.encode("tell", to="n/relay", body=Forward("n/echo", Probe(3, torch.ones(2, 2))))
    body = wire.decode(frame).body
    assert isinstance(body.msg, Probe) and body.msg.n == 3
    np.testing.assert_array_equal(body.msg.payload, np.ones((2, 2), dtype=np.float32))
    reply = wire.decode(wire.encode("reply", id=1, body={"a": [1, 2.5, "x", None], 3: b"raw"}))
    assert reply.type is None and reply.body == {"a": [1, 2.5, "x", None], 3: b"raw"}
    assert wire.decode(wire.encode("reply", id=2, body=Total())).body == Total()


def test_errors_travel_with_their_type() -> None:
    for error in (ActorDown("gone"), UnknownMessageType("no such type"), RemoteError("GameError", "illegal move")):
        got = wire.decode_error(wire.decode(wire.encode_error(error, 5)).body)
        assert type(got) is type(error) and str(got) == str(error)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (Probe(1, np.array([object()], dtype=object)), "dtype object"),
        (Probe(1, np.zeros(2, dtype=[("a", "i4")])), "cannot send arrays of dtype"),
        ({"x": object()}, "cannot send a value of type builtins.object"),
        (Probe(1, torch.ones(2, dtype=torch.bfloat16)), "cannot send tensor of dtype torch.bfloat16"),
    ],
)
def test_encode_refuses_what_cannot_travel(body: object, match: str) -> None:
    with pytest.raises(WireError, match=match):
        wire.encode("tell", to="n/a", body=body)


def test_encode_refuses_a_frame_over_the_limit() -> None:
    with pytest.raises(WireError, match="over the limit of 1024 bytes"):
        wire.encode("tell", to="n/a", body=Probe(1, np.zeros(1024, dtype=np.uint8)), max_bytes=1024)


def _envelope(**fields: object) -> bytes:
    env = {
        "v": 1,
        "kind": "tell",
        "to": "n/a",
        "from": None,
        "id": None,
        "type": "Probe",
        "body": {"n": 1, "payload": None},
    }
    env.update(fields)
    return msgpack.packb(env, use_bin_type=True)


def _array_ext(dtype: str, shape: tuple[int, ...], data: bytes) -> msgpack.ExtType:
    code = dtype.encode()
    head = struct.pack(f"<B{len(code)}sB{len(shape)}Q", len(code), code, len(shape), *shape)
    return msgpack.ExtType(wire.EXT_ARRAY, head + b"\0" * (-len(head) % 16) + data)


BAD_FRAMES = {
    "random bytes": (b"\xc1\x99\x00garbage", "not valid msgpack"),
    "truncated msgpack": (_envelope()[:-5], "not valid msgpack"),
    "not a map": (msgpack.packb([1, 2, 3]), "must be a msgpack map"),
    "missing envelope keys": (
        msgpack.packb({"v": 1, "kind": "tell"}),
        "missing \\['body', 'from', 'id', 'to', 'type'\\]",
    ),
    "extra envelope key": (msgpack.packb({**msgpack.unpackb(_envelope()), "x": 1}), "unexpected \\['x'\\]"),
    "wrong version": (_envelope(v=9), "unsupported protocol version 9"),
    "unknown kind": (_envelope(kind="shout"), "unknown frame kind 'shout'"),
    "ask without id": (_envelope(kind="ask"), "ask frame needs an 'id'"),
    "id not an integer": (_envelope(id="7"), "'id' must be an integer"),
    "fields do not match": (
        _envelope(body={"n": 1, "colour": 2}),
        "missing \\['payload'\\], unexpected \\['colour'\\]",
    ),
    "body not a map": (_envelope(body=[1]), "Probe body must be a map"),
    "array larger than its data": (
        _envelope(body={"n": 1, "payload": _array_ext("<f4", (1000,), b"\0" * 16)}),
        "carries 16 bytes",
    ),
    "object dtype": (_envelope(body={"n": 1, "payload": _array_ext("|O", (2,), b"\0" * 16)}), "kind 'O'"),
    "void dtype": (_envelope(body={"n": 1, "payload": _array_ext("|V8", (2,), b"\0" * 16)}), "kind 'V'"),
    "nonsense dtype": (_envelope(body={"n": 1, "payload": _array_ext("zz9", (2,), b"\0" * 16)}), "not a numpy dtype"),
    "truncated array header": (_envelope(body={"n": 1, "payload": msgpack.ExtType(1, b"\x03<f")}), "truncated"),
    "unknown ext type": (_envelope(body={"n": 1, "payload": msgpack.ExtType(9, b"")}), "unknown msgpack ext type 9"),
    "nested too deeply": (
        _envelope(
            type=None, kind="reply", id=1, body=[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]
        ),
        "deeper than 32",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FRAMES))
def test_each_malformed_frame_is_a_wire_error_saying_what_is_wrong(case: str) -> None:
    frame, match = BAD_FRAMES[case]
    with pytest.raises(WireError, match=match):
        wire.decode(frame)


def test_unknown_message_type_has_its_own_error() -> None:
    with pytest.raises(UnknownMessageType, match="unknown message type 'Nope'"):
        wire.decode(_envelope(type="Nope"))


def test_limits_on_frame_size_and_array_count() -> None:
    frame = wire.encode("tell", to="n/a", body=Shapes((), [np.zeros(1)] * 5))
    with pytest.raises(WireError, match="over the limit of 1024 bytes"):
        wire.decode(frame + b"\0" * 2000, wire.WireLimits(max_frame_bytes=1024))
    with pytest.raises(WireError, match="more than 4 arrays"):
        wire.decode(frame, wire.WireLimits(max_arrays=4))


def test_a_batch_of_frames_decodes_in_order_and_stops_at_a_bad_one() -> None:
    good = [wire.encode("tell", to="n/a", body=Probe(i)) for i in range(3)]
    items = list(wire.decode_batch(b"".join(good)))
    assert [item.body.n for item in items] == [0, 1, 2]  # type: ignore[union-attr]
    items = list(wire.decode_batch(good[0] + _envelope(kind="ask", id=5, type="Nope") + good[1]))
    assert len(items) == 2 and isinstance(items[1], wire.Rejected)
    assert items[1].id == 5 and "unknown message type 'Nope'" in str(items[1].error)
    items = list(wire.decode_batch(good[0] + good[1][:-2]))
    assert isinstance(items[1], wire.Rejected) and "truncated" in str(items[1].error)


def test_peek_id_finds_the_request_id_of_an_undecodable_ask() -> None:
    assert wire.peek_id(_envelope(kind="ask", id=41, type="Nope")) == 41
    assert wire.peek_id(b"\xc1") is None


VALID = [
    wire.encode("ask", to="n/echo", id=3, body=Probe(1, np.arange(4, dtype=np.float64))),
    wire.encode("tell", to="n/relay", body=Forward("n/echo", Probe(2))),
    wire.encode("reply", id=9, body={"k": [1, 2, {"x": np.ones((2, 2), dtype=np.int16)}]}),
    wire.encode("down", id=4, sender="n/a", body="link_lost"),
    wire.encode("hello", body={"node": "n", "url": "ws://127.0.0.1:1", "known": {}}),
]


def _decodes_or_wire_error(data: bytes) -> None:
    try:
        env = wire.decode(data)
    except WireError:
        return
    assert env.kind in wire.KINDS


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=512))
def test_random_bytes_only_ever_give_wire_error_or_a_frame(data: bytes) -> None:
    _decodes_or_wire_error(data)


@FUZZ
@given(st.sampled_from(VALID), st.data())
def test_truncated_frames_give_wire_error(frame: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(WireError):
        wire.decode(frame[:cut])


@FUZZ
@given(st.sampled_from(VALID), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=8))
def test_mutated_frames_give_wire_error_or_a_frame(frame: bytes, edits: list[tuple[int, int]]) -> None:
    mutated = bytearray(frame)
    for at, value in edits:
        mutated[at % len(mutated)] = value
    _decodes_or_wire_error(bytes(mutated))


def test_the_training_messages_refuse_values_of_the_wrong_type_naming_the_field() -> None:
    # Each of these crashed its actor when it reached the handler (issue 14).
    from five_actors.actors.messages import EvalRating, GetParams, MatchResult, ParamsAvailable, Subscribe, Surgery

    cases = [
        (MatchResult, {"opponent_version": 1, "outcome": "bad"}, "MatchResult.outcome must be float"),
        (EvalRating, {"version": "x", "trueskill": 1.0}, "EvalRating.version must be int"),
        (Subscribe, {"address": 123}, "Subscribe.address must be str"),
        (GetParams, {"version": [1]}, "GetParams.version must be int"),
        (
            Surgery,
            {"ops": ["widen-lstm", "64"], "dry_run": False, "probe_steps": "x"},
            "Surgery.probe_steps must be int",
        ),
        (Surgery, {"ops": "widen-lstm", "dry_run": False, "probe_steps": 8}, "Surgery.ops must be list[str]"),
        (ParamsAvailable, {"version": "x", "arch": "a", "anneal": {}}, "ParamsAvailable.version must be int"),
        (
            ParamsAvailable,
            {"version": 1, "arch": "a", "anneal": "zz"},
            "ParamsAvailable.anneal must be dict[str, float]",
        ),
        (
            ParamsAvailable,
            {"version": 1, "arch": "a", "anneal": {"recall": "x"}},
            "ParamsAvailable.anneal must be dict[str, float]",
        ),
    ]
    for cls, body, refusal in cases:
        frame = msgpack.packb(
            {"v": 1, "kind": "tell", "to": "n/x", "from": None, "id": None, "type": cls.__name__, "body": body}
        )
        with pytest.raises(WireError, match=re.escape(refusal)):
            wire.decode(frame)
    fine = {"version": 3, "arch": "a", "anneal": {"recall": 1}}  # an int where a float is declared is a number still
    frame = msgpack.packb(
        {"v": 1, "kind": "tell", "to": "n/x", "from": None, "id": None, "type": "ParamsAvailable", "body": fine}
    )
    assert wire.decode(frame).body == ParamsAvailable(3, "a", {"recall": 1})
