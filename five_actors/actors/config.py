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
    buffer_chunks: int = 256
    """Rollout chunks each LearnerActor keeps; the oldest is dropped when a new one arrives."""
    minibatch_chunks: int = 16
    """Chunks per learner minibatch (one optimizer step each; paper: 120 per GPU)."""
    publish_every: int = 4
    """Optimizer steps between parameter versions published by learner rank 0 (paper: 32)."""
    max_staleness: int = 8
    """Chunks made by a version more than this many versions behind the learner's are dropped (counted)."""
    max_sample_reuse: float = 2.0
    """Learners wait for fresh chunks while samples consumed / samples produced is at or above this."""
    reuse_window_s: float = 30.0
    """Seconds over which sample reuse (consumed / produced) is measured."""
    allreduce_timeout_s: float = 60.0
    """How long a learner waits on its peers in a collective before failing (its group then restarts)."""
    checkpoint_every: int = 10
    """The ParamServer checkpoints every this many versions (and on shutdown)."""
    keep_checkpoints: int = 3
    """Latest checkpoints kept on disk; opponent-pool members' checkpoints are kept too."""
    pool_add_every: int = 10
    """Every this many versions, the latest joins the opponent pool with q = the pool's max (paper: 10)."""
    pool_eta: float = 0.01
    """Step size of the opponent-pool quality update q_i -= eta / (N p_i) (paper: 0.01)."""
    seed: int = 0
    """Seed of the initial parameters (version 0) and of the opponent sampling."""

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
        for name in ("buffer_chunks", "minibatch_chunks", "publish_every", "checkpoint_every", "keep_checkpoints", "pool_add_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.minibatch_chunks > self.buffer_chunks:
            raise ValueError(f"minibatch_chunks ({self.minibatch_chunks}) must not exceed buffer_chunks ({self.buffer_chunks})")
        if self.max_staleness < 0:
            raise ValueError(f"max_staleness must be >= 0, got {self.max_staleness}")
        for name in ("max_sample_reuse", "reuse_window_s", "allreduce_timeout_s", "pool_eta"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.infer_timeout_s <= 0:
            raise ValueError(f"infer_timeout_s must be > 0, got {self.infer_timeout_s}")
