"""LearnerActor: an experience buffer, PPO steps in lockstep with its peers, gradients averaged by allreduce.

One learner per OS process, pinned to a device by its supervisor. Rank r of a world of N joins
a torch.distributed group (gloo on the CPU, NCCL on CUDA) at the rendezvous address in its args
or `training.rendezvous_host/port`; a world of 1 needs no group. At start rank 0 fetches the
ParamServer's latest parameters (and Adam's moments when they were checkpointed) and
broadcasts them, so every rank, and a restarted group, continues from the same point.

It trains in rounds on a thread of its own, so Rollouts keep arriving: the torch side, one rank's
share of the lockstep PPO group, is five_actors.actors.trainer.GroupTrainer. This actor admits
chunks into the ExperienceBuffer, starts the group from the ParamServer, switches architecture and
publishes every `publish_every` steps (PublishParams, and every `checkpoint_every` versions
OptimizerState; rank 0 only).

A live surgery (ParamsAvailable of a new architecture): the round after any rank heard of it,
the group switches instead of training: rank 0 fetches the operated parameters and moments from
the ParamServer, broadcasts them, and every rank rebuilds its policy and Adam. Chunks of the
replaced architecture, buffered or arriving later, are converted to the new one
(five_actors.actors.buffer); chunks of the announced one that arrive before the switch are held
until it. Every chunk is counted by its fate (ExperienceBuffer.accounting, in GetStats and /actors), and
every FATES_EVERY_S the fates met since are told to the GameActors that made the chunks (ChunkFates): their
ledgers hold each chunk's fate across learner restarts.

Events: learner_started, train_step (losses, staleness, reuse, samples/s, allreduce time),
update_skipped, rollout_refused, learner_arch_adopted, learner_group_stopped, params_behind_learner,
announcement_unconfirmed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

import numpy as np
import structlog
import torch

from five_actors.actors.buffer import ExperienceBuffer, check_rollout, convert_rollout
from five_actors.actors.config import limit_torch_threads, run_settings
from five_actors.actors.group import TorchThread, broadcast_object
from five_actors.actors.messages import (
    ChunkFates,
    GetParams,
    GetStats,
    Params,
    ParamsAvailable,
    PublishParams,
    Rollout,
)
from five_actors.actors.param_server import GetOptimizerState, OptimizerState
from five_actors.actors.params import initial_policy, model_spec, state_arrays
from five_actors.actors.subscription import keep_subscribed
from five_actors.actors.trainer import GroupTrainer, Publish
from five_actors.config import Config
from five_actors.errors import FiveActorsError, TrainingError
from five_actors.model.policy import bf16_native
from five_actors.model.spec import ModelSpec
from five_actors.runtime.actor import Actor
from five_actors.supervisor.processes import current_device

log = structlog.get_logger("five_actors.learner")

IDLE_WAIT_S = 0.02
"""Pause between rounds in which no rank was ready."""
FATES_EVERY_S = 0.1
"""How often the fates of the chunks met since the last report are told to the GameActors that made them."""
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
        self.spec: ModelSpec | None = None
        """None until the group has formed and the policy is built."""
        self.arch = ""
        self._pending: list[Rollout] = []
        """Rollouts that arrived before the policy (or the announced architecture's) was built, checked once it is."""
        self._announced: ParamsAvailable | None = None
        """The newest architecture the ParamServer announced that this learner has not switched to."""
        self.previous_spec: ModelSpec | None = None
        """The architecture a live surgery replaced: its chunks are converted, not refused."""
        self.incarnation = uuid.uuid4().hex
        """Tells this run of the learner from the next in its ChunkFates."""

    # -- start ----------------------------------------------------------------------------

    async def on_start(self) -> None:
        config, _ = run_settings(self, self._config_arg, self._run_dir_arg)
        self.config, self.training = config, config.training
        self.log = log.bind(actor=self.ref.path, rank=self.rank)
        device = torch.device(self._device_arg or current_device(config.model.device))
        # Several learners (and game processes) on the same cores: spinning intra-op threads slow every step and
        # stretch each allreduce to wait for the slowest rank.
        limit_torch_threads(device.type, self.training.learner_torch_threads)
        self.buffer = ExperienceBuffer(
            self.training.buffer_chunks, self.training.rollout_chunk_steps, self.training.reuse_window_s
        )
        self.trainer = GroupTrainer(self.rank, self.world_size, device, config, self.buffer, self.log)
        self.thread = TorchThread(f"learner-{self.rank}")
        self.spawn_task(self._report_fates(), "learner:fates")
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
        trainer = self.trainer
        if self.world_size > 1:
            host = self._master[0] or self.training.rendezvous_host
            await self.thread.run(lambda: trainer.join(host, self._master[1] or self.training.rendezvous_port))
        start = await self._shared_starting_point()
        spec = ModelSpec.from_dict(start["spec"])
        await self.thread.run(lambda: trainer.load(spec, start))
        self.spec, self.arch = spec, spec.hash
        self.log.info(
            "learner_started",
            version=trainer.version,
            world_size=self.world_size,
            device=str(trainer.device),
            precision=trainer.policy.arithmetic,
            arch=self.arch,
            optimizer_restored=bool(start["optimizer"]),
        )
        if trainer.policy.precision == "bf16" and trainer.device.type == "cpu" and not bf16_native():
            self.log.warning(
                "bf16_emulated", reason="this CPU has neither AVX-512 BF16 nor AMX: bf16 runs slower than fp32 here"
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
        elif msg.version < self.trainer.version and self.rank == 0:
            self.spawn_task(self._catch_up_server(msg.version), "learner:catch-up")

    async def _catch_up_server(self, server_version: int) -> None:
        """Publish the group's parameters and moments to a ParamServer behind it: the games would play its older
        version, too stale for the group to train on, and the group would never publish again."""
        publish = await self.thread.run(self.trainer.snapshot)
        self.log.warning("params_behind_learner", server_version=server_version, version=publish[0])
        await self._publish(publish)

    async def _switch(self) -> None:
        """Rebuild the policy and Adam from the ParamServer's operated state, on every rank in the same round."""
        announced = self._announced
        start = await self._shared_starting_point()
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
                version=self.trainer.version,
                optimizer_restored=bool(start["optimizer"]),
                chunks_converted=converted,
                chunks_dropped=dropped,
            )
        await self._release_held()

    def _adopt(self, spec: ModelSpec, start: dict[str, Any]) -> tuple[int, int]:
        """Switch to a new architecture on the torch thread, so no round sees old chunks with the new policy.

        Returns (chunks converted, unused chunks dropped) of the old architecture's buffer."""
        self.trainer.load(spec, start, surgery=True)
        old = self.spec
        assert old is not None  # a group switches only from a built policy
        self.spec, self.arch, self.previous_spec = spec, spec.hash, old
        return self.buffer.convert(old, spec)

    async def _shared_starting_point(self) -> dict[str, Any]:
        """Rank 0's starting point, broadcast to every rank."""
        start = await self._starting_point(self.config) if self.rank == 0 else None
        if self.world_size > 1:
            start = await self.thread.run(lambda: broadcast_object(start, self.trainer.device))
        assert start is not None
        return start

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
        if not hasattr(self, "trainer"):
            return
        if self.trainer.grouped:
            # Queued behind the round in flight, it meets the peers' next round, which tells them all to stop;
            # a peer that is gone makes it time out rather than hang the stop.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.thread.run(self.trainer.final_round), STOP_WAIT_S)
        if not await self.thread.finish(STOP_WAIT_S):
            self.log.warning("learner_thread_busy_at_stop", waited_s=STOP_WAIT_S)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._tell_fates(), STOP_WAIT_S)

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
            self.buffer.refused(_rows(msg), msg.source)
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
            self.buffer.refused(_rows(early), early.source)
            reason = (
                "the learner is still joining its group or switching architecture, and holds a buffer's worth already"
            )
            self.log.warning("rollout_refused", source=early.source, reason=reason)

    # -- training -------------------------------------------------------------------------

    async def _train_forever(self) -> None:
        trainer = self.trainer
        while True:
            result = await self.thread.run(lambda: trainer.round(switch=self._announced is not None))
            if result is None:
                await asyncio.sleep(IDLE_WAIT_S)
                continue
            if result.get("switch"):
                await self._switch()
                continue
            if result.get("stop"):
                # A peer is stopping: the group is over; this learner stops too and its supervisor
                # (one_for_all) restarts the group from the ParamServer's latest parameters.
                self.log.info("learner_group_stopped", steps=trainer.steps, version=trainer.version)
                self.stop_self()
                return
            self.log.info("train_step", **result["stats"], **self._buffer_stats())
            if "publish" in result:
                await self._publish(result["publish"])

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
        }

    async def _publish(self, publish: Publish) -> None:
        if not self.param_server:
            return
        version, state, optimizer = publish
        assert self.spec is not None  # a publish comes from a round, after the policy was built
        server = self.system.ref(self.param_server)
        try:
            if optimizer is not None:
                await server.tell(OptimizerState(version, self.arch, optimizer), sender=self.ref)
            await server.tell(
                PublishParams(
                    version, self.arch, self.spec.to_dict(), state, self.trainer.base_steps + self.trainer.steps
                ),
                sender=self.ref,
            )
        except FiveActorsError as exc:
            # The ParamServer is restarting: this version is lost, the next one carries the training on.
            self.log.warning("publish_failed", version=version, reason=str(exc))

    # -- chunk fates ----------------------------------------------------------------------

    async def _report_fates(self) -> None:
        while True:
            await asyncio.sleep(FATES_EVERY_S)
            await self._tell_fates()

    async def _tell_fates(self) -> None:
        """Tell each GameActor the fates its chunks met since the last report (ledger: five_actors.actors.ledger)."""
        for source, counts in self.buffer.take_fates().items():
            try:
                await self.system.ref(source).tell(ChunkFates(self.ref.address, self.incarnation, **counts))
            except (FiveActorsError, ValueError) as exc:  # ValueError: a source that is no address
                # The game actor is gone, and its ledger with it: nobody is left to count these.
                self.log.info("chunk_fates_undelivered", source=source, error=str(exc))

    # -- observability --------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """The latest step's losses and counters, plus the buffer's current reuse and throughput."""
        if not hasattr(self, "trainer"):
            return {"rank": self.rank, "steps": 0}
        return {**self.trainer.stats(), **self._buffer_stats(), "arch": self.arch}

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
