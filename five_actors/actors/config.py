"""The `[training]` config section: the settings the five actors share."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainingConfig:
    """How the five actors play, batch and train (DESIGN.md "The five actors and one training step")."""

    games_per_actor: int = 4
    """Lane games each GameActor steps as one batch."""
    rollout_chunk_steps: int = 16
    """Steps T per rollout chunk (and per BPTT segment on the learner)."""
    gae_window: int = 16
    """Steps after a chunk that GAE looks ahead before bootstrapping from the value there."""
    past_opponent_share: float = 0.2
    """Share of games whose team 1 plays a past version from the opponent pool (paper: 20%)."""
    inference_batch_rows: int = 256
    """An InferenceActor runs a forward pass once this many rows are waiting..."""
    inference_deadline_ms: float = 2.0
    """...or once the oldest waiting request is this old."""
    inference_cache_versions: int = 4
    """Past policy versions an InferenceActor keeps in memory (LRU) for opponent rows."""
    infer_timeout_s: float = 10.0
    """How long a GameActor waits for an InferReply before retrying (the steps are counted lost)."""

    def __post_init__(self) -> None:
        for name in ("games_per_actor", "rollout_chunk_steps", "inference_batch_rows", "inference_cache_versions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.gae_window < 0:
            raise ValueError(f"gae_window must be >= 0, got {self.gae_window}")
        if not 0.0 <= self.past_opponent_share <= 1.0:
            raise ValueError(f"past_opponent_share must be within [0, 1], got {self.past_opponent_share}")
        if self.inference_deadline_ms < 0:
            raise ValueError(f"inference_deadline_ms must be >= 0, got {self.inference_deadline_ms}")
        if self.infer_timeout_s <= 0:
            raise ValueError(f"infer_timeout_s must be > 0, got {self.infer_timeout_s}")
