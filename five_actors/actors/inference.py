"""InferenceActor: batched policy forward passes for many GameActors.

Requests are queued as they arrive and answered with deferred replies, so the mailbox keeps
draining while a forward pass runs. A batch is cut once `training.inference_batch_rows` rows
wait or the oldest request is `training.inference_deadline_ms` old; a request arriving while a
forward runs waits for the next batch. Rows are grouped by the policy version they play: the
latest parameters (the ParamServer tells a ParamsAvailable on each new version, then they are
fetched with GetParams) or a past version from an LRU cache, fetched on demand.

The actor holds each game actor's rows' LSTM state between its steps (InferRequest explains the
protocol), so a step's request and reply carry observations and actions, not the state: 64 rows of
a 512-unit LSTM are 256 KB each way. The game actor gives the state itself at each chunk's first
step (the learner needs it there anyway), so a restarted inference actor loses at most the memory
of the rest of a chunk: its requests are refused with StateUnavailable, and the game actor goes on
from a zero state on every row, marked as episode starts so that the learner sees what acting saw.

After a live surgery (a new architecture) the last policy of the replaced one is kept, and
requests of that architecture are still answered with it (every row, opponents included,
plays that policy): game actors finish the chunk in progress before they switch.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import structlog
import torch

from five_actors.actors.config import limit_torch_threads, run_settings
from five_actors.actors.messages import (
    GetParams,
    GetStats,
    InferReply,
    InferRequest,
    Params,
    ParamsAvailable,
    Subscribe,
)
from five_actors.actors.params import load_state
from five_actors.actors.subscription import resolve_once
from five_actors.config import Config
from five_actors.errors import ArchMismatch, FiveActorsError, ModelError, StateUnavailable, VersionUnavailable
from five_actors.model.policy import Policy, blank_policy
from five_actors.model.spec import ModelSpec
from five_actors.runtime.actor import Actor
from five_actors.supervisor.processes import current_device

log = structlog.get_logger("five_actors.inference")

LATEST = -1
"""The version a row asks for when it plays the latest parameters."""

PARAMS_TIMEOUT_S = 30.0
"""How long a GetParams to the ParamServer may take (a big model is many megabytes)."""

PAST_PARAMS_TIMEOUT_S = 5.0
"""How long fetching a past version for opponent rows may hold up batches."""

STATS_EVERY_S = 10.0
"""Interval of the `inference_stats` log event."""

MAX_STREAMS = 256
"""Game actors whose rows' LSTM state is held; past this, the least recently served one's is dropped."""

State = tuple[np.ndarray, np.ndarray]
"""An LSTM state (h, c), f32[R,H] each."""


def policy_from_params(params: Params, device: str, precision: str = "fp32") -> Policy:
    """A Policy in eval mode on `device` (with `precision`) holding `params`; ModelError/TrainingError when they do not
    fit."""
    spec = ModelSpec.from_dict(dict(params.spec))
    if spec.hash != params.arch:
        raise ModelError(
            f"params version {params.version} claim arch {params.arch} but their spec hashes to {spec.hash}"
        )
    policy = blank_policy(spec, precision)
    load_state(policy, dict(params.state))
    return policy.to(device).eval()


@dataclass
class _Replaced:
    """The last policy of the architecture a live surgery replaced."""

    arch: str
    version: int
    policy: Policy


@dataclass
class _Stream:
    """A game actor's rows' LSTM state, held between its steps: its last step `seq`, the state that step began from
    (for a retry of it) and the state it left (for the next step)."""

    seq: int
    before: State
    after: State


@dataclass
class _Pending:
    """A queued request and the future its deferred reply waits on."""

    request: InferRequest
    reply: asyncio.Future[InferReply]
    arrived: float


class InferenceActor(Actor):
    """Answers InferRequests in merged forward passes; args: `params` (the ParamServer's address)."""

    mailbox_size = 4096

    def __init__(self, params: str, config: Config | None = None, device: str | None = None) -> None:
        self.params_address = params
        self._config_arg = config
        self._device_arg = device
        self.version = LATEST
        self.arch = ""
        self.spec: ModelSpec | None = None
        self.policy: Policy | None = None
        self.past: OrderedDict[int, Policy] = OrderedDict()
        self.replaced: _Replaced | None = None
        self.replaced_rows = 0
        """Rows answered with the replaced architecture's policy (game actors finishing a chunk)."""
        self.streams: OrderedDict[str, _Stream] = OrderedDict()
        self.state_refused = 0
        """Requests refused because the state they would continue is not held here (StateUnavailable)."""
        self.pending: deque[_Pending] = deque()
        self.pending_rows = 0
        self._wake = asyncio.Event()
        self._ready = asyncio.Event()
        self._fetching: asyncio.Task[None] | None = None
        self._wanted = LATEST
        self._announcements = 0
        """ParamsAvailable messages heard: tells a fetch whether one came while it ran."""
        self.forwards = 0
        self.rows = 0
        self.requests = 0
        self.refused = 0
        self.latencies: deque[float] = deque(maxlen=2000)
        self.started = time.monotonic()

    async def on_start(self) -> None:
        config, _ = run_settings(self, self._config_arg)
        self.training = config.training
        self.device = self._device_arg or current_device(config.model.device)
        self.precision = config.model.precision
        limit_torch_threads(self.device, self.training.inference_torch_threads)
        self.log = log.bind(actor=self.ref.path)
        self.server = self.system.ref(self.params_address)
        self.spawn_task(self._subscribe(), "inference:subscribe")
        self.spawn_task(self._batches(), "inference:batches")
        self.spawn_task(self._report(), "inference:report")

    async def on_stop(self) -> None:
        self._drop_pending("the inference actor stopped")

    # -- parameters -----------------------------------------------------------------------

    async def _subscribe(self) -> None:
        """Subscribe to the ParamServer and fetch its latest parameters; again whenever it restarts."""
        loop = asyncio.get_running_loop()
        delay = 0.2
        while True:
            try:
                await self.server.tell(Subscribe(self.ref.address))
                # A restarted ParamServer may have gone back to its last checkpoint: take its
                # latest version even when it is older than the one held.
                await self._fetch_latest(LATEST, force=True)
                self._fetch_announced()  # a version announced while the first fetch ran
            except FiveActorsError as exc:
                self.log.info("params_unavailable", server=self.params_address, error=str(exc))
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            delay = 0.2
            gone: asyncio.Future[str] = loop.create_future()
            unwatch = self.system.watch_address(self.params_address, functools.partial(resolve_once, gone))
            try:
                reason = await gone
            finally:
                unwatch()
            self.log.warning("params_server_down", server=self.params_address, reason=reason)
            await asyncio.sleep(delay)

    async def on_params_available(self, msg: ParamsAvailable) -> None:
        if msg.version <= self.version and msg.arch == self.arch:
            return
        self._wanted = max(self._wanted, msg.version)
        self._announcements += 1
        if self.policy is not None:  # before the first parameters, the subscribe loop fetches them
            self._fetch_announced()

    def _fetch_announced(self) -> None:
        if self._wanted > self.version and (self._fetching is None or self._fetching.done()):
            self._fetching = self.spawn_task(self._fetch_wanted(), "inference:fetch")

    async def _fetch_wanted(self) -> None:
        """Fetch the newest announced version; announcements during the fetch are coalesced."""
        while self._wanted > self.version:
            held, heard = self.version, self._announcements
            try:
                await self._fetch_latest(LATEST)
            except FiveActorsError as exc:
                self.log.warning("params_fetch_failed", version=self._wanted, error=str(exc))
                return
            if self.version == held and self._announcements == heard:
                # The server's latest is not newer after all (it restarted from a checkpoint): forget
                # what its earlier incarnation announced, or that would hide the versions it publishes next.
                self._wanted = self.version
                return

    async def _fetch_latest(self, version: int, force: bool = False) -> None:
        """Fetch `version` (-1: the latest) and make it the latest held, unless older (or `force`)."""
        params = await self.server.ask(GetParams(version), timeout=PARAMS_TIMEOUT_S)
        if not isinstance(params, Params):
            raise ModelError(f"GetParams({version}) was answered with {type(params).__name__}, not Params")
        try:
            policy = await asyncio.to_thread(policy_from_params, params, self.device, self.precision)
        except FiveActorsError as exc:
            self.log.error("params_refused", version=params.version, arch=params.arch, error=str(exc))
            raise
        if params.version <= self.version and params.arch == self.arch and not force:
            return
        if params.arch != self.arch or params.version < self.version:
            # Past versions of another architecture cannot play this one's rows, and after a
            # ParamServer restored an older checkpoint the cached ones may be gone or different.
            self.past.clear()
        if params.arch != self.arch and self.policy is not None:
            self.replaced = _Replaced(self.arch, self.version, self.policy)
        self.policy, self.version, self.arch, self.spec = policy, params.version, params.arch, policy.spec
        self.log.info("params_loaded", version=params.version, arch=params.arch, device=self.device)
        self._ready.set()
        self._wake.set()

    def _remember(self, version: int, policy: Policy) -> None:
        self.past[version] = policy
        self.past.move_to_end(version)
        while len(self.past) > self.training.inference_cache_versions:
            self.past.popitem(last=False)

    async def _past_policy(self, version: int) -> Policy:
        """A past version from the cache, fetched from the ParamServer on a miss."""
        cached = self.past.get(version)
        if cached is not None:
            self.past.move_to_end(version)
            return cached
        # Batches wait while a past version is fetched: a ParamServer that does not answer soon
        # gets those rows refused (their games then play the latest) rather than stall every game.
        params = await self.server.ask(GetParams(version), timeout=PAST_PARAMS_TIMEOUT_S)
        policy = await asyncio.to_thread(policy_from_params, params, self.device, self.precision)
        if params.arch != self.arch:
            raise ModelError(f"past version {version} has arch {params.arch}, not the latest's {self.arch}")
        self.log.info("past_params_loaded", version=version)
        self._remember(version, policy)
        return policy

    # -- requests -------------------------------------------------------------------------

    async def on_infer_request(self, msg: InferRequest) -> asyncio.Future[InferReply]:
        self.requests += 1
        if self.policy is not None:
            try:
                self._check(msg)
            except ModelError:
                self.refused += 1
                raise
        future: asyncio.Future[InferReply] = asyncio.get_running_loop().create_future()
        self.pending.append(_Pending(msg, future, time.monotonic()))
        self.pending_rows += _rows(msg)
        self._wake.set()
        return future

    def _check(self, msg: InferRequest) -> None:
        """Refuse a request that does not fit the model held (or the replaced one), naming what is wrong."""
        spec = self.spec
        assert spec is not None
        if self.replaced is not None and msg.arch == self.replaced.arch:
            spec = self.replaced.policy.spec
        elif msg.arch != self.arch:
            raise ArchMismatch(
                f"InferRequest for arch {msg.arch!r}, but this inference actor holds arch {self.arch!r} (version "
                f"{self.version})"
            )
        obs = msg.obs
        if not isinstance(obs, np.ndarray) or obs.ndim != 2 or obs.shape[1] != spec.obs.size or obs.dtype != np.float32:
            raise ModelError(f"InferRequest obs must be float32 [rows, {spec.obs.size}], got {_describe(obs)}")
        rows, lstm = obs.shape[0], spec.lstm_size
        if rows < 1:
            raise ModelError("InferRequest has no rows")
        for name in ("h", "c"):
            value = getattr(msg, name)
            shaped = isinstance(value, np.ndarray) and value.shape in ((rows, lstm), (0, lstm))
            if not shaped or value.dtype != np.float32:
                raise ModelError(
                    f"InferRequest {name} must be float32 [{rows}, {lstm}] (or [0, {lstm}]: the held state), got "
                    f"{_describe(value)}"
                )
        if msg.h.shape != msg.c.shape:
            raise ModelError(f"InferRequest h is {_describe(msg.h)} but c is {_describe(msg.c)}")
        if not len(msg.h) and not msg.stream:
            raise ModelError("InferRequest takes the held LSTM state (h, c of 0 rows) but names no stream")
        if msg.starts is not None and (
            not isinstance(msg.starts, np.ndarray) or msg.starts.shape != (rows,) or msg.starts.dtype != np.bool_
        ):
            raise ModelError(f"InferRequest starts must be bool [{rows}], got {_describe(msg.starts)}")
        picked = msg.rows
        if (
            picked is not None
            and len(picked)
            and (
                not isinstance(picked, np.ndarray)
                or picked.shape != (rows,)
                or not np.issubdtype(picked.dtype, np.integer)
            )
        ):
            raise ModelError(f"InferRequest rows must be int64 [{rows}], got {_describe(msg.rows)}")
        if (
            not isinstance(msg.versions, np.ndarray)
            or msg.versions.shape != (rows,)
            or not np.issubdtype(msg.versions.dtype, np.integer)
        ):
            raise ModelError(f"InferRequest versions must be int64 [{rows}], got {_describe(msg.versions)}")
        expected = spec.actions.mask_shapes(rows)
        if not isinstance(msg.masks, dict) or set(msg.masks) != set(expected):
            keys = sorted(msg.masks) if isinstance(msg.masks, dict) else type(msg.masks).__name__
            raise ModelError(f"InferRequest masks have keys {keys}, expected {sorted(expected)}")
        for name, shape in expected.items():
            mask = msg.masks[name]
            if not isinstance(mask, np.ndarray) or mask.shape != shape or mask.dtype != np.bool_:
                raise ModelError(f"InferRequest mask {name!r} must be bool {list(shape)}, got {_describe(mask)}")
        if not np.isfinite(obs).all():
            row, column = (int(i) for i in np.argwhere(~np.isfinite(obs))[0])
            raise ModelError(f"InferRequest obs row {row} column {column} is {obs[row, column]}")

    async def _batches(self) -> None:
        """Cut batches from the queue and run them, one forward pass at a time."""
        try:
            await self._ready.wait()
            deadline_s = self.training.inference_deadline_ms / 1000.0
            while True:
                while not self.pending:
                    self._wake.clear()
                    await self._wake.wait()
                wait = self.pending[0].arrived + deadline_s - time.monotonic()
                if self._room_for_another() and wait > 0:
                    self._wake.clear()
                    try:
                        async with asyncio.timeout(wait):
                            while self._room_for_another():
                                await self._wake.wait()
                                self._wake.clear()
                    except TimeoutError:
                        pass
                await self._run_batch(self._take_batch())
        finally:
            self._drop_pending("the inference actor stopped")

    def _room_for_another(self) -> bool:
        """Whether the batch has room for one more request the size of the oldest waiting one: only then is it worth
        waiting for one (with 320-row requests and 512-row batches, a second request never joins the first, and
        waiting for it only delayed the first by the deadline)."""
        return self.pending_rows + _rows(self.pending[0].request) <= self.training.inference_batch_rows

    def _take_batch(self) -> list[_Pending]:
        """Whole requests from the head of the queue, up to the batch size (at least one)."""
        batch: list[_Pending] = []
        rows = 0
        while self.pending and (
            not batch or rows + _rows(self.pending[0].request) <= self.training.inference_batch_rows
        ):
            item = self.pending.popleft()
            n = _rows(item.request)
            rows += n
            self.pending_rows -= n
            batch.append(item)
        return batch

    async def _run_batch(self, batch: list[_Pending]) -> None:
        """Check, group by version, forward, and reply to each request with its rows."""
        live: list[_Pending] = []
        for item in batch:
            if item.reply.done():
                continue
            try:
                self._check(item.request)  # queued before the first parameters arrived, or across an arch change
            except ModelError as exc:
                self.refused += 1
                self.log.warning("infer_refused", error=str(exc))
                item.reply.set_exception(exc)
                continue
            live.append(item)
        if self.replaced is not None:
            replaced = self.replaced
            finishing = [item for item in live if item.request.arch == replaced.arch]
            live = [item for item in live if item.request.arch != replaced.arch]
            if finishing:
                self.replaced_rows += sum(_rows(item.request) for item in finishing)
                await self._answer(finishing, {LATEST: replaced.policy}, replaced.version, replaced.arch)
        if not live:
            return
        # The latest version as of now: a newer one may arrive while past versions are fetched.
        latest, policy = self.version, self.policy
        assert policy is not None
        versions = np.concatenate([item.request.versions for item in live]).astype(np.int64)
        policies: dict[int, Policy] = {LATEST: policy}
        for version in np.unique(versions[(versions != LATEST) & (versions != latest)]).tolist():
            try:
                policies[version] = await self._past_policy(version)
            except FiveActorsError as exc:
                live = self._fail_rows_of(live, version, exc)
        if live:
            await self._answer(live, policies, latest, self.arch)

    def _state_in(self, msg: InferRequest) -> State:
        """The rows' LSTM state before this step: the request's own, or the one held for its stream (InferRequest)."""
        if len(msg.h):
            return msg.h, msg.c
        held = self.streams.get(msg.stream)
        if held is None:
            raise StateUnavailable(
                f"no LSTM state is held for {msg.stream!r} (this inference actor started after its step {msg.seq - 1}, "
                "or another one served it)"
            )
        units, asked = held.after[0].shape[1], msg.h.shape[1]
        if units != asked:  # a live surgery widened the LSTM: the asker sends the state
            raise StateUnavailable(f"{msg.stream!r} holds {units} LSTM units, its request {asked}")
        if not msg.advance:
            if msg.seq != held.seq:
                raise StateUnavailable(f"{msg.stream!r} asks after its step {msg.seq}, but its held step is {held.seq}")
            rows = msg.rows if msg.rows is not None and len(msg.rows) else np.arange(len(msg.obs))
            held_rows = len(held.after[0])
            if rows.min() < 0 or rows.max() >= held_rows:
                raise ModelError(f"InferRequest rows must lie in [0, {held_rows}), got {rows.min()}..{rows.max()}")
            return held.after[0][rows], held.after[1][rows]
        if len(held.after[0]) != len(msg.obs):
            raise StateUnavailable(f"{msg.stream!r} has {len(msg.obs)} rows, its held state {len(held.after[0])}")
        if msg.seq == held.seq:  # asked again after a timeout: start where the first answer started
            return held.before
        if msg.seq != held.seq + 1:
            raise StateUnavailable(f"step {msg.seq} of {msg.stream!r} does not follow its held step {held.seq}")
        if msg.starts is None:
            return held.after
        keep = ~msg.starts[:, None]
        return held.after[0] * keep, held.after[1] * keep

    def _hold(self, msg: InferRequest, before: State, after: State) -> None:
        self.streams[msg.stream] = _Stream(msg.seq, before, after)
        self.streams.move_to_end(msg.stream)
        while len(self.streams) > MAX_STREAMS:
            dropped, _ = self.streams.popitem(last=False)
            self.log.info("lstm_state_dropped", stream=dropped, held=MAX_STREAMS)

    async def _answer(self, live: list[_Pending], policies: dict[int, Policy], latest: int, arch: str) -> None:
        """One forward over the requests `live` (all of architecture `arch`) and a reply to each."""
        states: list[State] = []
        ready: list[_Pending] = []
        for item in live:
            try:
                states.append(self._state_in(item.request))
            except FiveActorsError as exc:
                self.refused += 1
                self.state_refused += isinstance(exc, StateUnavailable)
                self.log.warning("infer_refused", stream=item.request.stream, error=str(exc))
                if not item.reply.done():  # the asker may have given up while past versions were fetched
                    item.reply.set_exception(exc)
                continue
            ready.append(item)
        live = ready
        if not live:
            return
        try:
            result = await asyncio.to_thread(_forward, live, states, policies, latest)
        except ModelError as exc:  # e.g. a mask leaving a needed head no legal choice
            self.log.warning("infer_refused", error=str(exc), requests=len(live))
            for item in live:
                self.refused += 1
                if not item.reply.done():
                    item.reply.set_exception(exc)
            return
        self.forwards += 1
        self.rows += sum(len(item.request.versions) for item in live)
        now = time.monotonic()
        start = 0
        for item, before in zip(live, states, strict=True):
            n, msg = len(item.request.versions), item.request
            actions, logp, value, h, c, versions = (part[start : start + n] for part in result)
            if msg.stream and msg.advance:
                self._hold(msg, before, (h, c))
            if not item.reply.done():
                if not msg.want_state:
                    h = c = h[:0]
                item.reply.set_result(InferReply(actions, logp, value, h, c, versions, arch))
                self.latencies.append(now - item.arrived)
            start += n

    def _fail_rows_of(self, live: list[_Pending], version: int, exc: FiveActorsError) -> list[_Pending]:
        """Refuse the requests with rows of a version that could not be loaded; keep the rest."""
        error = VersionUnavailable(f"policy version {version} is not available: {exc}")
        self.log.warning("infer_refused", version=version, error=str(exc))
        keep = []
        for item in live:
            if np.any(np.asarray(item.request.versions) == version):
                self.refused += 1
                item.reply.set_exception(error)
            else:
                keep.append(item)
        return keep

    def _drop_pending(self, why: str) -> None:
        while self.pending:
            item = self.pending.popleft()
            if not item.reply.done():
                item.reply.cancel(why)
        self.pending_rows = 0

    # -- stats ----------------------------------------------------------------------------

    async def on_get_stats(self, msg: GetStats) -> dict[str, Any]:
        return self.stats()

    def stats(self) -> dict[str, Any]:
        """Batch sizes, latency, queue depth and throughput since this incarnation started."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        latencies = np.array(self.latencies) * 1000.0 if self.latencies else None
        return {
            "version": self.version,
            "arch": self.arch,
            "forwards": self.forwards,
            "rows": self.rows,
            "requests": self.requests,
            "refused": self.refused,
            "replaced_arch_rows": self.replaced_rows,
            "mean_batch_rows": self.rows / self.forwards if self.forwards else 0.0,
            "latency_p50_ms": float(np.percentile(latencies, 50)) if latencies is not None else None,
            "latency_p99_ms": float(np.percentile(latencies, 99)) if latencies is not None else None,
            "queue_requests": len(self.pending),
            "queue_rows": self.pending_rows,
            "forwards_per_s": self.forwards / elapsed,
            "rows_per_s": self.rows / elapsed,
            "cached_versions": sorted(self.past),
            "held_streams": len(self.streams),
            "state_refused": self.state_refused,
        }

    def status(self) -> dict[str, Any]:
        stats = self.stats()
        metrics = {f"inference_{k}": v for k, v in stats.items() if isinstance(v, (int, float)) and v is not None}
        return {"progress": {"forwards": self.forwards, "rows": self.rows}, "metrics": metrics, "version": self.version}

    async def _report(self) -> None:
        while True:
            await asyncio.sleep(STATS_EVERY_S)
            stats = self.stats()
            stats.pop("arch")
            self.log.info("inference_stats", **stats)


def _rows(request: InferRequest) -> int:
    """Rows of a request (0 for one too malformed to tell; it is refused when checked)."""
    versions = request.versions
    return len(versions) if isinstance(versions, np.ndarray) and versions.ndim == 1 else 0


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} {list(value.shape)}"
    return type(value).__name__


def _forward(
    live: list[_Pending], states: list[State], policies: dict[int, Policy], latest: int
) -> tuple[np.ndarray, ...]:
    """One batch's forward passes (one per version group) from each request's LSTM state `states`, off the event
    loop; rows in request order."""
    requests = [item.request for item in live]
    obs = np.concatenate([r.obs for r in requests])
    masks = {k: np.concatenate([r.masks[k] for r in requests]) for k in requests[0].masks}
    h = np.concatenate([s[0] for s in states])
    c = np.concatenate([s[1] for s in states])
    asked = np.concatenate([r.versions for r in requests]).astype(np.int64)
    # Rows of a version without a policy of its own (past opponents in a replaced architecture's
    # requests) play the latest; a current-architecture request never has such rows.
    asked[(asked == latest) | ~np.isin(asked, list(policies))] = LATEST
    rows = len(asked)
    columns = next(iter(policies.values())).spec.actions.columns
    actions = np.zeros((rows, columns), np.int64)
    logp = np.zeros(rows, np.float32)
    value = np.zeros(rows, np.float32)
    h_out = np.zeros_like(h)
    c_out = np.zeros_like(c)
    used = np.where(asked == LATEST, latest, asked)
    with torch.inference_mode():
        for version, policy in policies.items():
            index = np.flatnonzero(asked == version)
            if not len(index):
                continue
            device = policy.device
            state = (torch.as_tensor(h[index], device=device), torch.as_tensor(c[index], device=device))
            out = policy.act(obs[index], {k: v[index] for k, v in masks.items()}, state)
            actions[index] = out.actions.cpu().numpy()
            logp[index] = out.logp.float().cpu().numpy()
            value[index] = out.value.float().cpu().numpy()
            h_out[index] = out.state[0].float().cpu().numpy()
            c_out[index] = out.state[1].float().cpu().numpy()
    return actions, logp, value, h_out, c_out, used
