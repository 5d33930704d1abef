"""Games of a policy (or bot) against another, with sides swapped, and their summary.

Shared by the EvalActor (a round every few seconds of training) and `five-actors eval` (a
checkpoint on the command line): both play with `play_round` and report with `summarize`.
An external environment has no opponent: `play_episodes` and `summarize_returns` instead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from five_actors.actors.ratings import wilson_interval
from five_actors.game.config import GameConfig
from five_actors.game.env import LaneGame
from five_actors.game.layout import BatchEnv, project_masks, project_obs
from five_actors.game.match import Bot, replay_meta
from five_actors.game.replay import Recorder
from five_actors.model.policy import Policy


class PolicyPlayer:
    """A policy playing a fixed set of rows: keeps their LSTM state, resets it when a game ends."""

    def __init__(self, policy: Policy, rows: int) -> None:
        self.policy = policy
        self.state = policy.initial_state(rows)

    def act(self, obs: np.ndarray, masks: dict[str, np.ndarray]) -> np.ndarray:
        out = self.policy.act(obs, masks, self.state)
        self.state = out.state
        return out.actions.cpu().numpy()

    def reset(self, done: np.ndarray) -> None:
        """Zero the state of the rows whose game just ended."""
        keep = torch.as_tensor(~done, device=self.policy.device).to(self.state[0].dtype).unsqueeze(-1)
        self.state = (self.state[0] * keep, self.state[1] * keep)


@dataclass(frozen=True)
class GameOutcome:
    """One finished game as the first player of `play_round` saw it."""

    score: float
    """1 win, 0.5 draw, 0 loss."""
    steps: int
    """The game's length in game steps."""
    team: int
    """The team the first player played (0 in even games, 1 in odd ones)."""


Progress = Callable[[int, int], None]
"""Called after every batch step with (steps so far, games finished so far)."""


def play_round(
    config: GameConfig,
    player: Policy | Bot,
    opponent: Policy | Bot,
    games: int,
    seed: int,
    record: Path | None = None,
    progress: Progress | None = None,
) -> list[GameOutcome]:
    """`play_games` in `games` lane games of `config`; with `record`, saves the replay of game 0 (the player on
    team 0) there."""
    policies = [p for p in (player, opponent) if isinstance(p, Policy)]
    # After a live surgery a policy may read another game version's layout: play the newest version either knows.
    version = max((p.spec.obs.version for p in policies), default=config.version)
    env = LaneGame(dataclasses.replace(config, games_per_batch=games, seed=seed, version=version))
    watch = _replay_watch(env, record, replay_meta(config, seed)) if record is not None else None
    return play_games(env, player, opponent, seed, watch, progress)


def play_games(
    env: BatchEnv,
    player: Policy | Bot,
    opponent: Policy | Bot,
    seed: int,
    watch: Callable[[int], None] | None = None,
    progress: Progress | None = None,
) -> list[GameOutcome]:
    """Play every game of a two-team `env` (reset with `seed`), `player` against `opponent`, until each has ended
    once; `watch` is called after every step with its number.

    The player is team 0 in even games and team 1 in odd ones, so both sides get played. Returns each game's outcome
    for the player (its score from the step's `infos["win"]`), in game order.
    """
    obs, masks = env.reset(seed)
    per_game = 2 * env.agents_per_team
    rows = np.arange(env.num_rows)
    game_of, team_of = rows // per_game, (rows // env.agents_per_team) % 2
    mine = team_of == game_of % 2
    sides = [_Side(player, mine, env), _Side(opponent, ~mine, env)]
    outcomes: dict[int, GameOutcome] = {}
    step_no = 0
    while len(outcomes) < env.num_games:
        step_no += 1
        actions = np.zeros((env.num_rows, env.action_spec.columns), dtype=np.int64)
        for side in sides:
            actions[side.rows] = side.act(obs, masks)
        step = env.step(actions)
        obs, masks = step.obs, step.masks
        for game in np.flatnonzero(step.dones[::per_game]).tolist():
            if game not in outcomes:
                team = game % 2
                score = float(step.infos["win"][game * per_game + team * env.agents_per_team])
                outcomes[game] = GameOutcome(score, step_no, team)
        if watch is not None:
            watch(step_no)
        if step.dones.any():
            for side in sides:
                side.reset(step.dones)
        if progress is not None:
            progress(step_no, len(outcomes))
    return [outcomes[g] for g in range(env.num_games)]


