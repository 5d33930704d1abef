"""The observation and action layout shared by every environment and the model.

An environment is stepped as one batch of *rows*: one row per controlled agent (for the lane
game, every hero of both teams of every game; row = game * teams * heroes + team * heroes + hero).

Observations are one float32 array `[rows, ObsSpec.size]`. The row is a concatenation of
entity blocks; block `b` holds `b.slots` entities of `len(b.features)` features each, slot-major.
The first feature of every block with more than one slot is `present` (1.0 when the slot
holds a visible entity, else 0.0, and the slot's other features are 0.0): the model pools
over present slots only.

Actions are one int64 array `[rows, ActionSpec.columns]`: column 0 is the action type, column
1 + h the choice of secondary head h (ignored when the type does not use that head), and after
them the `ActionSpec.continuous` real values of a Gaussian head, each the bits of a float64.
Masks are a dict of bool arrays: `masks["type"]` is `[rows, n_types]`; for each secondary head
`masks[head.name]` is `[rows, n_types, head.size]`, the legal choices of that head given each
type. A pointer head chooses among the slots of its `pointer_blocks`, in block order.

Versions: a feature belongs to a game version; a newer version only appends features to the
end of a block, so a model trained on an older layout can be carried across by surgery.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from five_actors.errors import GameError


@dataclass(frozen=True)
class EntityBlock:
    """A block of `slots` entities, each described by the named features in order."""

    name: str
    slots: int
    features: tuple[str, ...]

    @property
    def width(self) -> int:
        return len(self.features)

    @property
    def size(self) -> int:
        return self.slots * self.width


@dataclass(frozen=True)
class ObsSpec:
    """The observation layout: named entity blocks, concatenated in order."""

    blocks: tuple[EntityBlock, ...]
    version: int = 1

    @property
    def size(self) -> int:
        return sum(b.size for b in self.blocks)

    def block(self, name: str) -> EntityBlock:
        for b in self.blocks:
            if b.name == name:
                return b
        raise KeyError(f"no entity block {name!r} (blocks: {[b.name for b in self.blocks]})")

    def offset(self, name: str) -> int:
        start = 0
        for b in self.blocks:
            if b.name == name:
                return start
            start += b.size
        raise KeyError(f"no entity block {name!r} (blocks: {[b.name for b in self.blocks]})")

    def split(self, obs: Any) -> dict[str, Any]:
        """Views of a `[..., size]` array (numpy or torch) as `{block: [..., slots, width]}`."""
        out, start = {}, 0
        for b in self.blocks:
            out[b.name] = obs[..., start : start + b.size].reshape(*obs.shape[:-1], b.slots, b.width)
            start += b.size
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"version": self.version, "blocks": [[b.name, b.slots, list(b.features)] for b in self.blocks]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ObsSpec:
        return cls(tuple(EntityBlock(n, int(s), tuple(f)) for n, s, f in data["blocks"]), int(data["version"]))


@dataclass(frozen=True)
class ActionHead:
    """A secondary action head: `size` choices, or a pointer over the slots of `pointer_blocks`."""

    name: str
    size: int
    pointer_blocks: tuple[str, ...] = ()


@dataclass(frozen=True)
class ActionSpec:
    """The action layout: a primary type head, secondary heads, and which types use which heads."""

    types: tuple[str, ...]
    heads: tuple[ActionHead, ...] = ()
    uses: tuple[tuple[bool, ...], ...] = field(default=())
    """uses[type][head]: whether an action of that type uses that secondary head."""
    continuous: int = 0
    """Real-valued dimensions (a Gaussian head, used by every type), in the columns after the secondary heads'; a value
    rides in its int64 column as the bits of a float64 (encode_continuous, decode_continuous)."""

    def __post_init__(self) -> None:
        if not self.uses:
            object.__setattr__(self, "uses", tuple(tuple(True for _ in self.heads) for _ in self.types))
        if len(self.uses) != len(self.types) or any(len(u) != len(self.heads) for u in self.uses):
            raise ValueError("ActionSpec.uses must be [len(types)][len(heads)]")

    @property
    def columns(self) -> int:
        return 1 + len(self.heads) + self.continuous

    def mask_shapes(self, *lead: int) -> dict[str, tuple[int, ...]]:
        """The shape of every mask after the leading axes `lead` (rows, or steps and rows): `type` one flag per
        type, a secondary head one row of its choices per type."""
        return {"type": (*lead, len(self.types)), **{h.name: (*lead, len(self.types), h.size) for h in self.heads}}

    def uses_array(self) -> np.ndarray:
        return np.array(self.uses, dtype=bool).reshape(len(self.types), len(self.heads))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description; without continuous dimensions it is what it was before they existed, so the
        hashes of those architectures are unchanged."""
        return {
            "types": list(self.types),
            "heads": [[h.name, h.size, list(h.pointer_blocks)] for h in self.heads],
            "uses": [list(u) for u in self.uses],
            **({"continuous": self.continuous} if self.continuous else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ActionSpec:
        heads = tuple(ActionHead(n, int(s), tuple(p)) for n, s, p in data["heads"])
        uses = tuple(tuple(bool(x) for x in u) for u in data["uses"])
        return cls(tuple(data["types"]), heads, uses, int(data.get("continuous", 0)))


def encode_continuous(values: np.ndarray) -> np.ndarray:
    """Real action values `[..., d]` as the int64 action columns that carry them (the bits of their float64)."""
    return np.ascontiguousarray(values, dtype=np.float64).view(np.int64)


def decode_continuous(columns: np.ndarray) -> np.ndarray:
    """The real values `[..., d]` that int64 action columns carry (encode_continuous's inverse)."""
    return np.ascontiguousarray(columns, dtype=np.int64).view(np.float64)


@dataclass
class Step:
    """What one batch step returns. Arrays are indexed by row."""

    obs: np.ndarray
    """float32 [rows, obs_spec.size], after auto-reset for rows whose game ended."""
    masks: dict[str, np.ndarray]
    """bool masks as described in the module docstring, for `obs`."""
    rewards: np.ndarray
    """float32 [rows], the shaped reward for the action just taken."""
    dones: np.ndarray
    """bool [rows], true where the game ended with this step (obs is then the next game's first)."""
    infos: dict[str, np.ndarray] = field(default_factory=dict)
    """per-row arrays: each reward component, and per-game facts such as `win` on done rows."""


class BatchEnv(Protocol):
    """A batch of games stepped together; the lane game and the gymnasium adapter both are one."""

    obs_spec: ObsSpec
    action_spec: ActionSpec
    teams: int
    """Sides per game (2 for the lane game, 1 for an external gymnasium or PettingZoo env)."""
    agents_per_team: int
    num_games: int

    @property
    def num_rows(self) -> int: ...

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]: ...

    def step(self, actions: np.ndarray) -> Step: ...


def project_obs(obs: np.ndarray, source: ObsSpec, target: ObsSpec) -> np.ndarray:
    """Observations `[..., source.size]` in `target`'s layout, by feature name; features `source` lacks are 0
    (how a model reads another game version's observations: after add-observation, or in an annealed-in game), and so
    are the slots after the source's in a block that has more of them in `target` (absent entities: after
    game-size)."""
    index = np.full(target.size, -1, dtype=np.int64)
    at = 0
    for block in target.blocks:
        try:
            have = source.block(block.name)
        except KeyError:
            raise GameError(f"the source layout has no entity block {block.name!r}") from None
        if have.slots > block.slots:
            raise GameError(
                f"block {block.name!r} has {have.slots} slots in the source layout, only {block.slots} in the target"
            )
        start = source.offset(block.name)
        for slot in range(have.slots):
            for f, feature in enumerate(block.features):
                if feature in have.features:
                    index[at + slot * block.width + f] = start + slot * have.width + have.features.index(feature)
        at += block.size
    out = obs[..., np.maximum(index, 0)]
    out[..., index < 0] = 0.0
    return out


def slot_positions(source: ObsSpec, target: ObsSpec, blocks: tuple[str, ...]) -> np.ndarray:
    """Where each choice of a pointer head over `blocks` in `source`'s layout lies among its choices in `target`'s
    (a block's slots keep their order; `target` may have more of them: project_obs)."""
    positions: list[int] = []
    at = 0
    for name in blocks:
        have, slots = source.block(name).slots, target.block(name).slots
        if have > slots:
            raise GameError(f"block {name!r} has {have} slots in the source layout, only {slots} in the target")
        positions.extend(range(at, at + have))
        at += slots
    return np.array(positions, dtype=np.int64)


def project_masks(
    masks: Mapping[str, np.ndarray],
    source: ActionSpec,
    target: ActionSpec,
    obs: tuple[ObsSpec, ObsSpec] | None = None,
) -> dict[str, np.ndarray]:
    """Masks in `target`'s action layout, by type name; types `source` lacks are masked off. With the two observation
    layouts `obs` (source's, target's), a pointer head may have more choices in `target` (more slots): the new ones
    are masked off. Without, every head must keep its size: actions chosen in the source layout would point
    elsewhere in the target's."""
    grows = {t.name: t for s, t in zip(source.heads, target.heads, strict=False) if s.size != t.size}
    same = [(h.name, h.pointer_blocks) for h in source.heads] == [(h.name, h.pointer_blocks) for h in target.heads]
    if not same or (grows and (obs is None or not all(h.pointer_blocks for h in grows.values()))):
        raise GameError("the source layout's action heads differ from the target's")
    index = np.array([source.types.index(t) if t in source.types else -1 for t in target.types])
    known = index >= 0
    out = {}
    for name, mask in masks.items():
        axis = mask.ndim - 1 if name == "type" else mask.ndim - 2
        picked = np.take(mask, np.maximum(index, 0), axis=axis)
        shape = [1] * mask.ndim
        shape[axis] = len(index)
        out[name] = picked & known.reshape(shape)
        if name in grows and obs is not None:
            grown = np.zeros((*out[name].shape[:-1], grows[name].size), dtype=bool)
            grown[..., slot_positions(*obs, grows[name].pointer_blocks)] = out[name]
            out[name] = grown
    return out
