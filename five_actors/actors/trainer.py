"""GroupTrainer: one rank's share of the learners' lockstep PPO, on the learner's torch thread.

The LearnerActor (five_actors.actors.learner) admits chunks into the ExperienceBuffer, decides
architectures and publishes; everything here runs on its TorchThread. Each round:
1. every rank says whether it is ready (enough chunks, sample reuse under `max_sample_reuse`),
   whether it is staying and whether it heard of a new architecture; one allreduce of those
   flags decides for all, so all ranks take the same number of steps, switch architecture in the
   same round, and leave the group together when one stops;
2. rank 0 folds the minibatch's fresh chunks into the value normaliser and broadcasts it;
3. loss from five_actors.model.ppo; backward; gradients summed by one allreduce over a flat
   buffer (plus a flag per rank whose loss was finite, and its approximate KL) and divided by N;
   PPO's per-parameter clipping; Adam, unless the ranks' mean KL exceeds ppo.kl_stop;
4. rank 0 folds the fresh observations into the observation normaliser and broadcasts it;
   the learning rate and entropy coefficient follow their schedules over versions (ppo.*), the
   rate held at 0 for `surgery_lr_hold_steps` after an architecture switch;
5. every `publish_every` steps the version advances; rank 0's round hands back the parameters to
   publish (with Adam's moments every `checkpoint_every` versions).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from five_actors.actors.buffer import ExperienceBuffer, Minibatch, to_chunks
from five_actors.actors.group import average_gradients, broadcast_buffers, join_group, leave_group
from five_actors.actors.params import load_optimizer, load_state, optimizer_arrays, state_arrays
from five_actors.config import Config
from five_actors.errors import ModelError
from five_actors.model.policy import Policy
from five_actors.model.ppo import PPO
from five_actors.model.spec import ModelSpec

Publish = tuple[int, dict[str, np.ndarray], dict[str, np.ndarray] | None]
"""(version, parameters, Adam's moments or None): what rank 0 sends the ParamServer."""


class GroupTrainer:
    """Rank `rank` of `world_size`: the policy, its PPO optimizer and the step counters (see the module
    docstring). Every method but the constructor runs on the torch thread."""

    def __init__(
        self, rank: int, world_size: int, device: torch.device, config: Config, buffer: ExperienceBuffer, log: Any
    ) -> None:
        self.rank, self.world_size, self.device = rank, world_size, device
        self.config, self.training = config, config.training
        self.buffer = buffer
        self.log = log
        self.rng = np.random.default_rng(self.training.seed + 7919 * (rank + 1))
        self.version = 0
        self.steps = 0
        self.base_steps = 0
        """Learner steps the group had taken before this one started (from the ParamServer)."""
        self.skipped = 0
        self.kl_stopped = 0
        """Steps not taken because the minibatch's approximate KL exceeded ppo.kl_stop."""
        self.busy_s = 0.0
        """Seconds spent in optimizer steps (allreduce included)."""
        self.allreduce_s = 0.0
        """Seconds spent averaging gradients across the ranks."""
        self.allreduce_ms = 0.0
        """Milliseconds the latest step's allreduce took."""
        self.last: dict[str, float] = {}
        """The latest step's losses and counters."""
        self.hold_until = 0
        """Steps before which the learning rate is held at 0 (after a surgery: training.surgery_lr_hold_steps)."""
        self.grouped = False

    def join(self, host: str, port: int) -> None:
        join_group(host, port, self.rank, self.world_size, self.device, self.training.allreduce_timeout_s)
        self.grouped = True

    def leave(self) -> None:
        leave_group()
        self.grouped = False

    def final_round(self) -> None:
        """Meet the peers' next round saying "not staying", so theirs stops too, and leave the group."""
        if not self.grouped:
            return
        flags = torch.zeros(3, device=self.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        self.leave()

    def load(self, spec: ModelSpec, start: dict[str, Any], surgery: bool = False) -> None:
        """Build the policy and Adam from a starting point (slow). After a surgery the learning rate is held at 0
        until Adam's moments for the new weights settle."""
        self.policy = Policy(spec, self.config.model.precision).to(self.device)
        self.ppo = PPO(self.policy, self.config.ppo)
        load_state(self.policy, start["state"])
        if start["optimizer"]:
            load_optimizer(self.ppo.optimizer, start["optimizer"])
        self.version, self.base_steps = start["version"], start["learner_steps"] - self.steps
        if surgery:
            self.hold_until = self.steps + self.training.surgery_lr_hold_steps

    def snapshot(self, with_optimizer: bool = True) -> Publish:
        return (
            self.version,
            state_arrays(self.policy),
            optimizer_arrays(self.ppo.optimizer) if with_optimizer else None,
        )

    def round(self, switch: bool) -> dict[str, Any] | None:
        """One lockstep round: None when not every rank was ready, else {"stop"}, {"switch"} or the step's
        {"stats"} (and {"publish"} on rank 0 when the version advanced). `switch`: this rank heard of a new
        architecture."""
        t = self.training
        ready = self.buffer.ready(t.minibatch_chunks, self.version, t.max_staleness, t.max_sample_reuse)
        if self.world_size > 1:
            flags = torch.tensor([float(ready), 1.0, -float(switch)], device=self.device)  # ready, staying, -switching
            dist.all_reduce(flags, op=dist.ReduceOp.MIN)
            if flags[1].item() < 1.0:
                self.leave()
                return {"stop": True}
            ready, switch = flags[0].item() == 1.0, flags[2].item() < 0.0
        if switch:
            return {"switch": True}
        if not ready:
            return None
        minibatch = self.buffer.take(t.minibatch_chunks, self.version, self.rng)
        started = time.perf_counter()
        stats = self._step(minibatch)
        self.steps += 1
        seconds = time.perf_counter() - started
        self.busy_s += seconds
        self.allreduce_s += stats["allreduce_ms"] / 1e3
        staleness = minibatch.staleness
        stats.update(
            step=self.base_steps + self.steps,
            version=self.version,
            staleness_mean=float(np.mean(staleness)),
            staleness_max=float(np.max(staleness)),
            step_ms=round(seconds * 1e3, 3),
        )
        self.last = stats
        result: dict[str, Any] = {"stats": stats}
        if self.steps % t.publish_every == 0:
            self.version += 1
            if self.rank == 0:
                result["publish"] = self.snapshot(with_optimizer=self.version % t.checkpoint_every == 0)
        return result

    def _step(self, minibatch: Minibatch) -> dict[str, float]:
        """Normaliser updates, loss, averaged gradients, clipping, Adam: one optimizer step."""
        batch = to_chunks(minibatch.chunks, self.device)
        fresh = torch.as_tensor(minibatch.fresh, device=self.device)
        if self.rank == 0 and fresh.any():
            self.policy.value_norm.update(batch.returns[:, fresh])
        if self.world_size > 1:
            broadcast_buffers(self.policy)
        self.ppo.follow_version(self.version, 0.0 if self.steps < self.hold_until else 1.0)
        self.allreduce_ms = 0.0
        try:
            stats = self.ppo.step(batch, self._average_gradients)
        except ModelError as exc:
            self.skipped += 1
            self.log.warning("update_skipped", reason=str(exc), step=self.steps + 1)
            stats = {}
        self.kl_stopped += int(stats.get("kl_stopped", 0.0))
        stats.update(
            learning_rate=self.ppo.learning_rate, entropy_coef=self.ppo.entropy_coef, allreduce_ms=self.allreduce_ms
        )
        if self.rank == 0 and fresh.any():
            self.policy.update_normalizer(batch.obs[:, fresh])
        if self.world_size > 1:
            broadcast_buffers(self.policy)
        return stats

    def _average_gradients(self, finite: bool, kl: float) -> tuple[bool, float]:
        """PPO.step's hook: each gradient becomes its mean over the ranks; returns whether every rank's loss was
        finite and the ranks' mean approximate KL."""
        if self.world_size == 1:
            return finite, kl
        started = time.perf_counter()
        agreed = average_gradients(self.policy, finite, kl, self.world_size)
        self.allreduce_ms = (time.perf_counter() - started) * 1e3
        return agreed

    def stats(self) -> dict[str, Any]:
        """The latest step's losses and counters, and the means over this rank's steps."""
        return {
            **self.last,
            "rank": self.rank,
            "steps": self.steps,
            "version": self.version,
            "skipped_updates": self.skipped,
            "kl_stopped_steps": self.kl_stopped,
            "step_ms_mean": round(1e3 * self.busy_s / max(self.steps, 1), 3),
            "allreduce_ms_mean": round(1e3 * self.allreduce_s / max(self.steps, 1), 3),
            "allreduce_share": round(self.allreduce_s / self.busy_s, 4) if self.busy_s else 0.0,
        }
