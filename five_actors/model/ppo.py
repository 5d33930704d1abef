"""PPO with GAE and truncated backprop through 16-step LSTM chunks, top to bottom.

1. A rollout is cut into chunks of `chunk_steps` steps; each chunk keeps the LSTM state its
   rows had before its first step (`Chunks`).
2. Advantages by GAE(gamma, lambda) and value targets = advantages + values (`gae`).
   gamma comes from a horizon in seconds: gamma = 1 - T/H (PPOConfig.gamma).
3. For `epochs` passes, shuffled minibatches of chunks: re-run the policy over each chunk from
   its stored state (a done inside the chunk resets the state), then the loss
   clipped surrogate + value weight * value error - entropy coefficient * entropy,
   with advantages normalised per minibatch and the value head fitting targets standardised
   by their running mean and std (`ValueNorm`, updated with each batch first) (`PPO.loss`).
4. Adam step after clipping each parameter's gradient to `max_grad_norm` on its own, unless the
   minibatch's approximate KL between the policy that acted and this one exceeds `kl_stop`
   (a learner group decides on the ranks' mean): the policy has already moved that far from
   those samples, and another step on them is skipped.
5. After the update, the observation normaliser absorbs the batch's observations, so the
   statistics are fixed while a batch is collected and while it is learned from.

A NaN or inf in the inputs, in any loss term or in a gradient raises ModelError naming it,
and the optimiser step of that minibatch is skipped: no silent corrupt update.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor
from torch.autograd.graph import increment_version

from five_actors.errors import ModelError
from five_actors.model.config import PPOConfig
from five_actors.model.policy import Policy, State
from five_actors.schedule import schedule_value


@dataclass
class Chunks:
    """B chunks of T steps, time-major `[T, B, ...]`, with each chunk's starting LSTM state."""

    obs: Tensor
    masks: dict[str, Tensor]
    actions: Tensor
    logp: Tensor
    """Log-probability of each action under the policy that took it."""
    values: Tensor
    """Value estimates made while acting."""
    rewards: Tensor
    dones: Tensor
    """True where the episode ended with this step's action."""
    starts: Tensor
    """True where this step's observation begins an episode (the LSTM state is reset before it)."""
    advantages: Tensor
    returns: Tensor
    state: State
    """(h, c) `[B, lstm_size]`: the state before each chunk's first step."""

    @property
    def count(self) -> int:
        """Chunks in the batch (B)."""
        return int(self.obs.shape[1])

    def select(self, index: Tensor) -> Chunks:
        """The chunks at `index` (along B)."""
        picked: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "masks":
                picked[f.name] = {k: v[:, index] for k, v in value.items()}
            elif f.name == "state":
                picked[f.name] = (value[0][index], value[1][index])
            else:
                picked[f.name] = value[:, index]
        return Chunks(**picked)


