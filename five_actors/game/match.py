"""Bot against bot: one recorded match (`play_match`) or many at once (`play_matches`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from five_actors.game.config import GameConfig
from five_actors.game.env import LaneGame
from five_actors.game.replay import Recorder
from five_actors.game.state import lane_waypoints


class Bot(Protocol):
    """Anything that maps the observations and masks of whole teams of rows to actions."""

    def act(self, obs: np.ndarray, masks: dict[str, np.ndarray]) -> np.ndarray: ...


def team_rows(env: LaneGame, team: int) -> np.ndarray:
    """The rows of one team's heroes in every game, in row order."""
    rows = np.arange(env.num_rows)
    return rows[(rows // env.agents_per_team) % 2 == team]


def _joint_actions(env: LaneGame, bots: tuple[Bot, Bot], obs: np.ndarray, masks: dict[str, np.ndarray]) -> np.ndarray:
    actions = np.zeros((env.num_rows, env.action_spec.columns), dtype=np.int64)
    for team, bot in enumerate(bots):
        rows = team_rows(env, team)
        actions[rows] = bot.act(obs[rows], {name: m[rows] for name, m in masks.items()})
    return actions


def replay_meta(config: GameConfig, seed: int) -> dict[str, Any]:
    """The replay header of a game played under `config`."""
    return {
        "map_size": config.map_size,
        "lanes": lane_waypoints(config)[0].tolist(),
        "hero_types": list(config.hero_types),
        "game_version": config.version,
        "seed": seed,
        "steps_per_second": config.steps_per_second,
        "heroes_per_side": config.heroes_per_side,
    }


def play_match(
    config: GameConfig, bot_team0: Bot, bot_team1: Bot, seed: int = 0, record: str | Path | None = None
) -> dict[str, Any]:
    """Play one game to its end; returns {winner: 0|1|-1, steps, reason, kills, ...} and, when
    `record` is a path, saves the match replay there."""
    env = LaneGame(dataclasses.replace(config, games_per_batch=1, seed=seed))
    obs, masks = env.reset(seed)
    recorder = Recorder(replay_meta(config, seed)) if record is not None else None
    units = env.units_frame(0)
    if recorder is not None:
        recorder.frame(0, units, [])
    step_no = 0
    while not env.results:
        step_no += 1
        step = env.step(_joint_actions(env, (bot_team0, bot_team1), obs, masks))
        obs, masks = step.obs, step.masks
        if recorder is not None:
            # The last step's units are gone with the auto-reset: its frame repeats the one before,
            # with the step's events (the ancient's fall among them).
            units = units if env.results else env.units_frame(0)
            recorder.frame(step_no, units, env.events(0))
    result = dict(env.results[0])
    result.pop("game")
    if recorder is not None and record is not None:
        recorder.save(record, result)
    return result


def play_matches(config: GameConfig, bot_team0: Bot, bot_team1: Bot, games: int, seed: int = 0) -> list[dict[str, Any]]:
    """Play `games` games at once (one batch) until each has ended once; their results in game order."""
    return _play(config, (bot_team0, bot_team1), games, seed)[0]


def match_summary(config: GameConfig, bot_team0: Bot, bot_team1: Bot, games: int, seed: int = 0) -> dict[str, Any]:
    """`games` games at once, each to its end: wins, draws, how they ended, and each team's reward
    components (before team spirit and zero-sum) per hero per game minute over those games."""
    results, totals, hero_steps = _play(config, (bot_team0, bot_team1), games, seed)
    minutes = hero_steps / (config.steps_per_second * 60.0)
    return {
        "games": games,
        "team0_wins": sum(r["winner"] == 0 for r in results),
        "team1_wins": sum(r["winner"] == 1 for r in results),
        "draws": sum(r["winner"] == -1 for r in results),
        "by_ancient": sum(r["reason"] == "ancient" for r in results),
        "median_steps": int(np.median([r["steps"] for r in results])),
        "reward_per_hero_minute": [
            {name: round(float(v) / minutes, 3) for name, v in team.items() if v} for team in totals
        ],
    }


def _play(
    config: GameConfig, bots: tuple[Bot, Bot], games: int, seed: int
) -> tuple[list[dict[str, Any]], list[dict[str, float]], int]:
    """Each game's first result, each team's reward components summed over the games until they
    ended, and the hero-steps of one team in that time."""
    env = LaneGame(dataclasses.replace(config, games_per_batch=games, seed=seed))
    obs, masks = env.reset(seed)
    first: dict[int, dict[str, Any]] = {}
    teams = [team_rows(env, team) for team in (0, 1)]
    totals: list[dict[str, float]] = [{}, {}]
    hero_steps = 0
    while len(first) < games:
        # A game counts until its first end: the rows of games still in play.
        playing = np.repeat([g not in first for g in range(games)], 2 * env.agents_per_team)
        step = env.step(_joint_actions(env, bots, obs, masks))
        obs, masks = step.obs, step.masks
        hero_steps += int(playing[teams[0]].sum())
        for key, values in step.infos.items():
            if key.startswith("reward/"):
                for team, rows in enumerate(teams):
                    name = key.removeprefix("reward/")
                    totals[team][name] = totals[team].get(name, 0.0) + float(values[rows][playing[rows]].sum())
        for result in env.results:
            first.setdefault(result["game"], result)
        env.results.clear()
    return [first[g] for g in range(games)], totals, hero_steps
