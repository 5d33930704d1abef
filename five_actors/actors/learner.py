"""LearnerActor: an experience buffer, PPO steps in lockstep with its peers, gradients averaged by allreduce.

One learner per OS process, pinned to a device by its supervisor. Rank r of a world of N joins
a torch.distributed group (gloo on the CPU, NCCL on CUDA) at the rendezvous address in its args
or `training.rendezvous_host/port`; a world of 1 needs no group. At start rank 0 fetches the
ParamServer's latest parameters (and Adam's moments when they were checkpointed) and
broadcasts them, so every rank, and a restarted group, continues from the same point.

Each round, on a thread of its own so Rollouts keep arriving:
1. every rank says whether it is ready (enough chunks, sample reuse under `max_sample_reuse`),
   whether it is stopping and whether it heard of a new architecture; one allreduce of those
   flags decides for all, so all ranks take the same number of steps, switch architecture in the
   same round, and leave the group together when one stops;
2. rank 0 folds the minibatch's fresh chunks into the value normaliser and broadcasts it;
3. loss from five_actors.model.ppo; backward; gradients summed by one allreduce over a flat
   buffer (plus a flag per rank whose loss was finite) and divided by N; PPO's per-parameter
   clipping; Adam;
4. rank 0 folds the fresh observations into the observation normaliser and broadcasts it;
   the learning rate and entropy coefficient follow their schedules over versions (ppo.*), the
   rate held at 0 for `surgery_lr_hold_steps` after an architecture switch;
5. every `publish_every` steps the version advances; rank 0 sends PublishParams (and, every
   `checkpoint_every` versions, OptimizerState) to the ParamServer.

A live surgery (ParamsAvailable of a new architecture): the round after any rank heard of it,
the group switches instead of training: rank 0 fetches the operated parameters and moments from
the ParamServer, broadcasts them, and every rank rebuilds its policy and Adam. Chunks of the
replaced architecture, buffered or arriving later, are converted to the new one
(five_actors.actors.buffer); chunks of the announced one that arrive before the switch are held
until it. Every chunk is counted by its fate (ExperienceBuffer.accounting, in GetStats and /actors).

Events: learner_started, train_step (losses, staleness, reuse, samples/s, allreduce time),
update_skipped, rollout_refused, learner_arch_adopted, learner_group_stopped, params_behind_learner,
announcement_unconfirmed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from typing import Any, TypeVar

import numpy as np
import structlog
import torch
import torch.distributed as dist

from five_actors.actors.buffer import ExperienceBuffer, Minibatch, check_rollout, convert_rollout, to_chunks
from five_actors.actors.config import run_settings
from five_actors.actors.group import (
    TorchThread,
    average_gradients,
    broadcast_buffers,
    broadcast_object,
    join_group,
    leave_group,
)
from five_actors.actors.messages import GetParams, GetStats, Params, ParamsAvailable, PublishParams, Rollout
from five_actors.actors.param_server import GetOptimizerState, OptimizerState
from five_actors.actors.params import (
    initial_policy,
    load_optimizer,
    load_state,
    model_spec,
    optimizer_arrays,
    state_arrays,
)
from five_actors.actors.subscription import keep_subscribed
from five_actors.config import Config
from five_actors.errors import FiveActorsError, ModelError, TrainingError
from five_actors.model.policy import Policy
from five_actors.model.ppo import PPO
from five_actors.model.spec import ModelSpec
from five_actors.runtime.actor import Actor
from five_actors.supervisor.processes import DEVICE_ENV

log = structlog.get_logger("five_actors.learner")

T = TypeVar("T")

IDLE_WAIT_S = 0.02
"""Pause between rounds in which no rank was ready."""
STOP_WAIT_S = 5.0
"""How long a stopping learner waits to tell its peers (a dead peer makes that fail)."""
PARAM_SERVER_WAIT_S = 20.0
"""How long rank 0 keeps retrying the ParamServer at start (it may be restarting too)."""


class LearnerActor(Actor):
    """Rank `rank` of `world_size` learners (see the module docstring)."""

    def __init__(
        self,
        rank: int = 0,
        world_size: int = 1,
        params: str = "",
        master_addr: str = "",
        master_port: int = 0,
        device: str = "",
        config: Config | None = None,
        run_dir: str | None = None,
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        self.rank, self.world_size = rank, world_size
        self.param_server = params
        self._master = (master_addr, master_port)
        self._device_arg = device
        self._config_arg, self._run_dir_arg = config, run_dir
        self.version = 0
        self.steps = 0
        self.base_steps = 0
        self.skipped = 0
        self.busy_s = 0.0
        """Seconds spent in optimizer steps (allreduce included)."""
        self.allreduce_s = 0.0
        """Seconds spent averaging gradients across the ranks."""
        self.allreduce_ms = 0.0
        """Milliseconds the latest step's allreduce took."""
        self.last: dict[str, float] = {}
        self.spec: ModelSpec | None = None
        """None until the group has formed and the policy is built."""
        self.arch = ""
        self._pending: list[Rollout] = []
        """Rollouts that arrived before the policy (or the announced architecture's) was built, checked once it is."""
        self._grouped = False
        self._announced: ParamsAvailable | None = None
        """The newest architecture the ParamServer announced that this learner has not switched to."""
        self.previous_spec: ModelSpec | None = None
        """The architecture a live surgery replaced: its chunks are converted, not refused."""
        self.hold_until = 0
        """Steps before which the learning rate is held at 0 (after a surgery: training.surgery_lr_hold_steps)."""

    # -- start ----------------------------------------------------------------------------

    async def on_start(self) -> None:
        config, _ = run_settings(self, self._config_arg, self._run_dir_arg)
        self.config, self.training = config, config.training
        self.log = log.bind(actor=self.ref.path, rank=self.rank)
        self.device = torch.device(self._device_arg or os.environ.get(DEVICE_ENV) or config.model.device)
        if self.device.type == "cpu" and self.training.learner_torch_threads:
            # Several learners (and game processes) on the same cores: spinning intra-op threads
            # slow every step and stretch each allreduce to wait for the slowest rank.
            torch.set_num_threads(self.training.learner_torch_threads)
        self.rng = np.random.default_rng(self.training.seed + 7919 * (self.rank + 1))
        self.buffer = ExperienceBuffer(
            self.training.buffer_chunks, self.training.rollout_chunk_steps, self.training.reuse_window_s
        )
        self.thread = TorchThread(f"learner-{self.rank}")
        if self.world_size == 1:
            await self._prepare(config)
            self.spawn_task(self._train_forever(), "learner:train")
        else:
            # Running before the group forms: the supervisor starts the ranks one after another, and
            # rank 0 waiting in the rendezvous for a rank not yet started would never be ready.
            self.spawn_task(self._prepare_and_train(config), "learner:train")

    async def _prepare_and_train(self, config: Config) -> None:
        await self._prepare(config)
        await self._train_forever()

    async def _prepare(self, config: Config) -> None:
        """Join the group, take the starting point from rank 0, build the policy, check the Rollouts held meanwhile."""
        if self.world_size > 1:
            await self.thread.run(self._join_group)
        start = await self._starting_point(config) if self.rank == 0 else None
        if self.world_size > 1:
            start = await self.thread.run(lambda: broadcast_object(start, self.device))
        assert start is not None
        spec = ModelSpec.from_dict(start["spec"])
        self.spec, self.arch = spec, spec.hash
        self.version, self.base_steps = start["version"], start["learner_steps"]
        await self.thread.run(lambda: self._build(spec, start))
        self.log.info(
            "learner_started",
            version=self.version,
            world_size=self.world_size,
            device=str(self.device),
            arch=self.arch,
            optimizer_restored=bool(start["optimizer"]),
        )
        if self.param_server:
            # A surgery, or a ParamServer restarted behind the group, announces itself through ParamsAvailable.
            self.spawn_task(keep_subscribed(self, self.param_server, self.log), "learner:subscribe")
        await self._release_held()

    async def _release_held(self) -> None:
        pending, self._pending = self._pending, []
        for msg in pending:
            await self.on_rollout(msg)

    async def on_params_available(self, msg: ParamsAvailable) -> None:
        """A new architecture (a live surgery): the group switches to it at its next round (_switch).

        An older version of this one: the ParamServer restarted from a checkpoint behind the group; rank 0
        publishes where the group is (see _catch_up_server)."""
        if self.spec is None:
            return
        if msg.arch != self.arch:
            self._announced = msg
        elif msg.version < self.version and self.rank == 0:
            self.spawn_task(self._catch_up_server(msg.version), "learner:catch-up")

    async def _catch_up_server(self, server_version: int) -> None:
        """Publish the group's parameters and moments to a ParamServer behind it: the games would play its older
        version, too stale for the group to train on, and the group would never publish again."""
        publish = await self.thread.run(
            lambda: (self.version, state_arrays(self.policy), optimizer_arrays(self.ppo.optimizer))
        )
        self.log.warning("params_behind_learner", server_version=server_version, version=publish[0])
        await self._publish(publish)

    async def _switch(self) -> None:
        """Rebuild the policy and Adam from the ParamServer's operated state, on every rank in the same round."""
        announced = self._announced
        start = await self._starting_point(self.config) if self.rank == 0 else None
        if self.world_size > 1:
            start = await self.thread.run(lambda: broadcast_object(start, self.device))
        assert start is not None
        spec, old = ModelSpec.from_dict(start["spec"]), self.arch
        if self._announced is announced or (
            self._announced is not None and self._announced.version <= start["version"]
        ):
            # What was announced is in `start`, or the server's latest does not back it (a bogus announcement would
            # otherwise make the group switch every round): only an announcement heard meanwhile waits for the next
            # round.
            if announced is not None and spec.hash != announced.arch:
                self.log.warning(
                    "announcement_unconfirmed", arch=announced.arch, version=announced.version, server_arch=spec.hash
                )
            self._announced = None
        if spec.hash != old:  # else a late announcement of what the group runs already
            converted, dropped = await self.thread.run(lambda: self._adopt(spec, start))
            self.log.info(
                "learner_arch_adopted",
                arch_from=old,
                arch_to=self.arch,
                version=self.version,
                optimizer_restored=bool(start["optimizer"]),
                chunks_converted=converted,
                chunks_dropped=dropped,
            )
        await self._release_held()

    def _build(self, spec: ModelSpec, start: dict[str, Any]) -> None:
        """The policy and its PPO optimizer on this device, from the starting point (on the torch thread: slow)."""
        self.policy = Policy(spec).to(self.device)
        self.ppo = PPO(self.policy, self.config.ppo)
        load_state(self.policy, start["state"])
        if start["optimizer"]:
            load_optimizer(self.ppo.optimizer, start["optimizer"])

    def _adopt(self, spec: ModelSpec, start: dict[str, Any]) -> tuple[int, int]:
        """Switch to a new architecture on the torch thread, so no round sees old chunks with the new policy.

        Returns (chunks converted, unused chunks dropped) of the old architecture's buffer."""
        self._build(spec, start)
        old = self.spec
        assert old is not None  # a group switches only from a built policy
        self.spec, self.arch, self.previous_spec = spec, spec.hash, old
        self.hold_until = self.steps + self.training.surgery_lr_hold_steps
        self.version, self.base_steps = start["version"], start["learner_steps"] - self.steps
        return self.buffer.convert(old, spec)

    def _join_group(self) -> None:
        host = self._master[0] or self.training.rendezvous_host
        port = self._master[1] or self.training.rendezvous_port
        join_group(host, port, self.rank, self.world_size, self.device, self.training.allreduce_timeout_s)
        self._grouped = True

    async def _starting_point(self, config: Config) -> dict[str, Any]:
        """Rank 0: the ParamServer's latest version (with the newest optimizer state it holds), else version 0."""
        if not self.param_server:
            spec = model_spec(config)
            return {
                "spec": spec.to_dict(),
                "version": 0,
                "learner_steps": 0,
                "optimizer": None,
                "state": state_arrays(initial_policy(spec, self.training.seed)),
            }
        server = self.system.ref(self.param_server)
        deadline = time.monotonic() + PARAM_SERVER_WAIT_S
        while True:
            try:
                params: Params = await server.ask(GetParams(-1), timeout=10.0)
                optimizer: OptimizerState = await server.ask(GetOptimizerState(), timeout=10.0)
                stats = await server.ask(GetStats(), timeout=10.0)
                break
            except FiveActorsError as exc:
                if time.monotonic() > deadline:
                    raise
                self.log.info("param_server_unavailable", param_server=self.param_server, reason=str(exc))
                await asyncio.sleep(0.5)
        # Moments from a few versions back still beat zeros (Adam would restart its bias correction).
        matches = optimizer.version >= 0 and optimizer.arch == params.arch
        if matches and optimizer.version != params.version:
            self.log.info("optimizer_state_older", optimizer_version=optimizer.version, params_version=params.version)
        return {
            "spec": params.spec,
            "version": params.version,
            "learner_steps": int(stats.get("learner_steps", 0)),
            "state": params.state,
            "optimizer": optimizer.state if matches else None,
        }

    async def on_stop(self) -> None:
        if self._grouped:
            # Queued behind the round in flight, it meets the peers' next round, which tells them all to stop;
            # a peer that is gone makes it time out rather than hang the stop.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.thread.run(self._final_round), STOP_WAIT_S)
        if not await self.thread.finish(STOP_WAIT_S):
            self.log.warning("learner_thread_busy_at_stop", waited_s=STOP_WAIT_S)

    def _final_round(self) -> None:
        if not self._grouped:
            return
        flags = torch.zeros(3, device=self.device)  # not ready, not staying: the peers' round stops too
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        self._leave_group()

    def _leave_group(self) -> None:
        leave_group()
        self._grouped = False

    # -- chunks ---------------------------------------------------------------------------

    async def on_rollout(self, msg: Rollout) -> None:
        spec, previous = self.spec, self.previous_spec
        if spec is None or (self._announced is not None and msg.arch == self._announced.arch):
            self._hold(msg)
            return
        converted = previous is not None and msg.arch == previous.hash
        try:
            if converted:
                assert previous is not None
                batch = check_rollout(msg, previous, self.training.rollout_chunk_steps)
                msg = convert_rollout(msg, previous, spec)
            else:
                batch = check_rollout(msg, spec, self.training.rollout_chunk_steps)
            if spec is not self.spec:  # the torch thread switched architecture meanwhile (_adopt)
                raise TrainingError(f"rollout of architecture {msg.arch!r} arrived during a switch to {self.arch!r}")
        except TrainingError as exc:
            self.buffer.refused(_rows(msg))
            self.log.warning(
                "rollout_refused", source=msg.source, reason=str(exc), refused=self.buffer.counters.refused
            )
            return
        self.buffer.add(msg, batch, converted)

    def _hold(self, msg: Rollout) -> None:
        """Keep a Rollout that arrived before its policy was built, up to a buffer's worth of chunks."""
        self._pending.append(msg)
        while sum(_rows(m) for m in self._pending) > self.training.buffer_chunks:
            early = self._pending.pop(0)
            self.buffer.refused(_rows(early))
            reason = (
                "the learner is still joining its group or switching architecture, and holds a buffer's worth already"
            )
            self.log.warning("rollout_refused", source=early.source, reason=reason)

    # -- training -------------------------------------------------------------------------

    async def _train_forever(self) -> None:
        while True:
            result = await self.thread.run(self._round)
            if result is None:
                await asyncio.sleep(IDLE_WAIT_S)
                continue
            if result.get("switch"):
                await self._switch()
                continue
            if result.get("stop"):
                # A peer is stopping: the group is over; this learner stops too and its supervisor
                # (one_for_all) restarts the group from the ParamServer's latest parameters.
                self.log.info("learner_group_stopped", steps=self.steps, version=self.version)
                self.stop_self()
                return
            self.log.info("train_step", **result["stats"])
            if "publish" in result:
                await self._publish(result["publish"])

    def _round(self) -> dict[str, Any] | None:
        """One lockstep round on the torch thread: None when not every rank was ready, or what the group does
        instead."""
        t = self.training
        ready = self.buffer.ready(t.minibatch_chunks, self.version, t.max_staleness, t.max_sample_reuse)
        switch = self._announced is not None
        if self.world_size > 1:
            flags = torch.tensor(
                [float(ready), 1.0, -float(switch)], device=self.device
            )  # [ready, staying, -switching]
            dist.all_reduce(flags, op=dist.ReduceOp.MIN)
            if flags[1].item() < 1.0:
                self._leave_group()
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
        stats.update(self._counters(minibatch, seconds))
        self.last = stats
        result: dict[str, Any] = {"stats": stats}
        if self.steps % t.publish_every == 0:
            self.version += 1
            if self.rank == 0:
                with_optimizer = self.version % t.checkpoint_every == 0
                result["publish"] = (
                    self.version,
                    state_arrays(self.policy),
                    optimizer_arrays(self.ppo.optimizer) if with_optimizer else None,
                )
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
        stats.update(
            learning_rate=self.ppo.learning_rate, entropy_coef=self.ppo.entropy_coef, allreduce_ms=self.allreduce_ms
        )
        if self.rank == 0 and fresh.any():
            self.policy.update_normalizer(batch.obs[:, fresh])
        if self.world_size > 1:
            broadcast_buffers(self.policy)
        return stats

    def _average_gradients(self, finite: bool) -> bool:
        """PPO.step's hook: each gradient becomes its mean over the ranks; False when some rank's loss was not
        finite."""
        if self.world_size == 1:
            return finite
        started = time.perf_counter()
        agreed = average_gradients(self.policy, finite, self.world_size)
        self.allreduce_ms = (time.perf_counter() - started) * 1e3
        return agreed

    def _counters(self, minibatch: Minibatch, seconds: float) -> dict[str, float]:
        staleness = minibatch.staleness
        return {
            "step": self.base_steps + self.steps,
            "version": self.version,
            "staleness_mean": float(np.mean(staleness)),
            "staleness_max": float(np.max(staleness)),
            "step_ms": round(seconds * 1e3, 3),
            **self._buffer_stats(),
        }

    def _buffer_stats(self) -> dict[str, Any]:
        """The experience buffer's reuse, throughput and chunk accounting."""
        accounting = self.buffer.accounting()
        accounting["chunks_waiting"] += sum(
            _rows(m) for m in self._pending
        )  # held until the group forms or switches: waiting too
        return {
            "sample_reuse": round(self.buffer.reuse(), 4),
            "samples_per_s": round(self.buffer.consumed_per_s(), 1),
            "buffer_chunks": len(self.buffer),
            **accounting,
            "skipped_updates": self.skipped,
        }

    async def _publish(self, publish: tuple[int, dict[str, np.ndarray], dict[str, np.ndarray] | None]) -> None:
        if not self.param_server:
            return
        version, state, optimizer = publish
        assert self.spec is not None  # a publish comes from a round, after the policy was built
        server = self.system.ref(self.param_server)
        try:
            if optimizer is not None:
                await server.tell(OptimizerState(version, self.arch, optimizer), sender=self.ref)
            await server.tell(
                PublishParams(version, self.arch, self.spec.to_dict(), state, self.base_steps + self.steps),
                sender=self.ref,
            )
        except FiveActorsError as exc:
            # The ParamServer is restarting: this version is lost, the next one carries the training on.
            self.log.warning("publish_failed", version=version, reason=str(exc))

    # -- observability --------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """The latest step's losses and counters, plus the buffer's current reuse and throughput."""
        if not hasattr(self, "buffer"):
            return {"rank": self.rank, "steps": 0}
        return {
            **self.last,
            "rank": self.rank,
            "steps": self.steps,
            "version": self.version,
            **self._buffer_stats(),
            "arch": self.arch,
            "step_ms_mean": round(1e3 * self.busy_s / max(self.steps, 1), 3),
            "allreduce_ms_mean": round(1e3 * self.allreduce_s / max(self.steps, 1), 3),
            "allreduce_share": round(self.allreduce_s / self.busy_s, 4) if self.busy_s else 0.0,
        }

    async def on_get_stats(self, _msg: GetStats) -> dict[str, Any]:
        return self.stats()

    def status(self) -> dict[str, Any]:
        stats = self.stats()
        return {
            "progress": {"steps": stats["steps"], "version": stats.get("version", 0), "arch": stats.get("arch")},
            "metrics": {k: v for k, v in stats.items() if isinstance(v, (int, float)) and k != "rank"},
        }


def _rows(msg: Rollout) -> int:
    """How many chunks a Rollout claims to carry (1 when its versions are malformed)."""
    return msg.versions.shape[0] if isinstance(msg.versions, np.ndarray) and msg.versions.ndim == 1 else 1
