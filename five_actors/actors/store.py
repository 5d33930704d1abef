"""The ParamServer's files: one checkpoint per saved version and the opponent pool beside them.

    RUN_DIR/checkpoints/v000000040.ckpt   five_actors.model.checkpoint format (atomic, checksummed)
    RUN_DIR/checkpoints/pool.json         {"latest": 40, "arch": ..., "pool": {"eta", "members"}}

Both are written to a temporary name, fsynced and renamed, so a `kill -9` at any moment leaves
the previous complete files. Pruning keeps the newest `keep` checkpoints and every pool
member's, so any version the pool can hand out can still be loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import structlog
import torch

from five_actors.actors.params import Arrays, load_optimizer, load_state, optimizer_arrays, state_arrays
from five_actors.errors import CheckpointError
from five_actors.files import write_atomic
from five_actors.model.checkpoint import read_checkpoint, save_checkpoint
from five_actors.model.policy import Policy
from five_actors.model.spec import ModelSpec

log = structlog.get_logger("five_actors.params")

_NAME = re.compile(r"^v(\d{9})\.ckpt$")
POOL_FILE = "pool.json"


@dataclass
class Saved:
    """One version read back from disk."""

    version: int
    spec: ModelSpec
    state: Arrays
    optimizer: Arrays | None
    counters: dict[str, int]


class CheckpointStore:
    """Checkpoints of parameter versions (with optimizer state when known) in one directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._models: dict[str, tuple[Policy, torch.optim.Adam]] = {}

    def model_for(self, spec: ModelSpec, policy: Policy | None = None) -> tuple[Policy, torch.optim.Adam]:
        """A policy and an Adam over it to pass arrays through, one per architecture.

        Built once (from `policy` when given; its weights get overwritten): the first Adam of a
        process takes seconds (torch imports its compiler stack).
        """
        if spec.hash not in self._models:
            policy = policy if policy is not None else Policy(spec)
            self._models[spec.hash] = (policy, torch.optim.Adam(policy.parameters()))
        return self._models[spec.hash]

    def path(self, version: int) -> Path:
        return self.directory / f"v{version:09d}.ckpt"

    def versions(self) -> list[int]:
        """Versions with a checkpoint file, oldest first."""
        if not self.directory.is_dir():
            return []
        found = (_NAME.match(p.name) for p in self.directory.iterdir())
        return sorted(int(m.group(1)) for m in found if m)

    def save(
        self, version: int, spec: ModelSpec, state: Arrays, optimizer: Arrays | None, counters: dict[str, int]
    ) -> Path:
        """Write `version` atomically (blocking: call it in a thread)."""
        policy, adam = self.model_for(spec)
        load_state(policy, state)
        if optimizer:
            load_optimizer(adam, optimizer)
        path = self.path(version)
        save_checkpoint(path, policy, adam if optimizer else None, {**counters, "version": version})
        return path

    def load(self, version: int) -> Saved:
        """Read `version` back; CheckpointError when it is missing or damaged."""
        checkpoint = read_checkpoint(self.path(version))
        policy, adam = self.model_for(checkpoint.spec)
        policy.load_state_dict(checkpoint.params)
        optimizer = None
        if checkpoint.optimizer is not None and checkpoint.optimizer.get("state"):
            adam.load_state_dict(checkpoint.optimizer)
            optimizer = optimizer_arrays(adam)
        return Saved(version, checkpoint.spec, state_arrays(policy), optimizer, checkpoint.counters)

    def load_latest(self) -> Saved | None:
        """The newest readable checkpoint (a damaged newer one is logged and skipped), or None."""
        for version in reversed(self.versions()):
            try:
                return self.load(version)
            except CheckpointError as exc:
                log.error("checkpoint_unreadable", version=version, reason=str(exc))
        return None

    def prune(self, keep: int, protect: set[int]) -> list[int]:
        """Delete all but the newest `keep` checkpoints and those in `protect`; returns the deleted versions."""
        versions = self.versions()
        doomed = [v for v in versions[:-keep] if v not in protect] if keep > 0 else []
        for version in doomed:
            self.path(version).unlink(missing_ok=True)
        return doomed

    def save_pool(self, data: dict[str, Any]) -> None:
        """Write pool.json atomically."""
        write_atomic(self.directory / POOL_FILE, orjson.dumps(data, option=orjson.OPT_INDENT_2))

    def load_pool(self) -> dict[str, Any] | None:
        """pool.json's contents, None when there is none; a damaged file is a CheckpointError."""
        path = self.directory / POOL_FILE
        if not path.exists():
            return None
        try:
            data = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise CheckpointError(f"{path}: cannot read the opponent pool: {exc}") from None
        if not isinstance(data, dict):
            raise CheckpointError(f"{path}: expected a JSON object")
        return data
