"""Checkpoints: spec, parameters (with the observation normaliser), optimizer state, counters.

File layout (all integers little-endian):

    MAGIC (16 bytes) | header length (8) | header JSON | payload length (8) | payload | sha256 (32)

The header holds the spec, its hash and the version counters; the payload is `torch.save` of
the parameters and optimizer state; the sha256 covers everything between MAGIC and itself.
A file is written to a temporary name, fsynced and renamed, so a reader sees either the old
checkpoint or the new one. Reading checks magic, lengths and checksum before unpickling
anything (with `weights_only`), and the spec before touching a model: a truncated, corrupt
or mismatched file raises CheckpointError and nothing is loaded.
"""

from __future__ import annotations

import hashlib
import io
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import torch

from five_actors.errors import CheckpointError, ModelError
from five_actors.files import write_atomic
from five_actors.model.policy import Policy
from five_actors.model.spec import ModelSpec

MAGIC = b"FIVEACTORS-CKPT1"
_LENGTH = struct.Struct("<Q")
_DIGEST = 32


@dataclass
class Checkpoint:
    """The contents of one checkpoint file."""

    spec: ModelSpec
    params: dict[str, torch.Tensor]
    """The policy's state dict, normaliser statistics included."""
    optimizer: dict[str, Any] | None = None
    counters: dict[str, int] = field(default_factory=dict)
    """Version counters, e.g. `version` (parameter version), `updates`, `steps`."""


def save_checkpoint(
    path: str | Path,
    policy: Policy,
    optimizer: torch.optim.Optimizer | None = None,
    counters: dict[str, int] | None = None,
) -> None:
    """Write `policy` (and `optimizer`) to `path` atomically."""
    path = Path(path)
    buffer = io.BytesIO()
    torch.save(
        {"params": policy.state_dict(), "optimizer": None if optimizer is None else optimizer.state_dict()}, buffer
    )
    payload = buffer.getvalue()
    header = orjson.dumps(
        {"spec": policy.spec.to_dict(), "spec_hash": policy.spec.hash, "counters": dict(counters or {})}
    )
    body = _LENGTH.pack(len(header)) + header + _LENGTH.pack(len(payload)) + payload
    data = MAGIC + body + hashlib.sha256(body).digest()
    write_atomic(path, data)


def read_checkpoint(
    path: str | Path, expect: ModelSpec | None = None, map_location: str | torch.device = "cpu"
) -> Checkpoint:
    """Read and verify a checkpoint; with `expect`, refuse one written for another architecture."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read: {exc.strerror}") from None
    if not data.startswith(MAGIC):
        raise CheckpointError(f"{path}: not a five-actors checkpoint (bad magic bytes)")
    body, digest = data[len(MAGIC) : -_DIGEST], data[-_DIGEST:]
    header_len = _read_length(path, body, 0, len(data))
    payload_at = _LENGTH.size + header_len
    payload_len = _read_length(path, body, payload_at, len(data))
    expected_size = len(MAGIC) + payload_at + _LENGTH.size + payload_len + _DIGEST
    if len(data) != expected_size:
        raise CheckpointError(
            f"{path}: truncated or padded: the header says {expected_size} bytes, the file has {len(data)}"
        )
    if hashlib.sha256(body).digest() != digest:
        raise CheckpointError(f"{path}: corrupt: the sha256 checksum does not match the contents")
    try:
        header = orjson.loads(body[_LENGTH.size : payload_at])
        spec = ModelSpec.from_dict(header["spec"])
        counters = {str(k): int(v) for k, v in header["counters"].items()}
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, ModelError) as exc:
        raise CheckpointError(f"{path}: malformed header: {exc}") from None
    if spec.hash != header.get("spec_hash"):
        raise CheckpointError(f"{path}: the spec does not match its recorded hash {header.get('spec_hash')!r}")
    if expect is not None and expect.hash != spec.hash:
        raise CheckpointError(
            f"{path}: written for architecture {spec.hash}, expected {expect.hash}: {_spec_difference(spec, expect)}"
        )
    payload = body[payload_at + _LENGTH.size :]
    try:
        contents = torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means the payload is unusable
        raise CheckpointError(f"{path}: the parameter payload cannot be read: {type(exc).__name__}: {exc}") from None
    return Checkpoint(spec, contents["params"], contents["optimizer"], counters)


def load_into(checkpoint: Checkpoint, policy: Policy, optimizer: torch.optim.Optimizer | None = None) -> None:
    """Copy a checkpoint into `policy` (and `optimizer`) after checking every name and shape first."""
    if checkpoint.spec.hash != policy.spec.hash:
        raise CheckpointError(
            f"checkpoint architecture {checkpoint.spec.hash} does not match the policy's {policy.spec.hash}: "
            f"{_spec_difference(checkpoint.spec, policy.spec)}"
        )
    own = policy.state_dict()
    if set(own) != set(checkpoint.params):
        missing, extra = sorted(set(own) - set(checkpoint.params)), sorted(set(checkpoint.params) - set(own))
        raise CheckpointError(f"checkpoint parameters do not match the policy: missing {missing}, unexpected {extra}")
    for name, tensor in own.items():
        if tuple(checkpoint.params[name].shape) != tuple(tensor.shape):
            raise CheckpointError(
                f"checkpoint parameter {name!r} has shape {tuple(checkpoint.params[name].shape)}, the policy's is "
                f"{tuple(tensor.shape)}"
            )
    if optimizer is not None and checkpoint.optimizer is None:
        raise CheckpointError("the checkpoint holds no optimizer state")
    policy.load_state_dict(checkpoint.params)
    if optimizer is not None and checkpoint.optimizer is not None:
        optimizer.load_state_dict(checkpoint.optimizer)


def _read_length(path: Path, body: bytes, at: int, file_size: int) -> int:
    if len(body) < at + _LENGTH.size:
        raise CheckpointError(f"{path}: truncated: {file_size} bytes end inside the length fields")
    return int(_LENGTH.unpack_from(body, at)[0])


def _spec_difference(found: ModelSpec, expected: ModelSpec) -> str:
    """Which top-level spec fields differ, for the error message."""
    a, b = found.to_dict(), expected.to_dict()
    return ", ".join(
        f"{k} {a[k]!r} != {b[k]!r}" if k not in ("obs", "actions") else f"{k} layout differs"
        for k in a
        if a[k] != b.get(k)
    )
