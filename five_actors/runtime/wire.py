"""The wire codec: one msgpack map per frame, numpy arrays as one ext type.

A websocket message carries one or more frames back to back (a link batches the frames
queued in one turn of the event loop); `decode_batch` splits them, `decode` reads one.

A frame is the envelope `{v, kind, to, from, id, type, body}`:

    v     protocol version (1)
    kind  hello | tell | ask | reply | error | watch | unwatch | down
    to    the target actor's address (tell, ask, watch, unwatch), else nil
    from  the sender's address (tell, ask, down) or nil
    id    the request id (ask and its reply/error; watch/unwatch/down carry the watch id)
    type  the registered message type of `body` (tell, ask, a reply that is a message), else nil
    body  a message's fields as a map, a plain reply value, an error, or a hello

Message bodies may hold msgpack values, numpy arrays (torch tensors are sent as numpy) and
other registered messages. An array is ext type 1: a header (u8 dtype-string length, dtype
string, u8 ndim, ndim little-endian u64 sizes, zero padding to 16 bytes) then the raw bytes,
decoded with `np.frombuffer` so the array is a read-only view of the frame, not a copy. A
nested message is ext type 2 holding `[type, fields]`.

Everything malformed raises WireError (UnknownMessageType for a well-formed frame naming no
registered message); no other exception type leaves `decode`.
"""

from __future__ import annotations

import dataclasses
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

import msgpack
import numpy as np

from five_actors.errors import (
    ActorDown,
    AskTimeout,
    FiveActorsError,
    RemoteError,
    UnknownMessageType,
    WireError,
)
from five_actors.runtime.actor import MESSAGE_TYPES
from five_actors.runtime.fieldtypes import check_fields, field_checks

VERSION = 1
KINDS = frozenset({"hello", "tell", "ask", "reply", "error", "watch", "unwatch", "down"})
ENVELOPE_KEYS = frozenset({"v", "kind", "to", "from", "id", "type", "body"})
EXT_ARRAY = 1
EXT_MESSAGE = 2
ALLOWED_DTYPE_KINDS = frozenset("biufc")
"""bool, signed and unsigned ints, floats, complex: fixed-size types np.frombuffer reads safely."""

_ERROR_TYPES: dict[str, type[FiveActorsError]] = {
    cls.__name__: cls for cls in (ActorDown, AskTimeout, WireError, UnknownMessageType)
}


@dataclass(frozen=True)
class WireLimits:
    """What a decoder accepts; anything beyond is a WireError."""

    max_frame_bytes: int = 64 * 1024 * 1024
    """Largest encoded frame."""
    max_arrays: int = 4096
    """Most arrays in one frame."""
    max_depth: int = 32
    """Deepest nesting of lists, maps and messages."""


@dataclass(slots=True)
class Envelope:
    """One decoded frame. `body` is already a message instance when `type` names one."""

    kind: str
    to: str | None = None
    sender: str | None = None
    id: int | None = None
    type: str | None = None
    body: Any = None


# -- encoding -------------------------------------------------------------------------------


def _fields(cls: type) -> tuple[str, ...]:
    cached = _FIELDS.get(cls)
    if cached is None:
        cached = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return cached


_FIELDS: dict[type, tuple[str, ...]] = {}
_FIELD_SETS: dict[type, frozenset[str]] = {}


def _field_set(cls: type) -> frozenset[str]:
    cached = _FIELD_SETS.get(cls)
    if cached is None:
        cached = _FIELD_SETS[cls] = frozenset(_fields(cls))
    return cached


def message_body(msg: Any) -> dict[str, Any]:
    """A registered message's fields as a dict (shallow: values are not copied)."""
    return {name: getattr(msg, name) for name in _fields(type(msg))}


