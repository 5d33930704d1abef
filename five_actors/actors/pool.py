"""The past-opponent pool of self-play (PAPER.md "Self-play"; appendix N of the paper).

Version i is sampled with probability p_i = exp(q_i) / sum_j exp(q_j). A new version joins
with q = the pool's largest q (0 for the first), so it is as likely as the best. When the
current agent beats version i, q_i <- q_i - eta / (N p_i): versions it beats often fade, the
ones it still loses to stay likely.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from five_actors.errors import TrainingError


class OpponentPool:
    """Past versions with their quality scores q, in the order they joined."""

    def __init__(self, eta: float) -> None:
        if not eta > 0:
            raise ValueError(f"eta must be positive, got {eta}")
        self.eta = eta
        self.quality: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self.quality)

    def __contains__(self, version: object) -> bool:
        return version in self.quality

    @property
    def versions(self) -> list[int]:
        return list(self.quality)

    def add(self, version: int) -> float:
        """Add `version` with q = max q of the pool (0 when empty); returns its q."""
        if version in self.quality:
            raise TrainingError(f"version {version} is already in the opponent pool")
        q = max(self.quality.values(), default=0.0)
        self.quality[version] = q
        return q

    def evict(self) -> int:
        """Remove the member least likely to be sampled (the lowest q; the oldest of equals); returns it."""
        if not self.quality:
            raise TrainingError("the opponent pool is empty: nothing to evict")
        lowest = min(self.quality, key=lambda v: (self.quality[v], v))
        del self.quality[lowest]
        return lowest

    def probabilities(self) -> dict[int, float]:
        """p_i for every member (softmax of q)."""
        if not self.quality:
            return {}
        q = np.array(list(self.quality.values()))
        weights = np.exp(q - q.max())
        return dict(zip(self.quality, (weights / weights.sum()).tolist(), strict=True))

    def sample(self, rng: np.random.Generator) -> int:
        """A version drawn with p_i proportional to exp(q_i), or -1 when the pool is empty."""
        if not self.quality:
            return -1
        probs = self.probabilities()
        return int(rng.choice(list(probs), p=list(probs.values())))

    def record_win(self, version: int) -> bool:
        """The current agent beat `version`: q_i -= eta / (N p_i). False when `version` is not in the pool."""
        if version not in self.quality:
            return False
        p = self.probabilities()[version]
        self.quality[version] -= self.eta / (len(self.quality) * p)
        return True

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: {"eta": ..., "members": [[version, q], ...]}."""
        return {"eta": self.eta, "members": [[v, q] for v, q in self.quality.items()]}

    @classmethod
    def from_dict(cls, data: dict[str, Any], eta: float) -> OpponentPool:
        """Rebuild from `to_dict` output (with this run's eta); a malformed file is a TrainingError."""
        pool = cls(eta)
        try:
            for version, q in data["members"]:
                pool.quality[int(version)] = float(q)
        except (KeyError, TypeError, ValueError) as exc:
            raise TrainingError(f"malformed opponent pool: {type(exc).__name__}: {exc}") from None
        return pool
