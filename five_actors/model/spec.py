"""ModelSpec: everything that fixes the policy's parameter shapes, and nothing else.

Two policies with equal specs have interchangeable state dicts. Surgery produces a new spec
(a wider LSTM, more observation features, more action types) and the hash names the
architecture version in checkpoints and parameter messages.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

import orjson

from five_actors.errors import ModelError
from five_actors.game.layout import ActionSpec, ObsSpec
from five_actors.model.config import WIDTHS, ModelConfig

SPEC_FORMAT = 1


@dataclass(frozen=True)
class ModelSpec:
    """The observation and action layouts plus every width of the network."""

    obs: ObsSpec
    actions: ActionSpec
    entity_hidden: int
    entity_embed: int
    core_input: int
    lstm_size: int
    pointer_key: int
    """The widths (WIDTHS): what each means, and its default, is in ModelConfig."""
    core: str = "lstm"
    """"lstm" or "mlp" (five_actors.model.config.ModelConfig.core)."""

    def __post_init__(self) -> None:
        if not self.obs.blocks:
            raise ModelError("the observation spec has no entity blocks")
        if not self.actions.types:
            raise ModelError("the action spec has no action types")
        if self.core not in ("lstm", "mlp"):
            raise ModelError(f"core must be 'lstm' or 'mlp', got {self.core!r}")
        names = [b.name for b in self.obs.blocks]
        for head in self.actions.heads:
            if head.name == "type":
                raise ModelError(
                    "a secondary action head may not be called 'type' (that name is the primary head's mask)"
                )
            if not head.pointer_blocks:
                continue
            for block in head.pointer_blocks:
                if block not in names:
                    raise ModelError(f"pointer head {head.name!r} points at unknown block {block!r} (blocks: {names})")
            slots = sum(self.obs.block(b).slots for b in head.pointer_blocks)
            if slots != head.size:
                raise ModelError(f"pointer head {head.name!r} has size {head.size} but its blocks hold {slots} slots")

    @classmethod
    def build(cls, obs: ObsSpec, actions: ActionSpec, config: ModelConfig) -> ModelSpec:
        """The spec for an environment's layouts with the widths from `config`."""
        return cls(obs, actions, **{name: getattr(config, name) for name in WIDTHS}, core=config.core)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description; `from_dict` inverts it exactly. An LSTM core is not written, so
        the specs (and hashes) of runs from before the MLP core are unchanged."""
        core = {} if self.core == "lstm" else {"core": self.core}
        return {
            **core,
            "format": SPEC_FORMAT,
            "obs": self.obs.to_dict(),
            "actions": self.actions.to_dict(),
            **{name: getattr(self, name) for name in WIDTHS},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelSpec:
        """Rebuild a spec from `to_dict` output; a missing or wrong field is a ModelError."""
        try:
            if data["format"] != SPEC_FORMAT:
                raise ModelError(f"model spec format {data['format']!r} is not supported (expected {SPEC_FORMAT})")
            widths = {name: int(data[name]) for name in WIDTHS}
            return cls(
                ObsSpec.from_dict(data["obs"]),
                ActionSpec.from_dict(data["actions"]),
                **widths,
                core=str(data.get("core", "lstm")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"malformed model spec: {type(exc).__name__}: {exc}") from None

    def to_json(self) -> bytes:
        """Canonical JSON (sorted keys): equal specs give equal bytes."""
        return orjson.dumps(self.to_dict(), option=orjson.OPT_SORT_KEYS)

    @property
    def hash(self) -> str:
        """A stable 16-hex-digit name of this architecture (sha256 of the canonical JSON)."""
        return hashlib.sha256(self.to_json()).hexdigest()[:16]

    def with_widths(self, **widths: int) -> ModelSpec:
        """The same layouts with some widths changed (what a widening surgery produces)."""
        return replace(self, **widths)  # type: ignore[arg-type]  # widths name only the int fields
