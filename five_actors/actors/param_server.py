"""ParamServerActor: parameter versions, checkpoints, the past-opponent pool, and resume.

Version 0 is a fresh policy seeded by `training.seed`, unless RUN_DIR/checkpoints holds a
checkpoint: then the newest readable one is restored (version counter, parameters, the
learners' Adam moments) with the opponent pool and its q values from pool.json. Learner rank 0
publishes every `publish_every` steps (PublishParams); each new version is told to every
subscriber (ParamsAvailable), joins the opponent pool every `pool_add_every` versions, and is
checkpointed every `checkpoint_every` versions, when it joins the pool, and on a graceful stop.
Version 0 and pool members' checkpoints are never pruned; the pool holds at most
`pool_max_versions` (the lowest q leaves). In memory: the latest version and every pool member;
any other version still on disk is loaded on request.

Refused, with a `params_refused` log line and a count, never stored: parameters of another
architecture, of the wrong names or shapes, or not newer than the latest version.

Surgery (the Surgery message, issue 6's hot swap), on threads while the actor keeps serving.
First the probes, and the latest version (with Adam's moments) operated and verified on all of
them, while the learners' publishes are still taken; then the pause: PublishParams and
OptimizerState are refused (work of the old architecture that the surgery would not carry), and a
version published meanwhile is operated in its turn and verified on the probes' first
`PAUSE_PROBE_STEPS` steps (the same operations were just verified in full, so the pause does not
grow with `probe_steps`).
The result becomes version latest+1 of the new architecture, every subscriber hears
ParamsAvailable with the new arch, and it is checkpointed: a refusal so far changes nothing.
The pool's members leave the pool meanwhile (none is handed out in the old architecture) and
are operated after the hand-over, one at a time, the likeliest first; each rejoins the pool
with its q as it is verified (and is checkpointed in the new architecture), and one the
surgery is refused on stays out (`opponent_pool_evicted`). So the pause and the time until the
new architecture plays do not grow with the pool. The report, sent when the pool is done,
gives `pause_seconds` (publishes refused), `in_play_seconds` (request to announcement) and
`seconds` (the whole); /actors shows the pool's progress (`surgery_pool_waiting`). A dry run
operates the latest version and the pool and changes nothing. `training.surgery_schedule` names surgeries the
ParamServer begins by itself once the latest version reaches a given one (`surgery_scheduled`), e.g. a curriculum's
`game-size 5 3`; they run as if asked for.

Annealing (five_actors.surgery.anneal): the action types a surgery adds and a new game version
are put to use in a share of games that grows from 0 to 1 over `training.surgery_anneal_versions`
versions; every ParamsAvailable carries the shares, the checkpoints keep them. The EvalActor
tells each round's TrueSkill (EvalRating); a change still annealing whose latest TrueSkill fell
more than `training.surgery_revert_trueskill` below its value at the surgery goes back to share 0
(`surgery_reverted`, and a ParamsAvailable with the new shares).

Events: params_published, params_refused, checkpoint_saved, checkpoint_restored,
opponent_pool_added, match_result, surgery_scheduled, surgery, surgery_rejected, surgery_reverted.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, NoReturn

import numpy as np
import structlog

from five_actors.actors.config import run_settings
from five_actors.actors.messages import (
    EvalRating,
    GetParams,
    GetStats,
    MatchResult,
    Opponent,
    OpponentRequest,
    Params,
    ParamsAvailable,
    PublishParams,
    Subscribe,
    Surgery,
)
from five_actors.actors.params import Arrays, check_state, initial_policy, model_spec, state_arrays, template
from five_actors.actors.pool import OpponentPool
from five_actors.actors.store import CheckpointStore, Saved
from five_actors.config import Config
from five_actors.errors import CheckpointError, FiveActorsError, SurgeryRejected, TrainingError, VersionUnavailable
from five_actors.model.policy import Policy
from five_actors.model.spec import ModelSpec
from five_actors.runtime.actor import Actor, message
from five_actors.surgery.anneal import GAME_VERSION, Annealing
from five_actors.surgery.live import (
    PAUSE_PROBE_STEPS,
    LiveResult,
    live_surgery,
    operate_past,
    prepare,
    state_to_arrays,
)
from five_actors.surgery.ops import SurgeryOp
from five_actors.surgery.verify import Probes

log = structlog.get_logger("five_actors.params")

NOTIFY_TIMEOUT_S = 2.0
"""A subscriber whose mailbox or link stays full this long misses one ParamsAvailable (the next one catches it up)."""


@message
class OptimizerState:
    """Learner rank 0 -> ParamServer (tell), and the reply to GetOptimizerState: Adam's moments at `version`.

    `state` is five_actors.actors.params.optimizer_arrays output; version -1 and an empty state: none known.
    """

    version: int
    arch: str
    state: dict[str, np.ndarray]


@message
class GetOptimizerState:
    """Ask the ParamServer for the latest optimizer state it holds (for a restarted learner group)."""


class ParamServerActor(Actor):
    """Owns the parameter versions of one run (see the module docstring)."""

    def __init__(self, config: Config | None = None, run_dir: str | None = None) -> None:
        self._config_arg, self._run_dir_arg = config, run_dir
        self.version = 0
        self.learner_steps = 0
        self.spec: ModelSpec
        self.arch = ""
        self.versions: dict[int, Arrays] = {}
        self.optimizer: tuple[int, Arrays] | None = None
        self.subscribers: set[str] = set()
        self.counts = {
            "published": 0,
            "refused": 0,
            "checkpoints": 0,
            "wins": 0,
            "draws": 0,
            "losses": 0,
            "notify_failures": 0,
        }
        self.last_checkpoint = -1
        self.last_refusal: str | None = None
        self.pool = OpponentPool(eta=1.0)  # replaced in on_start by the configured pool
        self._lock = asyncio.Lock()
        self._surgery: asyncio.Task[Any] | None = None
        self._swapping = False
        """A surgery is operating the latest version: the learners' publishes would be lost in it, and are refused."""
        self._awaiting: dict[int, tuple[float, Arrays]] = {}
        """Pool members a surgery has yet to operate, out of the pool meanwhile: version -> (q, old arrays)."""
        self._pool_operated = 0
        self.surgeries = 0
        self._scheduled: list[tuple[int, str]] = []
        """`training.surgery_schedule` not yet begun: (version, operations), earliest first."""

    async def on_start(self) -> None:
        config, run_dir = run_settings(self, self._config_arg, self._run_dir_arg)
        self.training = config.training
        self.game, self.env = config.game, config.env
        self.log = log.bind(actor=self.ref.path)
        self.store = None if run_dir is None else CheckpointStore(run_dir / "checkpoints")
        self.rng = np.random.default_rng(self.training.seed)
        self.pool = OpponentPool(self.training.pool_eta)
        self.annealing = Annealing(self.training.surgery_anneal_versions, self.training.surgery_revert_trueskill)
        self._scheduled = sorted((int(at), words) for at, words in self.training.surgery_schedule.items())
        self.spec = model_spec(config)
        saved = None if self.store is None else await asyncio.to_thread(self.store.load_latest)
        if saved is None:
            policy = await asyncio.to_thread(initial_policy, self.spec, self.training.seed)
            self.versions[0] = state_arrays(policy)
        else:
            await asyncio.to_thread(self._restore, saved)  # reads every pool member's checkpoint
            assert self.store is not None
            policy = self.store.model_for(self.spec)[0]  # built while reading the checkpoint
        self.arch = self.spec.hash
        self._template = template(policy)
        if self.store is not None:
            # Checkpoints pass arrays through this policy and an Adam over it: built now, not in the first save.
            await asyncio.to_thread(self.store.model_for, self.spec, policy)
            if saved is None:
                await self._checkpoint()  # version 0 stays on disk: the untrained reference, and resumable at once

    def _restore(self, saved: Saved) -> None:
        """Continue from a checkpoint: counter, parameters, optimizer moments, the pool with its q values."""
        assert self.store is not None
        if saved.spec.hash != self.spec.hash:
            self.log.warning("checkpoint_arch_differs", checkpoint_arch=saved.spec.hash, config_arch=self.spec.hash)
        self.spec = saved.spec
        self.version = self.last_checkpoint = saved.version
        self.learner_steps = saved.counters.get("learner_steps", 0)
        self.annealing.restore(saved.counters)
        self.versions[saved.version] = saved.state
        if saved.optimizer:
            self.optimizer = (saved.counters.get("optimizer_version", saved.version), saved.optimizer)
        pool_data = self.store.load_pool()
        if pool_data is not None:
            self.pool = OpponentPool.from_dict(pool_data.get("pool", {}), self.training.pool_eta)
            for member in self.pool.versions:
                if member == saved.version:
                    continue
                try:
                    kept = self.store.load(member)
                    if kept.spec.hash != saved.spec.hash:
                        raise CheckpointError(
                            f"of architecture {kept.spec.hash}, not {saved.spec.hash}: a surgery stopped before it"
                        )
                except CheckpointError as exc:
                    del self.pool.quality[member]
                    self.log.error("opponent_pool_member_lost", version=member, reason=str(exc))
                    continue
                self.versions[member] = kept.state
        self.log.info(
            "checkpoint_restored",
            version=saved.version,
            pool=len(self.pool),
            optimizer=saved.optimizer is not None,
            path=str(self.store.path(saved.version)),
        )

    async def on_stop(self) -> None:
        if self._awaiting:
            reason = "stopped before the surgery operated them"
            self.log.warning("opponent_pool_evicted", versions=sorted(self._awaiting), reason=reason)
        if self.store is not None and self.last_checkpoint != self.version:
            await self._checkpoint()

    # -- versions -------------------------------------------------------------------------

    async def on_publish_params(self, msg: PublishParams) -> None:
        try:
            self._check_publish(msg)
        except TrainingError as exc:
            self._refuse("PublishParams", str(exc))
            return
        previous = self.version
        self.versions[msg.version] = dict(msg.state)
        self.version, self.learner_steps = msg.version, msg.learner_steps
        if previous not in self.pool:
            self.versions.pop(previous, None)
        self.counts["published"] += 1
        self.log.info("params_published", version=msg.version, learner_steps=msg.learner_steps)
        joins_pool = msg.version % self.training.pool_add_every == 0
        if joins_pool:
            q = self.pool.add(msg.version)
            self.log.info("opponent_pool_added", version=msg.version, q=q, pool=len(self.pool))
            self._evict_over_limit()
        await self._notify()
        self._begin_scheduled()
        # A pool member is always on disk, so that a resumed run still has every opponent it can hand out.
        if self.store is not None and (
            joins_pool or msg.version - max(self.last_checkpoint, 0) >= self.training.checkpoint_every
        ):
            await self._checkpoint()

    def _evict_over_limit(self) -> None:
        """The pool holds at most `pool_max_versions`: the least likely members leave (the latest version's arrays
        stay, it is the run's)."""
        while len(self.pool) > self.training.pool_max_versions:
            evicted = self.pool.evict()
            if evicted != self.version:
                self.versions.pop(evicted, None)
            self.log.info("opponent_pool_evicted", version=evicted, pool=len(self.pool))

    def _check_publish(self, msg: PublishParams) -> None:
        if self._swapping:
            raise TrainingError("a surgery is in flight: parameters of the old architecture are not kept")
        if msg.arch != self.arch:
            raise TrainingError(f"parameters of architecture {msg.arch!r}, this run's is {self.arch!r}")
        if not isinstance(msg.version, int) or msg.version <= self.version:
            raise TrainingError(f"version {msg.version!r} is not newer than the latest, {self.version}")
        check_state(msg.state, self._template, f"version {msg.version}")

    def _refuse(self, what: str, reason: str) -> None:
        self.counts["refused"] += 1
        self.last_refusal = reason
        self.log.warning("params_refused", message=what, reason=reason, refused=self.counts["refused"])

    async def on_optimizer_state(self, msg: OptimizerState) -> None:
        try:
            if self._swapping:
                raise TrainingError("a surgery is in flight: the old architecture's optimizer state is not kept")
            if msg.arch != self.arch:
                raise TrainingError(f"optimizer state of architecture {msg.arch!r}, this run's is {self.arch!r}")
            if not isinstance(msg.state, dict) or not all(isinstance(v, np.ndarray) for v in msg.state.values()):
                raise TrainingError("optimizer state must be a dict of arrays")
        except TrainingError as exc:
            self._refuse("OptimizerState", str(exc))
            return
        self.optimizer = (msg.version, dict(msg.state))

    async def on_get_optimizer_state(self, _msg: GetOptimizerState) -> OptimizerState:
        if self.optimizer is None:
            return OptimizerState(-1, self.arch, {})
        return OptimizerState(self.optimizer[0], self.arch, self.optimizer[1])

    async def on_get_params(self, msg: GetParams) -> Params:
        version = self.version if msg.version == -1 else msg.version
        state = self.versions.get(version)
        if state is None:
            state = await self._load_past(version)
        return Params(version, self.arch, self.spec.to_dict(), state)

    async def _load_past(self, version: int) -> Arrays:
        kept = sorted(set(self.versions) | set(self.store.versions() if self.store else []))
        if self.store is None or version not in kept:
            raise VersionUnavailable(
                f"unknown parameter version {version}: the latest is {self.version}, kept versions are {kept[-20:]}"
            )
        try:
            saved = await asyncio.to_thread(self.store.load, version)
        except CheckpointError as exc:
            raise VersionUnavailable(f"parameter version {version} cannot be loaded: {exc}") from None
        if saved.spec.hash != self.arch:
            raise VersionUnavailable(
                f"parameter version {version} is of architecture {saved.spec.hash}, not {self.arch}"
            )
        return saved.state

    # -- surgery --------------------------------------------------------------------------

    async def on_surgery(self, msg: Surgery) -> asyncio.Future[dict[str, Any]]:
        words = [str(w) for w in msg.ops] if isinstance(msg.ops, (list, tuple)) else []
        if not words:
            self._reject(words, "no operations given")
        if self._surgery is not None:
            self._reject(words, "a surgery is already in flight; try again when it has finished")
        reply: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._surgery = self.spawn_task(
            self._operate(words, bool(msg.dry_run), int(msg.probe_steps), reply), "params:surgery"
        )
        return reply

    def _begin_scheduled(self) -> None:
        """The next surgery of `training.surgery_schedule`, once the latest version has reached its version and no
        other surgery is in flight; it reports like one asked for (`surgery`, or `surgery_rejected` with the reason)."""
        if self._surgery is not None or not self._scheduled or self.version < self._scheduled[0][0]:
            return
        at, text = self._scheduled.pop(0)
        words = text.split()
        self.log.info("surgery_scheduled", operations=words, at_version=at, version=self.version)
        reply: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        reply.add_done_callback(lambda done: done.exception())  # a refusal is logged by _operate: nobody waits here
        self._surgery = self.spawn_task(
            self._operate(words, False, Surgery.probe_steps, reply), "params:scheduled-surgery"
        )

    def _reject(self, words: list[str], reason: str) -> NoReturn:
        self.log.warning("surgery_rejected", operations=words, arch=self.arch, reason=reason)
        raise SurgeryRejected(reason)

    async def _operate(
        self, words: list[str], dry_run: bool, probe_steps: int, reply: asyncio.Future[dict[str, Any]]
    ) -> None:
        try:
            spec, seed, started = self.spec, self.training.seed, time.perf_counter()
            try:
                ops, probes = await asyncio.to_thread(prepare, words, spec, self.game, probe_steps, seed, self.env)
                if dry_run:
                    latest = self.version
                    members = [v for v in {latest, *self.pool.versions} if v in self.versions]
                    versions = {v: self.versions[v] for v in members}
                    moments = self._moments
                    result = await asyncio.to_thread(live_surgery, ops, probes, spec, versions, latest, moments, seed)
                else:
                    result, latest, paused = await self._operate_latest(ops, probes, spec, seed)
            except SurgeryRejected as exc:
                self._reject(words, str(exc))
            report = {**result.report, "dry_run": dry_run, "version_from": latest}
            if not dry_run:
                report["version_to"], announced = await self._adopt(latest, result)
                report["pause_seconds"] = round(announced - paused, 3)
                report["in_play_seconds"] = round(announced - started, 3)
                await self._operate_pool(ops, probes, spec, seed, report)
            report["seconds"] = round(time.perf_counter() - started, 3)
            self.log.info(
                "surgery",
                operations=words,
                dry_run=dry_run,
                spec_from=spec.to_dict(),
                spec_to=result.spec.to_dict(),
                arch_from=spec.hash,
                arch_to=result.spec.hash,
                version_from=latest,
                version_to=report.get("version_to"),
                changes=report["changes"],
                verification=report["verification"],
                seconds=report["seconds"],
                pause_seconds=report.get("pause_seconds"),
                in_play_seconds=report.get("in_play_seconds"),
            )
            reply.set_result(report)
        except FiveActorsError as exc:
            reply.set_exception(exc)
        finally:
            self._surgery = None
            self._swapping = False

    @property
    def _moments(self) -> Arrays | None:
        """Adam's moments as the learners last sent them (for the latest version's surgery), or None."""
        return self.optimizer[1] if self.optimizer is not None else None

    async def _operate_latest(
        self, ops: list[SurgeryOp], probes: Probes, spec: ModelSpec, seed: int
    ) -> tuple[LiveResult, int, float]:
        """The latest version operated and verified, then the pause begun (publishes refused): verified on every probe
        step on a snapshot while publishes are still taken; in the pause, a version published since (or new moments)
        is operated again and checked on the first PAUSE_PROBE_STEPS. Returns the result, its version and when the
        pause began (time.perf_counter)."""
        snapshot, moments = self.version, self._moments
        checked = await asyncio.to_thread(
            live_surgery, ops, probes, spec, {snapshot: self.versions[snapshot]}, snapshot, moments, seed
        )
        self._swapping = True
        paused = time.perf_counter()
        latest = self.version
        if latest == snapshot and self._moments is moments:
            return checked, latest, paused
        result = await asyncio.to_thread(
            live_surgery,
            ops,
            probes.head(PAUSE_PROBE_STEPS),
            spec,
            {latest: self.versions[latest]},
            latest,
            self._moments,
            seed,
        )
        result.report["verification"] = checked.report["verification"] | result.report["verification"]
        result.report["verified_before_pause"] = snapshot
        return result, latest, paused

    async def _adopt(self, latest: int, result: LiveResult) -> tuple[int, float]:
        """Make the operated latest version the run's, as version latest+1 of the new arch; the other pool members
        leave the pool until they are operated; subscribers told, then checkpointed.

        Returns the new version and when it was announced (time.perf_counter)."""
        policy = await asyncio.to_thread(Policy, result.spec)
        new_version = latest + 1
        for member in [v for v in self.pool.versions if v != latest]:
            q, arrays = self.pool.quality.pop(member), self.versions.pop(member, None)
            if arrays is not None:
                self._awaiting[member] = (q, arrays)
        self._pool_operated = 0
        self.spec, self.arch = result.spec, result.spec.hash
        self._template = template(policy)
        operated = result.versions[latest]
        self.versions = {new_version: operated} | ({latest: operated} if latest in self.pool else {})
        self.version = new_version
        self.optimizer = None if result.optimizer is None else (new_version, result.optimizer)
        self._swapping = False  # the architecture check refuses the old one's publishes from here
        self.surgeries += 1
        changes = result.report["changes"]
        game_version = changes["game_version"]["to"] != changes["game_version"]["from"]
        self.annealing.start([*changes["action_types_added"], *([GAME_VERSION] if game_version else [])], new_version)
        await self._notify()
        announced = time.perf_counter()
        if self.store is not None:
            await asyncio.to_thread(self.store.model_for, result.spec, policy)
            if latest in self.pool:  # a resumed run must find the pool in the new architecture
                await self._save_member(latest)
            await self._checkpoint()
        return new_version, announced

    async def _operate_pool(
        self, ops: list[SurgeryOp], probes: Probes, spec: ModelSpec, seed: int, report: dict[str, Any]
    ) -> None:
        """The members `_adopt` took out of the pool, operated and verified one at a time, the likeliest (highest q)
        first; each rejoins the pool as it is done, one the surgery is refused on stays out. Adds them to `report`."""
        started, dropped = time.perf_counter(), {}
        while self._awaiting:
            member = max(self._awaiting, key=lambda v: self._awaiting[v][0])
            q, arrays = self._awaiting[member]
            try:
                done = await asyncio.to_thread(operate_past, ops, probes, spec, {member: arrays}, seed)
            except SurgeryRejected as exc:
                del self._awaiting[member]
                dropped[str(member)] = str(exc)
                self.log.warning("opponent_pool_evicted", version=member, pool=len(self.pool), reason=str(exc))
                continue
            del self._awaiting[member]
            new, check = done[member]
            self.versions[member] = state_to_arrays(new)[0]
            self.pool.quality[member] = q
            self._pool_operated += 1
            report["verification"][str(member)] = check.to_dict()
            report["versions_operated"] = sorted([*report["versions_operated"], member])
            if self.store is not None:
                await self._save_member(member)
            self._evict_over_limit()
        report["pool_seconds"] = round(time.perf_counter() - started, 3)
        report["pool_dropped"] = dropped

    async def _save_member(self, member: int) -> None:
        """Checkpoint pool member `member` in the current architecture (under the lock: saves share one policy)."""
        assert self.store is not None
        counters = {"learner_steps": self.learner_steps}
        async with self._lock:
            await asyncio.to_thread(self.store.save, member, self.spec, self.versions[member], None, counters)

    # -- subscribers ----------------------------------------------------------------------

    async def on_subscribe(self, msg: Subscribe) -> None:
        self.system.ref(msg.address)  # refuses a malformed address before it is kept
        self.subscribers.add(msg.address)
        await self._notify({msg.address})

    async def _notify(self, addresses: set[str] | None = None) -> None:
        """Tell the subscribers (or `addresses`) the latest version, its architecture and the anneal shares."""
        msg = ParamsAvailable(self.version, self.arch, self.annealing.shares(self.version))
        targets = sorted(self.subscribers if addresses is None else addresses)
        results = await asyncio.gather(*(self._tell(a, msg) for a in targets))
        self.counts["notify_failures"] += results.count(False)

    async def _tell(self, address: str, msg: Any) -> bool:
        # A subscriber that is down keeps its place: its restart (same address) subscribes again.
        try:
            async with asyncio.timeout(NOTIFY_TIMEOUT_S):
                await self.system.ref(address).tell(msg, sender=self.ref)
            return True
        except (FiveActorsError, TimeoutError) as exc:
            self.log.info("subscriber_unreachable", subscriber=address, reason=str(exc) or type(exc).__name__)
            return False

    # -- annealing ------------------------------------------------------------------------

    async def on_eval_rating(self, msg: EvalRating) -> None:
        reverted = self.annealing.rating(int(msg.version), float(msg.trueskill))
        for anneal in reverted:
            self.log.warning(
                "surgery_reverted",
                change=anneal.name,
                version=msg.version,
                trueskill=msg.trueskill,
                baseline=anneal.baseline,
                surgery_version=anneal.start_version,
                reason=anneal.reverted,
            )
        if reverted:
            await self._notify()

    # -- the opponent pool ----------------------------------------------------------------

    async def on_opponent_request(self, _msg: OpponentRequest) -> Opponent:
        return Opponent(self.pool.sample(self.rng))

    async def on_match_result(self, msg: MatchResult) -> None:
        outcome = float(msg.outcome)
        key = "wins" if outcome >= 1.0 else "losses" if outcome <= 0.0 else "draws"
        self.counts[key] += 1
        updated = self.pool.record_win(msg.opponent_version) if outcome >= 1.0 else False
        q = self.pool.quality.get(msg.opponent_version)
        self.log.info("match_result", opponent_version=msg.opponent_version, outcome=outcome, q=q, q_updated=updated)

    # -- checkpoints ----------------------------------------------------------------------

    async def _checkpoint(self) -> None:
        """Save the latest version (with the newest optimizer state), then pool.json, then prune."""
        assert self.store is not None
        async with self._lock:
            version, state = self.version, self.versions[self.version]
            optimizer = self._moments
            counters = {
                "learner_steps": self.learner_steps,
                "optimizer_version": self.optimizer[0] if self.optimizer is not None else -1,
                **self.annealing.to_counters(version),
            }
            started = time.perf_counter()
            path = await asyncio.to_thread(self.store.save, version, self.spec, state, optimizer, counters)
            await asyncio.to_thread(
                self.store.save_pool, {"latest": version, "arch": self.arch, "pool": self.pool.to_dict()}
            )
            pruned = await asyncio.to_thread(self.store.prune, self.training.keep_checkpoints, {0, *self.pool.versions})
            self.last_checkpoint = version
            self.counts["checkpoints"] += 1
            self.log.info(
                "checkpoint_saved",
                version=version,
                path=str(path),
                seconds=round(time.perf_counter() - started, 4),
                optimizer=optimizer is not None,
                pruned=pruned,
            )

    # -- observability --------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Metrics for the live line, /metrics and tests."""
        probabilities = self.pool.probabilities()
        return {
            "version": self.version,
            "arch": self.arch,
            "learner_steps": self.learner_steps,
            "pool_size": len(self.pool),
            "pool": {str(v): {"q": round(q, 6), "p": round(probabilities[v], 6)} for v, q in self.pool.quality.items()},
            "subscribers": len(self.subscribers),
            "last_checkpoint": self.last_checkpoint,
            "last_refusal": self.last_refusal,
            "surgeries": self.surgeries,
            "surgery_pool_waiting": len(self._awaiting),
            "surgery_pool_operated": self._pool_operated,
            "anneal": self.annealing.shares(self.version),
            "reverted": {name: a.reverted for name, a in self.annealing.anneals.items() if a.reverted},
            **self.counts,
        }

    async def on_get_stats(self, _msg: GetStats) -> dict[str, Any]:
        return self.stats()

    def status(self) -> dict[str, Any]:
        stats = self.stats()
        keys = (
            "version",
            "learner_steps",
            "pool_size",
            "published",
            "refused",
            "checkpoints",
            "wins",
            "draws",
            "losses",
            "surgeries",
            "surgery_pool_waiting",
            "surgery_pool_operated",
        )
        metrics = {k: stats[k] for k in keys} | {
            f"anneal_share_{name}": share for name, share in stats["anneal"].items()
        }
        return {"progress": {"version": self.version, "arch": self.arch}, "metrics": metrics}