def _array_ext(arr: np.ndarray) -> msgpack.ExtType:
    dtype = arr.dtype
    if dtype.kind not in ALLOWED_DTYPE_KINDS or dtype.fields is not None:
        raise WireError(
            f"cannot send arrays of dtype {dtype} (kind {dtype.kind!r}): only bool, int, uint, float and complex"
        )
    code = dtype.str.encode()
    head = struct.pack(f"<B{len(code)}sB{arr.ndim}Q", len(code), code, arr.ndim, *arr.shape)
    head += b"\0" * (-len(head) % 16)
    # One copy: join reads the array's buffer directly (arr.tobytes() and + would be two).
    data = np.ascontiguousarray(arr).data.cast("B") if arr.size else b""
    return msgpack.ExtType(EXT_ARRAY, b"".join((head, data)))


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return _array_ext(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    cls = type(obj)
    if MESSAGE_TYPES.get(cls.__name__) is cls:
        return msgpack.ExtType(EXT_MESSAGE, _packer().pack([cls.__name__, message_body(obj)]))
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        try:
            return _array_ext(obj.detach().cpu().numpy())
        except TypeError as exc:
            raise WireError(f"cannot send tensor of dtype {obj.dtype}: {exc}") from None
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    raise WireError(
        f"cannot send a value of type {cls.__module__}.{cls.__qualname__}: not msgpack, numpy, torch or a registered "
        "@message"
    )


def _packer() -> msgpack.Packer:
    # A fresh packer per nested message: Packer.pack is not reentrant.
    return msgpack.Packer(default=_default, use_bin_type=True, autoreset=True)


_PACKER = msgpack.Packer(default=_default, use_bin_type=True, autoreset=True)


def encode(
    kind: str,
    *,
    to: str | None = None,
    sender: str | None = None,
    id: int | None = None,
    type: str | None = None,
    body: Any = None,
    max_bytes: int | None = None,
) -> bytes:
    """One frame; a registered message as `body` is sent as its fields with `type` set to its name."""
    if kind not in KINDS:
        raise WireError(f"unknown frame kind {kind!r}")
    name = body.__class__.__name__
    if type is None and MESSAGE_TYPES.get(name) is body.__class__:
        type = name
        body = message_body(body)
    envelope = {"v": VERSION, "kind": kind, "to": to, "from": sender, "id": id, "type": type, "body": body}
    try:
        frame: bytes = _PACKER.pack(envelope)
    except WireError:
        _PACKER.reset()
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        _PACKER.reset()
        raise WireError(f"cannot encode {kind} frame: {exc}") from None
    if max_bytes is not None and len(frame) > max_bytes:
        raise WireError(
            f"{kind} frame of {len(frame)} bytes ({type or 'value'}) is over the limit of {max_bytes} bytes "
            "(node.max_message_bytes)"
        )
    return frame


def encode_error(error: BaseException, id: int | None, to: str | None = None) -> bytes:
    """An error frame answering request `id` (nil when the request had no readable id)."""
    if isinstance(error, RemoteError):
        body = {"error": "RemoteError", "error_type": error.error_type, "message": error.message}
    else:
        body = {"error": type(error).__name__, "message": str(error)}
    return encode("error", to=to, id=id, body=body)


def decode_error(body: Any) -> FiveActorsError:
    """The exception an error frame's body describes (RemoteError for a handler's own errors)."""
    if not isinstance(body, dict) or not isinstance(body.get("error"), str) or not isinstance(body.get("message"), str):
        raise WireError(f"error frame body must be a map with string 'error' and 'message', got {body!r:.200}")
    name, text = body["error"], body["message"]
    if name == "RemoteError":
        return RemoteError(str(body.get("error_type", "RemoteError")), text)
    cls = _ERROR_TYPES.get(name)
    return cls(text) if cls is not None else RemoteError(name, text)


# -- decoding -------------------------------------------------------------------------------


class _Decoder:
    """Decodes one frame at a time, counting arrays against the limits."""

    def __init__(self, limits: WireLimits) -> None:
        self.limits = limits
        self.arrays = 0
        self.nesting = 0

    def ext_hook(self, code: int, data: bytes) -> Any:
        if code == EXT_ARRAY:
            self.arrays += 1
            if self.arrays > self.limits.max_arrays:
                raise WireError(f"frame carries more than {self.limits.max_arrays} arrays")
            return decode_array(data)
        if code == EXT_MESSAGE:
            self.nesting += 1
            if self.nesting > self.limits.max_depth:
                raise WireError(f"frame nests messages deeper than {self.limits.max_depth} levels")
            item = self.unpack(data, "nested message")
            self.nesting -= 1
            if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str):
                raise WireError("nested message must be [type, fields]")
            return build_message(item[0], item[1])
        raise WireError(f"unknown msgpack ext type {code}")

    def unpack(self, data: bytes, what: str) -> Any:
        n = len(data)
        try:
            return msgpack.unpackb(
                data,
                ext_hook=self.ext_hook,
                raw=False,
                strict_map_key=False,
                max_str_len=n,
                max_bin_len=n,
                max_array_len=n,
                max_map_len=n // 2,
                max_ext_len=n,
            )
        except Exception as exc:  # noqa: BLE001 - msgpack raises many types; all mean a bad frame
            raise _unpack_error(exc, what) from None