def gae(
    rewards: Tensor, values: Tensor, dones: Tensor, last_value: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimates and value targets for time-major `[T, N]` arrays.

    `last_value` [N] is the value of the observation after the last step; an episode that
    ended at step t (dones[t]) bootstraps from nothing after it.
    """
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(last_value)
    next_value = last_value
    for t in reversed(range(rewards.shape[0])):
        alive = 1.0 - dones[t].to(rewards.dtype)
        delta = rewards[t] + gamma * next_value * alive - values[t]
        running = delta + gamma * lam * alive * running
        advantages[t] = running
        next_value = values[t]
    return advantages, advantages + values


def chunk(rollout: Tensor, chunk_steps: int) -> Tensor:
    """`[L, N, ...]` with L a multiple of chunk_steps -> `[chunk_steps, (L / chunk_steps) * N, ...]`.

    Chunk k of row n lands at column k * N + n, matching `chunk_states`.
    """
    steps, rows = rollout.shape[:2]
    if steps % chunk_steps:
        raise ModelError(f"rollout of {steps} steps does not split into chunks of {chunk_steps}")
    per = steps // chunk_steps
    shaped = rollout.reshape(per, chunk_steps, rows, *rollout.shape[2:])
    return shaped.transpose(0, 1).reshape(chunk_steps, per * rows, *rollout.shape[2:])


class PPO:
    """The optimiser side of PPO for one policy: loss, clipping, Adam, normaliser updates."""

    def __init__(self, policy: Policy, config: PPOConfig) -> None:
        self.policy = policy
        self.config = config
        # Fused: one kernel over all parameters, 0.35 ms a step against 1.5 for torch's default (a tensor op per
        # parameter list and stage), of the default's 35 ms step on a 1,024-row minibatch.
        self.optimizer = torch.optim.Adam(
            policy.parameters(),
            lr=schedule_value(config.learning_rate, 0),
            betas=(config.adam_beta1, config.adam_beta2),
            eps=config.adam_eps,
            fused=True,
        )
        self.optimizer.register_load_state_dict_post_hook(_fused_again)
        self.optimizer.register_step_post_hook(_mark_written)
        self.learning_rate = schedule_value(config.learning_rate, 0)
        self.entropy_coef = schedule_value(config.entropy_coef, 0)
        self.updates = 0
        """Optimiser steps taken (one per minibatch)."""

    def follow_version(self, version: int, lr_scale: float = 1.0) -> None:
        """Take the learning rate (times `lr_scale`) and entropy coefficient of parameter version `version`."""
        self.learning_rate = schedule_value(self.config.learning_rate, version) * lr_scale
        self.entropy_coef = schedule_value(self.config.entropy_coef, version)
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate

    def total_loss(self, terms: Mapping[str, Tensor]) -> Tensor:
        """Clipped surrogate + value weight * value error - entropy coefficient * entropy."""
        return terms["policy"] + self.config.value_loss_weight * terms["value"] - self.entropy_coef * terms["entropy"]

    def update(self, batch: Chunks, epochs: int, minibatches: int) -> dict[str, float]:
        """`epochs` passes of `minibatches` steps each over `batch`; returns the mean of each statistic."""
        self._check_batch(batch)
        self.policy.value_norm.update(batch.returns)
        per_minibatch = max(1, batch.count // minibatches)
        totals: dict[str, float] = {}
        steps = 0
        for _ in range(epochs):
            order = torch.randperm(batch.count, device=batch.obs.device)
            for first in range(0, batch.count, per_minibatch):
                stats = self.step(batch.select(order[first : first + per_minibatch]))
                for k, v in stats.items():
                    totals[k] = totals.get(k, 0.0) + v
                steps += 1
        self.policy.update_normalizer(batch.obs)
        return {k: v / steps for k, v in totals.items()}

    def step(
        self, minibatch: Chunks, reduce_gradients: Callable[[bool, float], tuple[bool, float]] | None = None
    ) -> dict[str, float]:
        """One gradient step on one minibatch of chunks: loss, backward, clipping, Adam.

        `reduce_gradients(finite, kl)`, when given, runs between the backward pass and clipping on every
        call, whether this loss was finite or not (every gradient then exists, zero where the loss
        was not finite): a learner group averages its gradients there, and it answers whether every
        rank's loss was finite and the ranks' mean approximate KL. Raises ModelError, with no step taken,
        when a loss term or gradient is not finite (here or, by the answer, on a peer). When `kl_stop` is set
        and the (mean) approximate KL between the acting policy and this one exceeds it, no step is taken
        either, and the statistics say `kl_stopped` = 1.
        """
        terms, stats = self.loss(minibatch)
        bad = next((name for name, value in terms.items() if not torch.isfinite(value)), None)
        self.optimizer.zero_grad(set_to_none=reduce_gradients is None)
        if bad is None:
            self.total_loss(terms).backward()
        kl = stats["approx_kl"]
        if reduce_gradients is not None:
            finite, kl = reduce_gradients(bad is None, kl)
            if not finite and bad is None:
                raise ModelError("a loss term is not finite on a peer: update skipped")
        if bad is not None:
            raise ModelError(f"loss term {bad!r} is {terms[bad].item()}: update skipped")
        stats["grad_norm"] = self._clip_gradients()
        stats["kl_stopped"] = float(0.0 < self.config.kl_stop < kl)
        if stats["kl_stopped"]:
            self.optimizer.zero_grad(set_to_none=True)
            return stats
        self.optimizer.step()
        self.updates += 1
        return stats

    def loss(self, mb: Chunks) -> tuple[dict[str, Tensor], dict[str, float]]:
        """The three loss terms (policy, value, entropy) and diagnostics for one minibatch."""
        logp, entropy, values = self.policy.evaluate(mb.obs, mb.masks, mb.actions, mb.starts, mb.state)
        advantages = mb.advantages
        if self.config.normalize_advantages and advantages.numel() > 1:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        log_ratio = logp - mb.logp
        ratio = log_ratio.exp()
        clipped = ratio.clamp(1.0 - self.config.clip, 1.0 + self.config.clip)
        policy_loss = -torch.minimum(ratio * advantages, clipped * advantages).mean()
        value_loss = 0.5 * (values - self.policy.value_norm.normalize(mb.returns)).square().mean()
        mean_entropy = entropy.mean()
        with torch.no_grad():
            stats = {
                "policy_loss": policy_loss.item(),
                "value_loss": value_loss.item(),
                "entropy": mean_entropy.item(),
                "approx_kl": ((ratio - 1.0) - log_ratio).mean().item(),
                "clip_fraction": ((ratio - 1.0).abs() > self.config.clip).float().mean().item(),
            }
        return {"policy": policy_loss, "value": value_loss, "entropy": mean_entropy}, stats

    def _clip_gradients(self) -> float:
        """Clip each parameter's gradient to max_grad_norm; refuse non-finite gradients. Returns the total norm."""
        named = [(name, p.grad) for name, p in self.policy.named_parameters() if p.grad is not None]
        norms = torch.stack([torch.linalg.vector_norm(g) for _, g in named])
        finite = torch.isfinite(norms)
        if not finite.all():
            self.optimizer.zero_grad(set_to_none=True)
            raise ModelError(
                f"gradient of parameter {named[int((~finite).nonzero()[0])][0]!r} is not finite: update skipped"
            )
        scales = torch.clamp(self.config.max_grad_norm / (norms + 1e-6), max=1.0)
        for (_, grad), scale in zip(named, scales):
            grad.mul_(scale)
        return float(torch.linalg.vector_norm(norms))

    def _check_batch(self, batch: Chunks) -> None:
        """Refuse a batch whose observations, masks or float fields are malformed or not finite."""
        steps, count = batch.obs.shape[:2]
        self.policy.check_obs(batch.obs.reshape(steps * count, -1))
        self.policy.check_masks(_flatten(batch.masks), steps * count)
        for name in ("rewards", "values", "logp", "advantages", "returns"):
            value = getattr(batch, name)
            if not torch.isfinite(value).all():
                raise ModelError(f"{name} of the batch hold NaN or inf: update skipped")


def _fused_again(optimizer: torch.optim.Optimizer) -> None:
    """A loaded optimiser state brings the saving optimiser's settings, and one saved unfused (a checkpoint from before,
    the parameter store's) would leave this one stepping unfused."""
    for group in optimizer.param_groups:
        group["fused"], group["foreach"] = True, None


def _mark_written(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    """The fused step writes the parameters without bumping their version counters, by which acting's kept lowered
    weights (policy.lowered) learn that they changed: the synchronous baseline acts and trains one policy."""
    increment_version([p for group in optimizer.param_groups for p in group["params"]])


def _flatten(masks: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {k: v.reshape(v.shape[0] * v.shape[1], *v.shape[2:]) for k, v in masks.items()}
