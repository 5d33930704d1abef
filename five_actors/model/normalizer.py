"""Running mean and variance of observation features, kept as model buffers (checkpointed with it)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from five_actors.model.kept import kept

CLIP = 5.0
"""Normalised features are clipped to +-CLIP, as in OpenAI Five."""


class RunningNorm(nn.Module):
    """Per-feature running statistics of one entity block, shared by all its slots.

    Statistics are float64 so that millions of updates do not drift; `update` merges a batch
    by the parallel-variance formula (Chan et al.), so the order of batches does not matter.
    """

    count: Tensor
    mean: Tensor
    var: Tensor

    def __init__(self, width: int, eps: float = 1e-8) -> None:
        super().__init__()
        self.eps = eps
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean", torch.zeros(width, dtype=torch.float64))
        self.register_buffer("var", torch.ones(width, dtype=torch.float64))

    def forward(self, x: Tensor) -> Tensor:
        """`x` [..., width] standardised by the running statistics and clipped to +-5."""
        mean, std = kept(self, (self.mean, self.var), lambda: self._moments(x.dtype), tag=x.dtype)
        return torch.clamp((x - mean) / std, -CLIP, CLIP)

    def _moments(self, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """The mean and standard deviation in `dtype`: worked out once per change of the statistics, not per batch
        (six small ops for each block, each call)."""
        return self.mean.to(dtype), torch.sqrt(self.var + self.eps).to(dtype)

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """Merge the rows of `x` [n, width] into the statistics (an empty batch changes nothing)."""
        n = x.shape[0]
        if n == 0:
            return
        x = x.to(torch.float64)
        batch_mean = x.mean(0)
        batch_var = x.var(0, unbiased=False)
        total = self.count + n
        delta = batch_mean - self.mean
        m2 = self.var * self.count + batch_var * n + delta.square() * self.count * n / total
        self.mean += delta * n / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)


class ValueNorm(nn.Module):
    """Running mean and std of value targets: the value head learns targets in these units.

    Without it, returns in the tens or hundreds make the value loss's gradients swamp the
    policy's in the shared trunk, and the policy barely learns.
    """

    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.stats = RunningNorm(1)

    @property
    def std(self) -> Tensor:
        """The running standard deviation of value targets."""
        return torch.sqrt(self.stats.var + self.eps)

    def normalize(self, x: Tensor) -> Tensor:
        """Targets in the value head's units."""
        return ((x - self.stats.mean) / self.std).to(x.dtype)

    def denormalize(self, x: Tensor) -> Tensor:
        """Value head outputs in reward units."""
        return (x * self.std + self.stats.mean).to(x.dtype)

    def update(self, targets: Tensor) -> None:
        """Fold a batch of value targets (any shape) into the statistics."""
        self.stats.update(targets.reshape(-1, 1))