def decode_array(data: bytes) -> np.ndarray:
    """An ext-type-1 payload as a read-only array viewing `data` (no copy)."""
    if len(data) < 2:
        raise WireError(f"array header truncated: {len(data)} bytes")
    n_code = data[0]
    if len(data) < 2 + n_code:
        raise WireError("array header truncated in its dtype")
    try:
        code = data[1 : 1 + n_code].decode("ascii")
        dtype = np.dtype(code)
    except (UnicodeDecodeError, TypeError, ValueError, SyntaxError) as exc:
        raise WireError(f"array dtype {data[1 : 1 + n_code]!r} is not a numpy dtype: {exc}") from None
    if dtype.kind not in ALLOWED_DTYPE_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise WireError(
            f"array dtype {code!r} (kind {dtype.kind!r}) is refused: only bool, int, uint, float and complex"
        )
    ndim_at = 1 + n_code
    ndim = data[ndim_at]
    head = ndim_at + 1 + 8 * ndim
    if len(data) < head:
        raise WireError(f"array header truncated in its shape ({ndim} dimensions)")
    shape = struct.unpack_from(f"<{ndim}Q", data, ndim_at + 1)
    head += -head % 16
    count = 1
    for size in shape:
        count *= size
    expected = count * dtype.itemsize
    actual = len(data) - head
    if expected != actual:
        raise WireError(f"array declares shape {shape} of {code} ({expected} bytes) but carries {max(actual, 0)} bytes")
    return np.frombuffer(data, dtype=dtype, count=count, offset=head).reshape(shape)


def _check_depth(value: dict[Any, Any] | list[Any], max_depth: int) -> None:
    values = value.values() if isinstance(value, dict) else value
    stack = [(v, 2) for v in values if isinstance(v, (dict, list))]
    while stack:  # empty at once for the usual flat body
        item, depth = stack.pop()
        if depth > max_depth:
            raise WireError(f"frame is nested deeper than {max_depth} levels")
        values = item.values() if isinstance(item, dict) else item
        stack.extend([(v, depth + 1) for v in values if isinstance(v, (dict, list))])


def build_message(type_name: str, body: Any) -> Any:
    """An instance of the registered message `type_name` from its fields; checks their names and types match."""
    cls = MESSAGE_TYPES.get(type_name)
    if cls is None:
        raise UnknownMessageType(f"unknown message type {type_name!r}")
    if not isinstance(body, dict):
        raise WireError(f"{type_name} body must be a map of its fields, got {type(body).__name__}")
    fields = _field_set(cls)
    if body.keys() != fields:
        missing = sorted(fields - set(map(str, body)))
        extra = sorted(set(map(str, body)) - fields)
        raise WireError(f"{type_name} fields do not match: missing {missing}, unexpected {extra}")
    for name in field_checks(cls).tuple_names:
        if isinstance(body[name], list):
            body[name] = tuple(body[name])
    check_fields(type_name, cls, body)
    try:
        return cls(**body)
    except Exception as exc:  # noqa: BLE001 - a message's own validation refusing the values
        raise WireError(f"{type_name} refused its fields: {type(exc).__name__}: {exc}") from None


