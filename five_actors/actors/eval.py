"""The EvalActor: plays the latest policy against fixed references and keeps TrueSkill ratings.

Every `training.eval_every_s` seconds it fetches the latest parameters from the ParamServer and
plays `training.eval_games` games (one batch of its own LaneGame, the policy on team 0 in even games
and team 1 in odd ones, acting locally on this process's device) against each of: the random bot,
the scripted bot (`training.eval_scripted_games` where set), and up to `training.eval_past_versions`
frozen past versions it evaluated before (it keeps their parameters itself: the ParamServer serves
only its pool and recent checkpoints). Ratings follow the paper's TrueSkill settings with the random
bot pinned as the scale's zero (five_actors.actors.ratings). Each round logs one `eval_result` event
per opponent (win rate with its 95% Wilson interval, TrueSkill), records the first game against the
scripted bot to RUN_DIR/replays/, and saves the ratings to RUN_DIR/eval/ratings.json, which
a resumed run reads back. Each round's TrueSkill goes to the ParamServer (EvalRating), which
reverts a live surgery's change being annealed in when it falls too far.

A two-team external environment (PettingZoo, `env.teams = 2`) is rated the same way, with
games of the environment (seeded from `play.EVAL_SEED_BASE`) and a uniformly random player
(bots.UniformBot) as the random reference; it has no scripted bot and no replays. An external
environment of one team has no opponents: each round plays `training.eval_games` episodes of
the latest version on held-out seeds (the same ones every round, far from the training copies'
seeds) and logs one `eval_result` event with the mean episode return and its 95% confidence
interval; there are no ratings.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np
import structlog

from five_actors.actors.config import limit_torch_threads, run_settings
from five_actors.actors.inference import policy_from_params
from five_actors.actors.messages import EvalRating, GetParams, GetStats, Params
from five_actors.actors.play import (
    EVAL_SEED_BASE,
    GameOutcome,
    play_episodes,
    play_games,
    play_round,
    summarize,
    summarize_returns,
)
from five_actors.actors.ratings import Ratings, load_state, save_state
from five_actors.envs import make_external
from five_actors.errors import FiveActorsError
from five_actors.game.bots import RandomBot, ScriptedBot, UniformBot
from five_actors.game.config import GameConfig
from five_actors.game.match import Bot
from five_actors.game.spec import sized_config
from five_actors.model.policy import Policy
from five_actors.runtime.actor import Actor
from five_actors.supervisor.processes import current_device

log = structlog.get_logger("five_actors.actors")

EVAL_MAX_STEPS = 100_000
"""Most steps of one evaluation round of an external environment; episodes still running then are left out."""

RATINGS_FILE = Path("eval") / "ratings.json"
"""Where, under the run directory, the evaluator keeps its ratings."""

MAX_REFERENCES = 16
"""Most rated versions kept as past opponents (their parameters in memory); beyond it the history is thinned
evenly, keeping the oldest and the newest. The ParamServer keeps only its pool and recent checkpoints, so
a version rated minutes ago is often no longer served by it."""


class EvalActor(Actor):
    """Rates the latest policy against the random bot, the scripted bot and past versions (module docstring)."""

    def __init__(self, params: str = "head/root/params", ask_timeout_s: float = 30.0) -> None:
        self.params = params
        self.ask_timeout_s = ask_timeout_s
        self.ratings = Ratings()
        self.history: list[int] = []
        """Versions rated so far (at most MAX_REFERENCES, thinned evenly), oldest first: the frozen past opponents are
        drawn from them."""
        self.frozen: dict[int, Params] = {}
        """The parameters of the history's versions rated in this process (after a resume the older ones are
        fetched)."""
        self.rounds = 0
        self.last: dict[str, Any] = {}
        """The latest round: version, per-opponent results, the policy's score."""
        self.reference: str | None = None
        """The headline opponent: "scripted" (the lane game), "random" (a two-team external environment), None (an
        environment of one team: mean returns)."""

    async def on_start(self) -> None:
        config, self.run_dir = run_settings(self)
        self.config = config
        self.training = config.training
        self.reference = config.env.eval_reference
        self.device = current_device(config.model.device)
        limit_torch_threads(self.device, self.training.inference_torch_threads)
        self.log = log.bind(actor=self.ref.path)
        saved = load_state(self.run_dir / RATINGS_FILE) if self.run_dir is not None else None
        if saved is not None:
            self.ratings = Ratings.from_dict(saved["ratings"])
            self.history = [int(v) for v in saved["history"]]
            self.rounds = int(saved["rounds"])
            self.last = dict(saved.get("last") or {})
            self.log.info("eval_resumed", rounds=self.rounds, versions=len(self.history))
        self.spawn_task(self._evaluate_forever(), f"{self.ref.path}:rounds")

    async def on_stop(self) -> None:
        self._save()

    async def on_get_stats(self, _msg: GetStats) -> dict[str, Any]:
        return self.stats()

    def stats(self) -> dict[str, Any]:
        """The latest round and the ratings table."""
        return {"rounds": self.rounds, **self.last, "ratings": self.ratings.table()}

    def status(self) -> dict[str, Any]:
        metrics: dict[str, float] = {"eval_rounds": float(self.rounds)}
        if self.last and "mean_return" in self.last:
            metrics["eval_version"] = float(self.last["version"])
            for key in ("mean_return", "ci_low", "ci_high"):
                metrics[f"eval_{key}"] = float(self.last[key])
        elif self.last:
            metrics["eval_version"] = float(self.last["version"])
            metrics["eval_trueskill"] = float(self.last["trueskill"])
            metrics["eval_trueskill_sigma"] = float(self.last["trueskill_sigma"])
            for name, result in self.last["results"].items():
                metrics[f"eval_win_rate_{'past' if name.startswith('v') else name}"] = float(result["win_rate"])
        return {
            "rounds": self.rounds,
            "version": self.last.get("version"),
            "reference": self.reference,
            "last": self.last,
            "metrics": metrics,
        }

    async def _evaluate_forever(self) -> None:
        while True:
            await asyncio.sleep(self.training.eval_every_s)
            await self.evaluate()

    async def _fetch(self, version: int) -> Params | None:
        try:
            params = await self.system.ask(self.params, GetParams(version), self.ask_timeout_s)
        except FiveActorsError as exc:
            self.log.info("eval_skipped", version=version, reason=f"no parameters: {exc}")
            return None
        if not isinstance(params, Params):
            self.log.warning(
                "eval_skipped", version=version, reason=f"the ParamServer answered {type(params).__name__}"
            )
            return None
        return params

    def _past_versions(self, latest: int) -> list[int]:
        """Up to eval_past_versions earlier rated versions, spread from the oldest to the newest."""
        past = [v for v in self.history if v != latest]
        count = min(self.training.eval_past_versions, len(past))
        if count == 0:
            return []
        picks = np.linspace(0, len(past) - 1, count).round().astype(int)
        return sorted({past[i] for i in picks})

    async def evaluate(self) -> dict[str, Any] | None:
        """One round (see the module docstring); returns its summary, or None when there are no parameters yet."""
        latest = await self._fetch(-1)
        if latest is None:
            return None
        try:
            policy = policy_from_params(latest, self.device, self.config.model.precision)
        except FiveActorsError as exc:
            self.log.warning("params_refused", version=latest.version, reason=str(exc))
            return None
        if not self.config.env.self_play:
            return await self._evaluate_returns(latest.version, policy)
        me = f"v{latest.version}"
        bot_seed = self.training.seed + self.rounds
        lane = self._game_for(policy) if self.config.env.is_lane else None
        opponents: list[tuple[str, Bot | Policy]] = (
            [("random", RandomBot(bot_seed)), ("scripted", ScriptedBot(lane))]
            if lane is not None
            else [("random", UniformBot(policy.spec.actions, bot_seed))]
        )
        # The game's size, in a lane-game run (a curriculum grows it by game-size surgery: rounds of different sizes
        # are not the same test).
        size = {} if lane is None else {"heroes_per_side": lane.heroes_per_side, "lanes": lane.lanes}
        for version in self._past_versions(latest.version):
            params = self.frozen.get(version) or await self._fetch(version)
            if params is None or params.arch != latest.arch:
                self._forget(version)  # gone from the ParamServer, or another architecture: no longer a reference
                continue
            opponents.append((f"v{version}", policy_from_params(params, self.device, self.config.model.precision)))
        started = time.monotonic()
        results: dict[str, dict[str, Any]] = {}
        for index, (name, opponent) in enumerate(opponents):
            scripted = name == "scripted"
            record = self._replay_path(latest.version, name) if scripted else None
            games = self.training.eval_games
            if scripted and self.training.eval_scripted_games:
                games = self.training.eval_scripted_games
            seed = self.training.seed + 7919 * self.rounds + index
            outcomes = await asyncio.to_thread(self._play, policy, opponent, games, seed, record)
            for outcome in outcomes:
                self.ratings.record(me, name, outcome.score)
            results[name] = {**self._result(latest.version, name, outcomes), **size}
        self.rounds += 1
        self._remember(latest)
        mine = self.ratings.rating(me)
        self.last = {
            "version": latest.version,
            "trueskill": round(self.ratings.score(me), 3),
            "trueskill_sigma": round(mine.sigma, 3),
            "results": results,
            "seconds": round(time.monotonic() - started, 2),
        }
        for name, result in results.items():
            self.log.info(
                "eval_result",
                **result,
                trueskill=self.last["trueskill"],
                trueskill_sigma=self.last["trueskill_sigma"],
                opponent_trueskill=round(self.ratings.score(name), 3),
                round=self.rounds,
            )
        self._save()
        try:
            # The ParamServer watches TrueSkill while a live surgery's changes are annealed in (and reverts them).
            await self.system.ref(self.params).tell(EvalRating(latest.version, self.last["trueskill"]), sender=self.ref)
        except FiveActorsError as exc:
            self.log.info("rating_not_told", version=latest.version, reason=str(exc))
        return self.last

    def _play(
        self, policy: Policy, opponent: Bot | Policy, games: int, seed: int, record: Path | None
    ) -> list[GameOutcome]:
        """One round's `games` games against one opponent: lane games, or games of the external environment."""
        if self.config.env.is_lane:
            return play_round(self._game_for(policy), policy, opponent, games, seed, record)
        env = make_external(self.config.env, games, EVAL_SEED_BASE + seed)
        try:
            return play_games(env, policy, opponent, EVAL_SEED_BASE + seed)
        finally:
            env.close()

    async def _evaluate_returns(self, version: int, policy: Policy) -> dict[str, Any]:
        """An external environment's round: the mean return of `training.eval_games` episodes on the held-out seeds."""
        started = time.monotonic()
        env = await asyncio.to_thread(make_external, self.config.env, self.training.eval_games, EVAL_SEED_BASE)
        try:
            returns = await asyncio.to_thread(play_episodes, env, policy, EVAL_SEED_BASE, EVAL_MAX_STEPS)
        finally:
            env.close()
        self.rounds += 1
        self.last = {"version": version, **summarize_returns(returns), "seconds": round(time.monotonic() - started, 2)}
        self.log.info("eval_result", **self.last, env=self.config.env.name, round=self.rounds)
        self._save()
        return self.last

    def _remember(self, params: Params) -> None:
        """Keep a rated version as a past opponent; thin the history to MAX_REFERENCES, dropping the version
        nearest its neighbours (the oldest and the newest stay)."""
        if params.version not in self.history:
            self.history.append(params.version)
        self.frozen[params.version] = params
        while len(self.history) > MAX_REFERENCES:
            gaps = [
                (self.history[i + 1] - self.history[i - 1], self.history[i]) for i in range(1, len(self.history) - 1)
            ]
            self._forget(min(gaps)[1])

    def _forget(self, version: int) -> None:
        self.history.remove(version)
        self.frozen.pop(version, None)

    def _game_for(self, policy: Policy) -> GameConfig:
        """The game the policy plays: after a live `game-version` or `game-size` surgery it reads another layout than
        the config's."""
        return sized_config(policy.spec.obs, self.config.game)

    def _result(self, version: int, opponent: str, outcomes: list[GameOutcome]) -> dict[str, Any]:
        return {"version": version, "opponent": opponent, **summarize(outcomes)}

    def _replay_path(self, version: int, opponent: str) -> Path | None:
        if self.run_dir is None or not self.config.env.is_lane:
            return None
        return self.run_dir / "replays" / f"eval-r{self.rounds + 1:05d}-v{version}-vs-{opponent}.replay"

    def _save(self) -> None:
        if self.run_dir is None:
            return
        state = {"ratings": self.ratings.to_dict(), "history": self.history, "rounds": self.rounds, "last": self.last}
        save_state(self.run_dir / RATINGS_FILE, state)