def _replay_watch(env: LaneGame, path: Path, meta: dict[str, Any]) -> Callable[[int], None]:
    """A `play_games` watch that records game 0's frames after every step and saves its replay at `path` when it
    ends."""
    recorder = Recorder(meta)
    recorder.frame(0, env.units_frame(0), [])
    saved = False

    def watch(step_no: int) -> None:
        nonlocal saved
        if not saved:
            recorder.frame(step_no, env.units_frame(0), env.events(0))
            for result in env.results:
                if result["game"] == 0:
                    recorder.save(path, {k: v for k, v in result.items() if k != "game"})
                    saved = True
        env.results.clear()

    return watch


class _Side:
    """One player's rows of the batch, seen in its own layout when it is a policy."""

    def __init__(self, who: Policy | Bot, rows: np.ndarray, env: BatchEnv) -> None:
        self.rows = rows
        self.env = env
        self.policy = who if isinstance(who, Policy) else None
        self.bot: Any = PolicyPlayer(who, int(rows.sum())) if isinstance(who, Policy) else who

    def act(self, obs: np.ndarray, masks: dict[str, np.ndarray]) -> np.ndarray:
        obs, masks = obs[self.rows], {k: m[self.rows] for k, m in masks.items()}
        if self.policy is not None:
            # The policy's layout differs from the game's after add-observation/add-action.
            if self.env.obs_spec != self.policy.spec.obs:
                obs = project_obs(obs, self.env.obs_spec, self.policy.spec.obs)
            if self.env.action_spec != self.policy.spec.actions:
                masks = project_masks(masks, self.env.action_spec, self.policy.spec.actions)
        return np.asarray(self.bot.act(obs, masks))

    def reset(self, dones: np.ndarray) -> None:
        if isinstance(self.bot, PolicyPlayer):
            self.bot.reset(dones[self.rows])


def summarize(outcomes: list[GameOutcome]) -> dict[str, Any]:
    """Games, wins/draws/losses, the win rate (a draw counts half) with its 95% Wilson interval, mean length."""
    scores = [o.score for o in outcomes]
    wins, draws = scores.count(1.0), scores.count(0.5)
    score = wins + 0.5 * draws
    low, high = wilson_interval(score, len(outcomes))
    return {
        "games": len(outcomes),
        "wins": wins,
        "draws": draws,
        "losses": len(outcomes) - wins - draws,
        "win_rate": round(score / max(len(outcomes), 1), 4),
        "ci_low": round(low, 4),
        "ci_high": round(high, 4),
        "mean_game_steps": round(float(np.mean([o.steps for o in outcomes])) if outcomes else 0.0, 1),
    }


EVAL_SEED_BASE = 1_000_000_000
"""Evaluation episodes are seeded from here on: far from every training copy's seed (run seed + a crc32 of the actor's
path + copy)."""


def play_episodes(env: BatchEnv, policy: Policy, seed: int, max_steps: int) -> list[float]:
    """The return of the first episode of each row of an external `env` (copy i seeded `seed + i`), the policy
    sampling.

    Rows whose episode has not ended within `max_steps` steps are left out.
    """
    obs, masks = env.reset(seed)
    player = PolicyPlayer(policy, env.num_rows)
    returns: list[float | None] = [None] * env.num_rows
    for _ in range(max_steps):
        step = env.step(player.act(obs, masks))
        for row in np.flatnonzero(step.dones):
            if returns[row] is None:
                returns[row] = float(step.infos["episode_return"][row])
        if all(r is not None for r in returns):
            break
        player.reset(step.dones)
        obs, masks = step.obs, step.masks
    return [r for r in returns if r is not None]


def summarize_returns(returns: list[float]) -> dict[str, Any]:
    """Episodes, mean return with a 95% confidence interval (normal approximation), min and max."""
    values = np.asarray(returns, np.float64)
    mean = float(values.mean()) if len(values) else 0.0
    half = 1.96 * float(values.std(ddof=1)) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return {
        "episodes": len(values),
        "mean_return": round(mean, 3),
        "ci_low": round(mean - half, 3),
        "ci_high": round(mean + half, 3),
        "min_return": round(float(values.min()), 3) if len(values) else None,
        "max_return": round(float(values.max()), 3) if len(values) else None,
    }
