"""GameActor: steps a batch of games, acts through an InferenceActor, ships rollout chunks.

The games are the run's environment (`[env]`, five_actors.envs): the lane game, or copies of a
gymnasium environment (one row each) or of a PettingZoo parallel one (a row per agent); the returns
of finished episodes are kept for `mean_return`. A game of two teams (the lane game, or a PettingZoo
environment with `env.teams = 2`) is self-play: every agent of both teams of every game is a row of
one batch, and at each game's start one team plays a past version from the ParamServer's opponent
pool with probability `training.past_opponent_share`, else both teams play the latest policy. One
draw from the pool serves `training.opponent_draw_games` such games (by default as many as the actor
plays at once), so a batch holds few past versions and the inference actor runs few forward passes for
them; each game still meets version i with the pool's probability. The past version's side alternates
from one such game to the next in each game slot (slots start on alternate sides), so the learning
policy meets past opponents from both sides of the map. Each step sends every
row's observation and masks in one InferRequest and applies the reply. The inference actor holds
the rows' LSTM state between steps; this actor gives it at each chunk's first step (it asks for it
in the reply of the step before), which the chunk ships as its initial state. Should the inference
actor not hold it (it restarted, or another one took over), every row goes on from a zero state,
marked as an episode start (`state_resets`).

Rows played by the latest policy are learned from: once a chunk of `rollout_chunk_steps` steps
has `gae_window` more steps after it (plus one for the bootstrap value), GAE runs over chunk
plus window and the chunk ships as one Rollout to the next learner (round-robin), without
waiting for games to end. A row whose policy changed inside a chunk (its game ended and the
next one is against a past version) is left out of that chunk and counted.

A live surgery (a new architecture, announced by the ParamServer's ParamsAvailable) is taken at
a chunk boundary: the actor plays on under the old architecture (the inference actor keeps its
last policy for this) until every buffered step fits in whole chunks, ships them (the last ones
with a shorter GAE window), then switches: new LSTM units start at 0, observations and masks
are read into the new layout by name. Should the inference actor refuse the old architecture
first (it restarted), the whole chunks buffered ship at once and the rest of the steps are
dropped (`steps_dropped_arch`).

Annealing: each ParamsAvailable carries the share of games in which each change of a live
surgery is in use (five_actors.surgery.anneal): an added action type is legal only in the first
share of this actor's games; outside the `game_version` share a game is seen as the version
before (its newer features read 0, its newer action types are masked). The masks and
observations shipped in chunks are the ones the policy acted on.

Accounting: every chunk made (one row's `rollout_chunk_steps` steps, `chunks_made`) is kept in
the actor's ChunkLedger until a learner reports its fate (ChunkFates): trained, refused, dropped
or evicted; until then it is outstanding in that learner. Chunks made while no learner is up,
and the outstanding chunks of a learner that exits, are lost (`chunks_lost`).

Faults: an InferRequest that fails (the inference actor died or timed out) is retried, on the
next inference actor when there are several, else on the same address once it is back; each
failure counts as a lost step. A chunk whose learner is down is counted as lost.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
import zlib
from collections import deque
from typing import Any

import numpy as np
import structlog

from five_actors.actors.chunks import StepRecord, build_rollout, chunk_rewards
from five_actors.actors.config import run_settings
from five_actors.actors.inference import LATEST, State
from five_actors.actors.ledger import ChunkLedger
from five_actors.actors.messages import (
    ChunkFates,
    GetParams,
    GetStats,
    InferReply,
    InferRequest,
    MatchResult,
    Opponent,
    OpponentRequest,
    ParamsAvailable,
    Rollout,
)
from five_actors.actors.subscription import keep_subscribed, resolve_once
from five_actors.config import Config
from five_actors.envs import make_env
from five_actors.errors import (
    ActorDown,
    ArchMismatch,
    AskTimeout,
    FiveActorsError,
    ModelError,
    RemoteError,
    StateUnavailable,
    VersionUnavailable,
)
from five_actors.game.env import LaneGame
from five_actors.game.layout import Step, project_masks, project_obs
from five_actors.game.spec import action_spec, obs_spec, sized_config
from five_actors.model.spec import ModelSpec
from five_actors.runtime.actor import Actor
from five_actors.surgery.anneal import GAME_VERSION, apply_anneal, apply_game_version, games_allowed

log = structlog.get_logger("five_actors.game_actor")

RETURNS_KEPT = 100
"""Finished episodes over which `mean_return` is taken (the usual "last 100 episodes")."""

OPPONENT_TIMEOUT_S = 2.0
"""How long an OpponentRequest may take before the game is played against the latest policy."""

RETRY_MAX_S = 1.0
"""Longest wait between two tries of a failed InferRequest to the same address."""

LEARNER_GRACE_S = 0.2
"""A re-established watch that has not fired within this time means the learner is back."""

BACKPRESSURE_LOG_S = 10.0
"""While held back by `training.max_outstanding_chunks`, a GameActor logs `waiting_for_learner` this often."""


class GameActor(Actor):
    """Plays `training.games_per_actor` games of the run's environment; args: `inference` (one address or a list),
    `learners` (addresses), `params` (the ParamServer's address)."""

    def __init__(
        self,
        inference: str | list[str],
        learners: list[str],
        params: str,
        config: Config | None = None,
        seed: int | None = None,
    ) -> None:
        self.inference_addresses = [inference] if isinstance(inference, str) else list(inference)
        if not self.inference_addresses:
            raise ValueError("GameActor needs at least one inference actor address")
        self.learner_addresses = list(learners)
        self.params_address = params
        self._config_arg = config
        self.seed = seed
        self.started = time.monotonic()
        self.batch_steps = 0
        self.env_steps = 0
        self.rollouts_sent = 0
        self.ledger = ChunkLedger()
        self.chunks_partial = 0
        self.lost_steps = 0
        self.infer_refused = 0
        self.state_resets = 0
        """Steps from which every row went on from a zero LSTM state, the inference actor holding none for them."""
        self.backpressure_s = 0.0
        """Seconds spent waiting for a learner to train this actor's chunks (training.max_outstanding_chunks)."""
        self._fates_heard = asyncio.Event()
        self.arch_switches = 0
        self.steps_dropped_arch = 0
        self.games_finished = 0
        self.past_games = 0
        self.past_games_by_side = [0, 0]
        """Games against a past version, by the team the latest policy played in them."""
        self.opponent_draws = 0
        """Past versions drawn from the ParamServer's pool; each serves `draw_games` games."""
        self.drawn, self.draw_left = LATEST, 0
        """The past version drawn last, and the games it is still to serve."""
        self.match_results = 0
        self.episodes = 0
        self.episodes_truncated = 0
        self.returns: deque[float] = deque(maxlen=RETURNS_KEPT)
        """Returns of the latest finished episodes (environments that report `episode_return`)."""
        self.reward_totals: dict[str, float] = {}
        self.buffer: list[StepRecord] = []
        self.announced_arch: str | None = None
        """The architecture the ParamServer announced, while it differs from the one played."""
        self.latest_version = 0
        """The newest parameter version announced: the game's team spirit follows it (game.team_spirit)."""
        self.anneal: dict[str, float] = {}
        """The share of games in which each change of a live surgery is in use (the latest announcement's)."""
        self.annealed_taken: dict[str, int] = {}
        """Times each annealed action type was chosen."""
        # Learners count as up until a watch says otherwise, so the first chunks are not lost
        # while the first watches are being set up.
        self.learner_up = {address: True for address in self.learner_addresses}
        self._next_learner = 0
        self._next_inference = 0

    async def on_start(self) -> None:
        config, _ = run_settings(self, self._config_arg)
        self.training = training = config.training
        # Each game actor plays its own games: its seed comes from the run's and its path.
        seed = self.seed if self.seed is not None else (training.seed + zlib.crc32(self.ref.path.encode())) % 2**31
        self.lane = config.env.is_lane
        self.self_play = config.env.self_play
        self.game = await asyncio.to_thread(
            make_env, config.env, config.game, training.games_per_actor, seed
        )  # may compile numba kernels
        self.spec = ModelSpec.build(self.game.obs_spec, self.game.action_spec, config.model)
        self.arch = self.spec.hash
        seconds_per_step = (
            1.0 / config.game.steps_per_second if self.lane else float(getattr(self.game, "seconds_per_step"))
        )
        self.gamma = config.ppo.gamma(seconds_per_step)
        self.lam = config.ppo.gae_lambda
        self.rng = np.random.default_rng(seed)
        self.opponents = np.full(self.game.num_games, LATEST, np.int64)
        self.past_team = np.arange(self.game.num_games, dtype=np.int64) % 2
        """The team that plays the opponent in each game where it is a past version (see the module docstring)."""
        share = training.past_opponent_share
        self.draw_games = training.opponent_draw_games or max(1, math.ceil(training.games_per_actor * share))
        self.log = log.bind(actor=self.ref.path)
        self.params = self.system.ref(self.params_address)
        # Game actors spread over the inference actors; each moves on to the next one on a failure.
        self._next_inference = zlib.crc32(self.ref.path.encode()) % len(self.inference_addresses)
        for address in self.learner_addresses:
            self.spawn_task(self._watch_learner(address), f"game:watch:{address}")
        self.spawn_task(keep_subscribed(self, self.params_address, self.log), "game:subscribe")
        self.spawn_task(self._play(), "game:play")

    # -- playing --------------------------------------------------------------------------

    async def _play(self) -> None:
        # The first game calls of a process may compile numba kernels for many seconds: they run
        # off the event loop, as links need their heartbeats meanwhile. Later steps take about a
        # millisecond, less than a thread hand-off costs on a busy machine.
        obs, masks = await asyncio.to_thread(self.game.reset, self.seed)
        # The rows' LSTM state before the next step where this actor knows it (else the inference actor holds it).
        state: State | None
        state, starts = self._fresh_start()
        for g in range(self.game.num_games):
            await self._pick_opponent(g)
        chunk_steps = self.training.rollout_chunk_steps
        while True:
            await self._hold_back()
            if self.announced_arch is not None and self._at_chunk_boundary() and state is not None:
                self.announced_arch = None
                spec = await self._latest_spec()
                if spec is not None and spec.hash != self.arch:
                    obs, masks, state, starts = await self._switch_arch(spec, obs, masks, state, starts)
            latest = self._row_versions() == LATEST
            model_obs, model_masks = self._model_inputs(obs, masks)
            # The state is needed where the next step begins a chunk, and for a surgery's hand-over.
            want_state = (len(self.buffer) + 1) % chunk_steps == 0 or self.announced_arch is not None
            try:
                reply = await self._infer(model_obs, model_masks, state, starts, want_state)
            except _ArchChanged as change:
                obs, masks, state, starts = await self._switch_arch(change.spec, obs, masks, state, starts)
                continue
            except _StateLost:
                state, starts = self._fresh_start()
                self.state_resets += 1
                self.log.warning("lstm_state_reset", step=self.batch_steps, state_resets=self.state_resets)
                continue
            actions = np.array(reply.actions)  # writable: a read-only array would make numba compile the kernel again
            self._count_annealed(actions)
            game = self.game  # rebuilt by a surgery to another game version
            step = await asyncio.to_thread(game.step, actions) if self.batch_steps == 0 else game.step(actions)
            rewards = await self._bootstrapped(step, model_masks)
            self.buffer.append(
                StepRecord(
                    model_obs,
                    model_masks,
                    state,
                    actions,
                    np.asarray(reply.logp),
                    np.asarray(reply.value),
                    rewards,
                    step.dones,
                    starts,
                    np.asarray(reply.versions),
                    latest,
                    {k.removeprefix("reward/"): v for k, v in step.infos.items() if k.startswith("reward/")},
                )
            )
            self.batch_steps += 1
            self.env_steps += game.num_games
            self._add_rewards(step.infos, latest)
            self._add_returns(step)
            keep = ~step.dones[:, None]
            state = (np.asarray(reply.h) * keep, np.asarray(reply.c) * keep) if want_state else None
            starts = step.dones
            obs, masks = step.obs, step.masks
            for g in np.flatnonzero(step.dones[:: self.per_game]).tolist():
                await self._game_over(g, step.infos.get("win"))
            await self._ship_ready()

    @property
    def per_game(self) -> int:
        """Rows of one game (a game-size surgery changes it)."""
        return self.game.teams * self.game.agents_per_team

    @property
    def lane_game(self) -> LaneGame:
        """The game stepped, where it is the lane game (`self.lane`)."""
        assert isinstance(self.game, LaneGame)
        return self.game

    def _row_versions(self) -> np.ndarray:
        if not self.self_play:
            return np.full(self.game.num_rows, LATEST, np.int64)
        return row_versions(self.opponents, self.past_team, self.game.agents_per_team)

    async def _pick_opponent(self, game: int) -> None:
        """Decide at a game's start whether a team plays a past version; never in a game of one team. The version is
        the one drawn last from the ParamServer's pool until it has served `draw_games` games, then a new draw."""
        self.opponents[game] = LATEST
        if not self.self_play or self.rng.random() >= self.training.past_opponent_share:
            return
        if self.draw_left == 0:
            try:
                reply = await self.params.ask(OpponentRequest(), timeout=OPPONENT_TIMEOUT_S)
            except FiveActorsError as exc:
                self.log.warning("opponent_unavailable", error=str(exc))
                return
            if not isinstance(reply, Opponent) or reply.version == LATEST:
                return
            self.drawn, self.draw_left = reply.version, self.draw_games
            self.opponent_draws += 1
        self.draw_left -= 1
        self.opponents[game] = self.drawn
        self.past_team[game] ^= 1
        self.past_games += 1
        self.past_games_by_side[1 - int(self.past_team[game])] += 1

    async def _game_over(self, game: int, win: np.ndarray | None) -> None:
        """Report a game against a past version to the ParamServer, then pick the next opponent.

        `win` is the step's per-row outcome (1 win, 0.5 draw, 0 loss); the latest policy's is its team's.
        """
        self.games_finished += 1
        opponent = int(self.opponents[game])
        if opponent != LATEST and win is not None:
            latest_team = 1 - int(self.past_team[game])
            outcome = float(win[game * self.per_game + latest_team * self.game.agents_per_team])
            try:
                await self.params.tell(MatchResult(opponent, outcome))
                self.match_results += 1
            except FiveActorsError as exc:
                self.log.warning("match_result_lost", opponent=opponent, error=str(exc))
        await self._pick_opponent(game)

    async def _bootstrapped(self, step: Step, masks: dict[str, np.ndarray]) -> np.ndarray:
        """The step's rewards, plus gamma * V(last observation) on rows whose episode a time limit cut
        (five_actors.model.baseline explains why); such rows are rare, and asked for in one more request."""
        truncated = step.infos.get("truncated")
        cut = np.flatnonzero(truncated) if truncated is not None else np.zeros(0, np.int64)
        if not len(cut):
            return step.rewards
        self.episodes_truncated += len(cut)
        final = step.infos["final_obs"][cut]
        if self.spec.obs != self.game.obs_spec:
            final = project_obs(final, self.game.obs_spec, self.spec.obs)
        try:
            # From the state the step left these rows in, held by the inference actor, which stays where it is.
            value = await self._infer(final, {k: v[cut] for k, v in masks.items()}, rows=cut)
        except (_ArchChanged, _StateLost):
            return step.rewards  # the next step switches architecture or resets the state; these rows count as ended
        rewards = step.rewards.copy()
        rewards[cut] += np.float32(self.gamma) * np.asarray(value.value, np.float32)
        return rewards

    async def _infer(
        self,
        obs: np.ndarray,
        masks: dict[str, np.ndarray],
        state: State | None = None,
        starts: np.ndarray | None = None,
        want_state: bool = False,
        rows: np.ndarray | None = None,
    ) -> InferReply:
        """Ask for this step's actions of every row from `state` (None: the state the inference actor holds, zeroed
        on the rows of `starts`), retrying through inference restarts (each failure is a lost step); with `rows`, the
        values of those rows from the state this step left, without moving on. Raises _StateLost where the state is
        not held."""
        empty = np.zeros((0, self.spec.lstm_size), np.float32)
        h, c = state if state is not None else (empty, empty)
        delay = 0.05
        while True:
            address = self.inference_addresses[self._next_inference]
            versions = self._row_versions()  # a refused past version is replaced by the latest below
            request = InferRequest(
                obs,
                masks,
                h,
                c,
                versions if rows is None else versions[rows],
                self.arch,
                self.ref.address,
                self.batch_steps,
                starts,
                rows,
                advance=rows is None,
                want_state=want_state,
            )
            try:
                reply = await self.system.ask(address, request, self.training.infer_timeout_s)
            except (ActorDown, AskTimeout) as exc:
                self.lost_steps += 1
                self.log.warning("infer_failed", inference=address, error=str(exc), lost_steps=self.lost_steps)
            except RemoteError as exc:
                self.infer_refused += 1
                self.log.warning("infer_refused", inference=address, error=str(exc))
                if exc.is_a(ArchMismatch):  # the inference actor holds another architecture
                    spec = await self._latest_spec()
                    if spec is not None and spec.hash != self.arch:
                        raise _ArchChanged(spec) from None
                if exc.is_a(StateUnavailable):
                    raise _StateLost from None
                # A past version the inference actor cannot load: play those games against the latest.
                if exc.is_a(VersionUnavailable) and np.any(self.opponents != LATEST):
                    self.opponents[:] = LATEST
                    self.draw_left = 0
            else:
                if not isinstance(reply, InferReply) or np.shape(reply.actions)[0] != obs.shape[0]:
                    raise ModelError(f"{address} answered {obs.shape[0]} rows with {_rows_of(reply)}")
                return reply
            if len(self.inference_addresses) > 1:
                self._next_inference = (self._next_inference + 1) % len(self.inference_addresses)
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)

    # -- a live surgery's hand-over -------------------------------------------------------

    async def on_params_available(self, msg: ParamsAvailable) -> None:
        self.announced_arch = msg.arch if msg.arch != self.arch else None
        self.latest_version = max(self.latest_version, msg.version)
        if self.lane:
            self.lane_game.follow_version(self.latest_version)
        anneal = {str(k): float(v) for k, v in dict(msg.anneal).items()}
        if anneal != self.anneal:
            self.log.info("anneal_shares", version=msg.version, shares=anneal)
        self.anneal = anneal

    def _at_chunk_boundary(self) -> bool:
        """Every buffered step ships in whole chunks, each with a step after it for the bootstrap value (or none is
        buffered)."""
        return not self.buffer or (len(self.buffer) - 1) % self.training.rollout_chunk_steps == 0

    async def _latest_spec(self) -> ModelSpec | None:
        """The architecture of the ParamServer's latest version (None when it does not answer)."""
        try:
            params = await self.params.ask(GetParams(-1), timeout=10.0)
        except FiveActorsError as exc:
            self.log.warning("arch_check_failed", error=str(exc))
            return None
        return ModelSpec.from_dict(params.spec)

    def _model_inputs(self, obs: np.ndarray, masks: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The game's observation and masks in the model's layout (they differ after add-observation or add-action),
        with the anneal shares applied."""
        game_of_row = np.arange(self.game.num_rows) // self.per_game
        num_games = self.game.num_games
        if self.lane and GAME_VERSION in self.anneal and self.lane_game.version > 1:
            outside = np.flatnonzero(game_of_row >= games_allowed(self.anneal[GAME_VERSION], num_games))
            version, config = self.lane_game.version, self.lane_game.config
            older = (obs_spec(version - 1, config), action_spec(version - 1, config))
            obs, masks = apply_game_version(obs, masks, outside, (self.game.obs_spec, self.game.action_spec), older)
        if self.spec.obs != self.game.obs_spec:
            obs = project_obs(obs, self.game.obs_spec, self.spec.obs)
        if self.spec.actions != self.game.action_spec:
            masks = project_masks(masks, self.game.action_spec, self.spec.actions)
        types = self.spec.actions.types
        annealed = {name: share for name, share in self.anneal.items() if name in types}
        if annealed:
            masks = {**masks, "type": apply_anneal(masks["type"].copy(), types, annealed, game_of_row, num_games)}
        return obs, masks

    def _count_annealed(self, actions: np.ndarray) -> None:
        types = self.spec.actions.types
        for name in self.anneal:
            if name in types:
                self.annealed_taken[name] = self.annealed_taken.get(name, 0) + int(
                    (actions[:, 0] == types.index(name)).sum()
                )

    def _fresh_start(self) -> tuple[State, np.ndarray]:
        """A zero LSTM state for every row, each marked as an episode start (`starts`)."""
        h = np.zeros((self.game.num_rows, self.spec.lstm_size), np.float32)
        return (h, np.zeros_like(h)), np.ones(self.game.num_rows, np.bool_)

    async def _switch_arch(
        self,
        spec: ModelSpec,
        obs: np.ndarray,
        masks: dict[str, np.ndarray],
        state: State | None,
        starts: np.ndarray,
    ) -> tuple[Any, ...]:
        """Play on with the new architecture: the whole chunks buffered ship under the old one, the steps left
        are dropped; new LSTM units start at 0; a new game version or size restarts the games in a rebuilt lane
        game. With `state` None (the inference actor refused the old architecture mid-chunk, so this actor does
        not know the rows' state) every row goes on from a zero state, marked as an episode start."""
        await self._flush()
        old, self.spec, self.arch = self.arch, spec, spec.hash
        self.arch_switches += 1
        sized = sized_config(spec.obs, self.lane_game.config) if self.lane else None
        if sized is not None and sized != self.lane_game.config:
            game = await asyncio.to_thread(LaneGame, sized)
            game.follow_version(self.latest_version)
            self.game = game
            obs, masks = await asyncio.to_thread(self.game.reset, self.seed)
            state, starts = self._fresh_start()
        elif state is None:
            state, starts = self._fresh_start()
            self.state_resets += 1
        else:
            width = spec.lstm_size - state[0].shape[1]
            state = (np.pad(state[0], ((0, 0), (0, width))), np.pad(state[1], ((0, 0), (0, width))))
        self.log.info(
            "game_arch_switched",
            arch_from=old,
            arch_to=self.arch,
            game_version=spec.obs.version,
            **({"heroes_per_side": sized.heroes_per_side, "lanes": sized.lanes} if sized is not None else {}),
            lstm_size=spec.lstm_size,
            steps_dropped=self.steps_dropped_arch,
        )
        return obs, masks, state, starts

    def _add_returns(self, step: Step) -> None:
        """Keep the returns of episodes that ended with this step (environments that report them)."""
        finished = step.infos.get("episode_length")
        if finished is None:
            return
        for row in np.flatnonzero(step.dones):
            self.returns.append(float(step.infos["episode_return"][row]))
        self.episodes += int(step.dones.sum())

    def _add_rewards(self, infos: dict[str, np.ndarray], latest: np.ndarray) -> None:
        for key, value in infos.items():
            if key.startswith("reward/"):
                name = key.removeprefix("reward/")
                self.reward_totals[name] = self.reward_totals.get(name, 0.0) + float(value[latest].sum())

    # -- shipping -------------------------------------------------------------------------

    async def _ship_ready(self) -> None:
        """Ship the oldest chunk once its GAE window and bootstrap value are in the buffer."""
        if len(self.buffer) >= self.training.rollout_chunk_steps + self.training.gae_window + 1:
            await self._ship_oldest(self.training.gae_window)

    async def _flush(self) -> None:
        """Ship every whole chunk buffered, each with what it has of its GAE window; drop the steps left."""
        steps = self.training.rollout_chunk_steps
        while len(self.buffer) > steps:
            await self._ship_oldest(min(self.training.gae_window, len(self.buffer) - steps - 1))
        self.steps_dropped_arch += len(self.buffer)
        self.buffer.clear()

    async def _ship_oldest(self, window: int) -> None:
        """Ship the oldest chunk with GAE over it and `window` more steps, bootstrapped from the value of the step
        after."""
        steps = self.training.rollout_chunk_steps
        chunk, span, bootstrap = self.buffer[:steps], self.buffer[: steps + window], self.buffer[steps + window]
        del self.buffer[:steps]
        whole = np.logical_and.reduce([s.latest for s in chunk])
        self.chunks_partial += int(np.logical_or.reduce([s.latest for s in chunk]).sum() - whole.sum())
        rows = np.flatnonzero(whole)
        if not len(rows):
            return
        rollout = build_rollout(chunk, span, bootstrap, rows, self.gamma, self.lam, self.ref.address, self.arch)
        self.log.info(
            "rollout_chunk",
            chunks=len(rows),
            steps=len(chunk),
            version=int(chunk[0].versions[rows].min()),
            **chunk_rewards(chunk, rows),
        )
        await self._send(rollout)

    async def _send(self, rollout: Rollout) -> None:
        """Tell the next learner that is up (round-robin); with none up the chunks are lost."""
        count = len(rollout.versions)
        n = len(self.learner_addresses)
        for _ in range(n):
            address = self.learner_addresses[self._next_learner]
            self._next_learner = (self._next_learner + 1) % n
            if not self.learner_up[address]:
                continue
            try:
                await self.system.ref(address).tell(rollout, sender=self.ref)
            except FiveActorsError as exc:
                self.learner_up[address] = False
                self.log.warning("rollout_send_failed", learner=address, error=str(exc))
                continue
            self.rollouts_sent += 1
            self.ledger.sent(address, count)
            return
        self.ledger.unsent(count)
        self.log.warning("chunks_lost", chunks=count, chunks_lost=self.ledger.lost, reason="no learner is up")

    async def _hold_back(self) -> None:
        """Wait while a ship of this actor's chunks (a chunk a row) would leave the learner it goes to holding more than
        `max_outstanding_chunks` of them untrained; a ship larger than that waits until the learner holds none (a
        learner that is down holds none: its chunks were counted lost)."""
        limit, ship = self.training.max_outstanding_chunks, self.game.num_rows
        if not limit:  # off (the default): nothing to look up on every step
            return
        learner = self.learner_addresses[self._next_learner]

        def held_back() -> bool:
            held = self.ledger.outstanding[learner]
            return held > 0 and held + ship > limit

        if not held_back():
            return
        began = time.monotonic()
        while held_back():
            self._fates_heard.clear()
            try:
                await asyncio.wait_for(self._fates_heard.wait(), BACKPRESSURE_LOG_S)
            except TimeoutError:
                held, waited = self.ledger.outstanding[learner], round(time.monotonic() - began, 1)
                self.log.warning("waiting_for_learner", learner=learner, outstanding=held, limit=limit, waited_s=waited)
        self.backpressure_s += time.monotonic() - began

    async def _watch_learner(self, address: str) -> None:
        """Keep `learner_up[address]` current: down on its exit, up again once a new watch holds."""
        loop = asyncio.get_running_loop()
        while True:
            gone: asyncio.Future[str] = loop.create_future()
            unwatch = self.system.watch_address(address, functools.partial(resolve_once, gone))
            try:
                # asyncio.wait, not a timeout around `await gone`: that would cancel the future.
                await asyncio.wait([gone], timeout=LEARNER_GRACE_S)
                if not gone.done():
                    if not self.learner_up[address]:
                        self.learner_up[address] = True
                        self.log.info("learner_up", learner=address)
                    # A watch over a link that died with its process may never fire: a failed
                    # send (which marks the learner down) also ends this watch, and a new one is set.
                    while not gone.done() and self.learner_up[address]:
                        await asyncio.wait([gone], timeout=LEARNER_GRACE_S)
                reason = gone.result() if gone.done() else "a send to it failed"
            finally:
                unwatch()
            if self.learner_up[address]:
                self.log.warning("learner_down", learner=address, reason=reason)
            self.learner_up[address] = False
            lost = self.ledger.exited(address)
            self._fates_heard.set()
            if lost:
                self.log.warning(
                    "chunks_lost", chunks=lost, chunks_lost=self.ledger.lost, reason=f"{address} exited ({reason})"
                )
            await asyncio.sleep(0.5)

    async def on_chunk_fates(self, msg: ChunkFates) -> None:
        if msg.learner not in self.learner_up:
            self.log.warning("chunk_fates_refused", learner=msg.learner, reason="not one of this actor's learners")
            return
        refused = self.ledger.report(msg)
        self._fates_heard.set()
        if refused is not None:
            self.log.warning("chunk_fates_refused", learner=msg.learner, reason=refused)

    # -- stats ----------------------------------------------------------------------------

    async def on_get_stats(self, msg: GetStats) -> dict[str, Any]:
        return self.stats()

    def stats(self) -> dict[str, Any]:
        """Throughput, chunks and faults since this incarnation started."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        lane = self.lane_game if hasattr(self, "game") and self.lane else None
        return {
            "env_steps": self.env_steps,
            "env_steps_per_s": self.env_steps / elapsed,
            "batch_steps": self.batch_steps,
            "rollouts_sent": self.rollouts_sent,
            **self.ledger.stats(),
            "chunks_partial": self.chunks_partial,
            "lost_steps": self.lost_steps,
            "infer_refused": self.infer_refused,
            "state_resets": self.state_resets,
            "backpressure_s": round(self.backpressure_s, 3),
            "arch": self.arch,
            "arch_switches": self.arch_switches,
            "steps_dropped_arch": self.steps_dropped_arch,
            "games_finished": self.games_finished,
            "past_opponent_games": self.past_games,
            "past_opponent_draws": self.opponent_draws,
            "past_opponent_games_as_team0": self.past_games_by_side[0],
            "past_opponent_games_as_team1": self.past_games_by_side[1],
            "match_results": self.match_results,
            "episodes": self.episodes,
            "episodes_truncated": self.episodes_truncated,
            "mean_return": float(np.mean(self.returns)) if self.returns else None,
            "returns_kept": len(self.returns),
            "rewards": dict(self.reward_totals),
            "team_spirit": None if lane is None else lane.team_spirit,
            "heroes_per_side": None if lane is None else lane.config.heroes_per_side,
            "lanes": None if lane is None else lane.config.lanes,
            "anneal": dict(self.anneal),
            "annealed_taken": dict(self.annealed_taken),
        }

    def status(self) -> dict[str, Any]:
        stats = self.stats()
        metrics = {f"game_{k}": v for k, v in stats.items() if isinstance(v, (int, float))}
        metrics.update({f"game_reward_{k}": v for k, v in self.reward_totals.items()})
        metrics.update({f"game_anneal_share_{k}": v for k, v in self.anneal.items()})
        metrics.update({f"game_annealed_taken_{k}": v for k, v in self.annealed_taken.items()})
        return {"progress": {"env_steps": self.env_steps, "chunks": self.ledger.sent_total}, "metrics": metrics}


def row_versions(opponents: np.ndarray, past_team: np.ndarray, heroes: int) -> np.ndarray:
    """The version each row of the batch plays, in row order (game, team, hero).

    In game g, team `past_team[g]` plays `opponents[g]` and the other team the latest; an
    opponent of LATEST makes both teams the latest.
    """
    versions = np.full((len(opponents), 2, heroes), LATEST, np.int64)
    versions[np.arange(len(opponents)), past_team] = opponents[:, None]
    return versions.reshape(-1)


class _StateLost(Exception):
    """Raised out of _infer when the inference actor does not hold the rows' LSTM state the request continues."""


class _ArchChanged(Exception):
    """Raised out of _infer when the run's architecture changed (a live surgery); carries the new spec."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__(spec.hash)
        self.spec = spec


def _rows_of(reply: Any) -> str:
    if isinstance(reply, InferReply):
        return f"{np.shape(reply.actions)[0]} rows"
    return f"a {type(reply).__name__}"
