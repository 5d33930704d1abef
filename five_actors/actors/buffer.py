"""A learner's experience buffer: Rollout chunks checked on arrival, sampled into minibatches.

Each chunk remembers the policy version that played it and how often it has been trained on.
Every chunk that arrives is, at any moment, exactly one of: refused (wrong architecture or
shapes), trained on (at least once), dropped as too stale, dropped by an architecture change,
evicted unused from a full buffer, or waiting in the buffer (`Accounting`). Chunks of the
architecture a live surgery replaced are converted to the new one (`convert_rollout`) rather
than refused: the surgery preserved what the policy does, so they stay on-policy.
Sample reuse is samples consumed / samples produced over the last `window_s` seconds.

The buffer is shared by the actor's event loop (which adds chunks) and its training thread
(which samples them), so every method holds the lock.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from five_actors.actors.messages import Rollout
from five_actors.errors import FiveActorsError, TrainingError
from five_actors.game.layout import decode_continuous, project_masks, project_obs, slot_positions
from five_actors.model.ppo import Chunks
from five_actors.model.spec import ModelSpec

TIME_MAJOR = ("obs", "actions", "logp", "values", "rewards", "dones", "starts", "advantages", "returns")
"""Rollout fields shaped [T, B, ...]."""


@dataclass
class Chunk:
    """One T-step chunk of one row: arrays without the B axis, and its bookkeeping."""

    version: int
    arrays: dict[str, np.ndarray]
    masks: dict[str, np.ndarray]
    source: str = ""
    """The GameActor that made it (its fate is reported there: ChunkFates)."""
    uses: int = 0


@dataclass
class Counters:
    """Chunks by fate, for the logs and metrics."""

    received: int = 0
    refused: int = 0
    dropped_stale: int = 0
    evicted_unused: int = 0
    dropped_arch: int = 0
    """Never-used chunks dropped because a surgery changed the architecture and they could not be converted."""
    converted: int = 0
    """Chunks of a replaced architecture converted to the new one (on arrival, or in the buffer at the switch)."""
    trained: int = 0
    """Chunks trained on at least once."""
    consumed: int = 0
    """Chunk uses by optimizer steps (a chunk trained on twice counts twice)."""


@dataclass
class Minibatch:
    """Chunks picked for one step, with their staleness and which were never trained on before."""

    chunks: list[Chunk]
    staleness: list[int]
    fresh: list[bool] = field(default_factory=list)


Converted = tuple[np.ndarray, dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]
"""A chunk's obs, masks, actions, h and c in another architecture's layout."""


def convert_arrays(
    obs: np.ndarray,
    masks: dict[str, np.ndarray],
    actions: np.ndarray,
    h: np.ndarray,
    c: np.ndarray,
    old: ModelSpec,
    new: ModelSpec,
) -> Converted:
    """Chunk arrays of architecture `old` in `new`'s layout: features and action types by name (new ones 0 and
    masked off), entity slots a game-size surgery added read as absent and a pointer head's choices moved to where
    their slots now lie, LSTM state padded with zeros for new units (as the game side does at the switch).

    Exact for the surgery's function-preserving operations: `new` acts on them as `old` did.
    Refused (TrainingError) when `new` lacks something `old` has (surgery never removes)."""
    try:
        obs = project_obs(obs, old.obs, new.obs) if old.obs != new.obs else obs
        if old.actions != new.actions:
            masks = project_masks(masks, old.actions, new.actions, (old.obs, new.obs))
            actions = actions.copy()
            for column, (was, now) in enumerate(zip(old.actions.heads, new.actions.heads, strict=True), start=1):
                if was.size != now.size:
                    actions[..., column] = slot_positions(old.obs, new.obs, now.pointer_blocks)[actions[..., column]]
    except (FiveActorsError, IndexError) as exc:
        raise TrainingError(f"chunks of architecture {old.hash} cannot be converted to {new.hash}: {exc}") from None
    width = new.lstm_size - old.lstm_size
    if width < 0:
        raise TrainingError(f"chunks with an LSTM of {old.lstm_size} cannot be converted to one of {new.lstm_size}")
    pad = [(0, 0)] * (h.ndim - 1) + [(0, width)]
    return obs, masks, actions, np.pad(h, pad), np.pad(c, pad)


def convert_rollout(msg: Rollout, old: ModelSpec, new: ModelSpec) -> Rollout:
    """A checked Rollout of architecture `old` as one of `new` (see convert_arrays)."""
    obs, masks, actions, h, c = convert_arrays(msg.obs, msg.masks, msg.actions, msg.h, msg.c, old, new)
    return dataclasses.replace(msg, arch=new.hash, obs=obs, masks=masks, actions=actions, h=h, c=c)


def check_rollout(msg: Rollout, spec: ModelSpec, chunk_steps: int) -> int:
    """Refuse a Rollout of another architecture or with any misshapen field; returns B."""
    if msg.arch != spec.hash:
        raise TrainingError(f"architecture {msg.arch!r}, the learner's is {spec.hash!r}")
    if not isinstance(msg.obs, np.ndarray) or msg.obs.ndim != 3:
        raise TrainingError(f"obs must be a [T, B, D] array, got {getattr(msg.obs, 'shape', type(msg.obs).__name__)}")
    steps, batch = msg.obs.shape[:2]
    lstm = spec.lstm_size
    expected: dict[str, tuple[tuple[int, ...], str]] = {
        "obs": ((chunk_steps, batch, spec.obs.size), "f"),
        "actions": ((chunk_steps, batch, spec.actions.columns), "i"),
        "dones": ((chunk_steps, batch), "b"),
        "starts": ((chunk_steps, batch), "b"),
        "versions": ((batch,), "i"),
        "h": ((batch, lstm), "f"),
        "c": ((batch, lstm), "f"),
        **{name: ((chunk_steps, batch), "f") for name in ("logp", "values", "rewards", "advantages", "returns")},
    }
    for name, (shape, kind) in expected.items():
        _check_array(name, getattr(msg, name), shape, kind)
    masks = spec.actions.mask_shapes(chunk_steps, batch)
    if not isinstance(msg.masks, dict) or set(msg.masks) != set(masks):
        raise TrainingError(
            f"masks have keys {sorted(msg.masks) if isinstance(msg.masks, dict) else msg.masks!r}, expected "
            f"{sorted(masks)}"
        )
    for name, shape in masks.items():
        _check_array(f"masks[{name!r}]", msg.masks[name], shape, "b")
    for name in ("obs", "logp", "values", "rewards", "advantages", "returns", "h", "c"):
        if not np.isfinite(getattr(msg, name)).all():
            raise TrainingError(f"{name} holds NaN or inf")
    choices = spec.actions.columns - spec.actions.continuous
    if (msg.actions[..., :choices] < 0).any():
        raise TrainingError("actions hold negative choices")
    if not np.isfinite(decode_continuous(msg.actions[..., choices:])).all():
        raise TrainingError("real-valued actions hold NaN or inf")
    return batch


def _check_array(name: str, value: object, shape: tuple[int, ...], kind: str) -> None:
    if not isinstance(value, np.ndarray):
        raise TrainingError(f"{name} must be an array, got {type(value).__name__}")
    if value.shape != shape or value.dtype.kind != kind:
        raise TrainingError(f"{name} is {value.dtype} {value.shape}, expected {_KINDS[kind]} {shape}")


_KINDS = {"f": "float", "i": "int", "b": "bool"}


class ExperienceBuffer:
    """At most `capacity` chunks, oldest first."""

    def __init__(self, capacity: int, chunk_steps: int, window_s: float) -> None:
        self.capacity = capacity
        self.chunk_steps = chunk_steps
        self.window_s = window_s
        self.chunks: deque[Chunk] = deque()
        self.counters = Counters()
        self._produced: deque[tuple[float, int]] = deque()
        self._consumed: deque[tuple[float, int]] = deque()
        self._unreported: defaultdict[str, Counter[str]] = defaultdict(Counter)
        """Fates not yet reported to the chunks' sources, by source."""
        self._lock = threading.Lock()
        self._started = time.monotonic()

    def __len__(self) -> int:
        return len(self.chunks)

    def add(self, msg: Rollout, batch: int, converted: bool = False) -> None:
        """Split a checked Rollout into its B chunks and append them, evicting the oldest when full;
        `converted`: the Rollout was converted from a replaced architecture (counted)."""
        now = time.monotonic()
        with self._lock:
            for b in range(batch):
                arrays = {name: getattr(msg, name)[:, b] for name in TIME_MAJOR}
                arrays["h"], arrays["c"] = msg.h[b], msg.c[b]
                masks = {k: v[:, b] for k, v in msg.masks.items()}
                self.chunks.append(Chunk(int(msg.versions[b]), arrays, masks, msg.source))
                if len(self.chunks) > self.capacity and (oldest := self.chunks.popleft()).uses == 0:
                    self._fate("evicted_unused", [oldest])
            self.counters.received += batch
            self.counters.converted += batch if converted else 0
            self._produced.append((now, batch))

    def convert(self, old: ModelSpec, new: ModelSpec) -> tuple[int, int]:
        """A surgery replaced `old` by `new`: convert every chunk still waiting, drop the used ones (they
        have done their work) or all of them when they cannot be converted.

        Returns (converted, dropped unused)."""
        with self._lock:
            waiting = [c for c in self.chunks if c.uses == 0]
            self.chunks.clear()
            try:
                for chunk in waiting:
                    arrays = chunk.arrays
                    arrays["obs"], chunk.masks, arrays["actions"], arrays["h"], arrays["c"] = convert_arrays(
                        arrays["obs"], chunk.masks, arrays["actions"], arrays["h"], arrays["c"], old, new
                    )
            except TrainingError:
                self._fate("dropped_arch", waiting)
                return 0, len(waiting)
            self.chunks.extend(waiting)
            self.counters.converted += len(waiting)
            return len(waiting), 0

    def accounting(self) -> dict[str, int]:
        """Every chunk that arrived, by fate, read at one instant (refused chunks are not received):
        received == trained + dropped_stale + dropped_arch + evicted_unused + waiting."""
        with self._lock:
            counters = self.counters
            return {
                "chunks_received": counters.received,
                "chunks_refused": counters.refused,
                "chunks_trained": counters.trained,
                "chunks_dropped_stale": counters.dropped_stale,
                "chunks_dropped_arch": counters.dropped_arch,
                "chunks_evicted_unused": counters.evicted_unused,
                "chunks_waiting": sum(1 for c in self.chunks if c.uses == 0),
                "chunks_converted": counters.converted,
                "chunks_consumed": counters.consumed,
            }

    def refused(self, batch: int, source: str) -> None:
        """Count `batch` chunks from `source` refused on arrival."""
        with self._lock:
            self._count("refused", {source: batch})

    def take_fates(self) -> dict[str, dict[str, int]]:
        """The fates met since the last call, by the chunks' source (ChunkFates fields)."""
        with self._lock:
            fates, self._unreported = self._unreported, defaultdict(Counter)
        return {source: dict(counts) for source, counts in fates.items()}

    def _fate(self, name: str, chunks: list[Chunk]) -> None:
        """Count `chunks` into fate `name`; the caller holds the lock."""
        self._count(name, Counter(chunk.source for chunk in chunks))

    def _count(self, name: str, by_source: Mapping[str, int]) -> None:
        """Count chunks into fate `name` (a Counters field) and, by source, into the fates not yet reported; the
        caller holds the lock."""
        setattr(self.counters, name, getattr(self.counters, name) + sum(by_source.values()))
        for source, count in by_source.items():
            self._unreported[source][name] += count

    def reuse(self, now: float | None = None) -> float:
        """Samples consumed / samples produced over the window (inf when consumed with nothing produced)."""
        with self._lock:
            produced, consumed = self._window(now or time.monotonic())
        if produced == 0:
            return 0.0 if consumed == 0 else float("inf")
        return consumed / produced

    def consumed_per_s(self, now: float | None = None) -> float:
        """Samples (chunk steps) consumed per second over the window."""
        now = now or time.monotonic()
        with self._lock:
            consumed = self._window(now)[1]
        return consumed * self.chunk_steps / max(min(self.window_s, now - self._started), 1e-3)

    def _window(self, now: float) -> tuple[int, int]:
        for events in (self._produced, self._consumed):
            while events and events[0][0] < now - self.window_s:
                events.popleft()
        return sum(n for _, n in self._produced), sum(n for _, n in self._consumed)

    def ready(self, count: int, version: int, max_staleness: int, max_reuse: float) -> bool:
        """Drop chunks too stale for `version`; then whether `count` chunks may be taken: enough of them,
        and taking them keeps samples consumed / produced within `max_reuse`."""
        with self._lock:
            stale = [c for c in self.chunks if version - c.version > max_staleness]
            if stale:
                self._fate("dropped_stale", [c for c in stale if c.uses == 0])
                self.chunks = deque(c for c in self.chunks if version - c.version <= max_staleness)
            produced, consumed = self._window(time.monotonic())
            return len(self.chunks) >= count and consumed + count <= max_reuse * produced

    def take(self, count: int, version: int, rng: np.random.Generator) -> Minibatch:
        """Pick the `count` least-used chunks, ties at random (after `ready` said yes; chunks only arrive in between).

        Least-used first, like epochs over a batch: uniform picks left some chunks to be evicted
        unused while others were trained on many times."""
        with self._lock:
            shuffled = rng.permutation(len(self.chunks))
            order = sorted(shuffled, key=lambda i: self.chunks[i].uses)[:count]
            picked = [self.chunks[i] for i in order]
            fresh = [c.uses == 0 for c in picked]
            self._fate("trained", [c for c, new in zip(picked, fresh, strict=True) if new])
            for c in picked:
                c.uses += 1
            self.counters.consumed += count
            self._consumed.append((time.monotonic(), count))
        return Minibatch(picked, [version - c.version for c in picked], fresh)


def to_chunks(chunks: list[Chunk], device: torch.device) -> Chunks:
    """Stack chunks along B into the time-major tensors PPO trains on."""

    def stack(values: list[np.ndarray], axis: int) -> torch.Tensor:
        return torch.from_numpy(np.stack(values, axis=axis)).to(device)

    first = chunks[0]
    return Chunks(
        obs=stack([c.arrays["obs"] for c in chunks], 1),
        masks={k: stack([c.masks[k] for c in chunks], 1) for k in first.masks},
        actions=stack([c.arrays["actions"] for c in chunks], 1),
        logp=stack([c.arrays["logp"] for c in chunks], 1),
        values=stack([c.arrays["values"] for c in chunks], 1),
        rewards=stack([c.arrays["rewards"] for c in chunks], 1),
        dones=stack([c.arrays["dones"] for c in chunks], 1),
        starts=stack([c.arrays["starts"] for c in chunks], 1),
        advantages=stack([c.arrays["advantages"] for c in chunks], 1),
        returns=stack([c.arrays["returns"] for c in chunks], 1),
        state=(stack([c.arrays["h"] for c in chunks], 0), stack([c.arrays["c"] for c in chunks], 0)),
    )