def decode(data: bytes, limits: WireLimits = WireLimits()) -> Envelope:
    """One frame into an Envelope; raises WireError (or UnknownMessageType) for anything malformed."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireError(f"frame must be bytes, got {type(data).__name__}")
    if len(data) > limits.max_frame_bytes:
        raise WireError(f"frame of {len(data)} bytes is over the limit of {limits.max_frame_bytes} bytes")
    return _envelope(_Decoder(limits).unpack(bytes(data), "frame"), limits)


@dataclass(frozen=True)
class Rejected:
    """A frame in a batch that failed to decode; `id` is its request id when readable."""

    error: WireError
    id: int | None


def decode_batch(data: bytes, limits: WireLimits = WireLimits()) -> Iterator[Envelope | Rejected]:
    """The frames of one websocket message (frames back to back), in order.

    A bad frame yields one Rejected and ends the batch: after it there is no telling where
    the next frame would start.
    """
    if len(data) > limits.max_frame_bytes:
        yield Rejected(
            WireError(f"message of {len(data)} bytes is over the limit of {limits.max_frame_bytes} bytes"), None
        )
        return
    decoder = _Decoder(limits)
    try:
        # Most messages hold one frame, and unpackb is cheaper than setting up an Unpacker.
        raw = msgpack.unpackb(data, ext_hook=decoder.ext_hook, raw=False, strict_map_key=False)
    except msgpack.ExtraData:
        yield from _decode_stream(data, limits)
        return
    except Exception as exc:  # noqa: BLE001 - msgpack raises many types; all mean a bad frame
        yield Rejected(_unpack_error(exc, "frame"), peek_id(data))
        return
    try:
        yield _envelope(raw, limits)
    except WireError as exc:
        yield Rejected(exc, peek_id(data))


def _decode_stream(data: bytes, limits: WireLimits) -> Iterator[Envelope | Rejected]:
    decoder = _Decoder(limits)
    unpacker = msgpack.Unpacker(
        ext_hook=decoder.ext_hook, raw=False, strict_map_key=False, max_buffer_size=max(len(data), 1)
    )
    unpacker.feed(data)
    while (offset := unpacker.tell()) < len(data):
        decoder.arrays = 0
        try:
            raw = unpacker.unpack()
        except msgpack.OutOfData:
            yield Rejected(
                WireError(f"frame is not valid msgpack: truncated after {offset} of {len(data)} bytes"), None
            )
            return
        except Exception as exc:  # noqa: BLE001 - msgpack raises many types; all mean a bad frame
            yield Rejected(_unpack_error(exc, "frame"), peek_id(data[offset:]))
            return
        try:
            yield _envelope(raw, limits)
        except WireError as exc:
            yield Rejected(exc, peek_id(data[offset:]))
            return


def _unpack_error(exc: Exception, what: str) -> WireError:
    """The WireError for an exception raised while unpacking `what`."""
    if isinstance(exc, WireError):
        return exc
    if isinstance(exc, RecursionError):
        return WireError(f"{what} is nested too deeply")
    return WireError(f"{what} is not valid msgpack: {type(exc).__name__}: {exc or 'invalid byte'}")


_NEEDS_TO = frozenset({"tell", "ask", "watch", "unwatch"})
_NEEDS_ID = frozenset({"ask", "reply", "watch", "unwatch", "down"})


def _envelope(raw: Any, limits: WireLimits) -> Envelope:
    if type(raw) is not dict or raw.keys() != ENVELOPE_KEYS:
        _explain_envelope(raw)
    kind, to, sender, id_, type_, body = raw["kind"], raw["to"], raw["from"], raw["id"], raw["type"], raw["body"]
    # One cheap test for the usual frame; the slow path names what is wrong.
    if (
        raw["v"] != VERSION
        or kind not in KINDS
        or (to is not None and type(to) is not str)
        or (sender is not None and type(sender) is not str)
        or (type_ is not None and type(type_) is not str)
        or (id_ is not None and type(id_) is not int)
        or (to is None and kind in _NEEDS_TO)
        or (id_ is None and kind in _NEEDS_ID)
        or (type_ is None and (kind == "tell" or kind == "ask"))
    ):
        _explain_envelope(raw)
    if type(body) is dict or type(body) is list:
        _check_depth(body, limits.max_depth)
    if type_ is not None:
        body = build_message(type_, body)
    return Envelope(kind, to, sender, id_, type_, body)


def _explain_envelope(raw: Any) -> NoReturn:
    """Raise the WireError naming what is wrong with an envelope that failed the fast check."""
    if not isinstance(raw, dict):
        raise WireError(f"frame must be a msgpack map (the envelope), got {type(raw).__name__}")
    if raw.keys() != ENVELOPE_KEYS:
        missing = sorted(ENVELOPE_KEYS - set(map(str, raw)))
        extra = sorted(map(str, set(raw) - ENVELOPE_KEYS))
        raise WireError(
            f"envelope keys do not match {{v, kind, to, from, id, type, body}}: missing {missing}, unexpected {extra}"
        )
    if raw["v"] != VERSION:
        raise WireError(f"unsupported protocol version {raw['v']!r} (this node speaks {VERSION})")
    kind = raw["kind"]
    if kind not in KINDS:
        raise WireError(f"unknown frame kind {kind!r}")
    for name in ("to", "from", "type"):
        if raw[name] is not None and type(raw[name]) is not str:
            raise WireError(f"envelope {name!r} must be a string or nil, got {type(raw[name]).__name__}")
    if raw["id"] is not None and type(raw["id"]) is not int:
        raise WireError(f"envelope 'id' must be an integer or nil, got {type(raw['id']).__name__}")
    if raw["to"] is None and kind in _NEEDS_TO:
        raise WireError(f"{kind} frame needs a 'to' address")
    if raw["id"] is None and kind in _NEEDS_ID:
        raise WireError(f"{kind} frame needs an 'id'")
    raise WireError(f"{kind} frame needs a message 'type'")


def peek_id(data: bytes) -> int | None:
    """The request id of a frame that failed to decode, if its envelope is readable at all."""
    unpacker = msgpack.Unpacker(
        ext_hook=lambda code, payload: None, raw=False, strict_map_key=False, max_buffer_size=max(len(data), 1)
    )
    try:
        unpacker.feed(data)
        raw = unpacker.unpack()
    except Exception:  # noqa: BLE001 - best effort: an unreadable frame has no id
        return None
    if isinstance(raw, dict) and raw.get("kind") == "ask":
        id_ = raw.get("id")
        if isinstance(id_, int) and not isinstance(id_, bool):
            return id_
    return None
