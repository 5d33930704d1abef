"""Does the synchronous baseline learn, and how fast? Return (or win rate) against steps and wall time.

`five-actors bench learn --env CartPole-v1 --steps 300000 --seeds 5` trains one policy per seed
from scratch (one process, one torch thread by default) and prints, per seed, the curve of
mean episode return over the last 20 episodes against environment steps and wall time.
With `--env lane` the policy plays team 0 of the lane game against the scripted bot on team 1
and the curve carries its win rate over the last 20 games. A progress line goes to stderr.

Gymnasium envs get a discount horizon of 100 steps (gamma 0.99) unless `--set
ppo.horizon_seconds=...` says otherwise; the lane game uses the config's horizon.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

import numpy as np
import torch

from five_actors.config import Config, apply_override, from_mapping, load_config
from five_actors.game.layout import BatchEnv
from five_actors.model.baseline import Opponent, Progress, SyncTrainer
from five_actors.model.policy import Policy
from five_actors.model.spec import ModelSpec

GYM_HORIZON_STEPS = 100


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options."""
    parser.add_argument(
        "--env", default="CartPole-v1", help="a gymnasium id, or 'lane' for the lane game vs the scripted bot"
    )
    parser.add_argument("--steps", type=int, default=300_000, help="environment steps per seed (policy rows x steps)")
    parser.add_argument("--seeds", type=int, default=5, help="independent runs, seeds FIRST..FIRST+K-1")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed (to split seeds over processes)")
    parser.add_argument("--num-envs", type=int, default=8, help="gymnasium copies, or lane games per batch")
    parser.add_argument(
        "--target", type=float, default=475.0, help="report the steps at which the mean return first reaches this"
    )
    parser.add_argument(
        "--stop-at-target", action="store_true", help="end a seed once its mean return reaches --target"
    )
    parser.add_argument("--minutes", type=float, default=None, help="also stop each seed after this much wall time")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument(
        "--config",
        default=None,
        help="config file or bundled name for [model], [ppo], [game] (default: built-in defaults)",
    )
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="config override, repeatable"
    )
    parser.add_argument("--points", type=int, default=60, help="curve points kept per seed")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Train `--seeds` policies and report their curves."""
    torch.set_num_threads(args.threads)
    config = load_config(args.config, args.overrides) if args.config else _defaults(args.overrides)
    results = [_one_seed(args, config, seed) for seed in range(args.first_seed, args.first_seed + args.seeds)]
    finals = [r["final_mean_return"] for r in results if r["final_mean_return"] is not None]
    summary: dict[str, Any] = {
        "benchmark": "learn",
        "env": args.env,
        "steps": args.steps,
        "seeds": args.seeds,
        "target": args.target,
        "seeds_reaching_target": sum(r["steps_to_target"] is not None for r in results),
        "mean_final_return": float(np.mean(finals)) if finals else None,
        "lstm_size": config.model.lstm_size,
        "threads": args.threads,
        "runs": results,
    }
    if args.env == "lane":
        summary["final_win_rates"] = [r["final_win_rate"] for r in results]
    return summary


def _defaults(overrides: list[str]) -> Config:
    """Built-in defaults with `--set` overrides applied (no config file)."""
    tree: dict[str, Any] = {}
    for assignment in overrides:
        apply_override(tree, assignment)
    return from_mapping(Config, tree)


def _one_seed(args: argparse.Namespace, config: Config, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    np.random.seed(seed)
    env, policy_rows, opponent, gamma = _environment(args, config, seed)
    spec = ModelSpec.build(env.obs_spec, env.action_spec, config.model)
    policy = Policy(spec, config.model.precision).to(config.model.device)
    chunk_steps = config.training.rollout_chunk_steps
    trainer = SyncTrainer(
        env, policy, config.ppo, config.baseline, chunk_steps, gamma, policy_rows, opponent, seed=seed
    )
    curve: list[dict[str, Any]] = []
    reached: list[int] = []

    def report(p: Progress) -> None:
        curve.append(
            {"steps": p.steps, "wall_s": round(p.wall_s, 2), "mean_return": p.mean_return, "win_rate": p.win_rate}
        )
        if not reached and p.mean_return is not None and p.mean_return >= args.target:
            reached.append(p.steps)
        ret = "-" if p.mean_return is None else f"{p.mean_return:.1f}"
        win = "" if p.win_rate is None else f" win rate {p.win_rate:.2f}"
        sys.stderr.write(
            f"\rlearn {args.env} seed {seed}: {p.steps:,}/{args.steps:,} steps, return {ret}{win}, {p.wall_s:.0f} s   "
        )
        sys.stderr.flush()

    started = time.perf_counter()
    stop = (lambda p: bool(reached)) if args.stop_at_target else None
    final = trainer.train(args.steps, report, None if args.minutes is None else 60 * args.minutes, stop)
    sys.stderr.write("\n")
    wall = time.perf_counter() - started
    keep = max(1, len(curve) // args.points)
    return {
        "seed": seed,
        "wall_s": round(wall, 1),
        "steps_per_s": round(final.steps / wall, 1),
        "final_mean_return": final.mean_return,
        "final_win_rate": final.win_rate,
        "steps_to_target": reached[0] if reached else None,
        "episodes": final.episodes,
        "curve": curve[::keep] + ([curve[-1]] if (len(curve) - 1) % keep else []),
    }


def _environment(
    args: argparse.Namespace, config: Config, seed: int
) -> tuple[BatchEnv, np.ndarray | None, Opponent | None, float]:
    """The env, the rows the policy plays, the opponent for the others, and the discount."""
    if args.env == "lane":
        from five_actors.game.bots import ScriptedBot
        from five_actors.game.env import LaneGame
        from five_actors.game.match import team_rows

        game = LaneGame(dataclasses.replace(config.game, games_per_batch=args.num_envs, seed=seed))
        bot = ScriptedBot(game.config)
        bot_rows = team_rows(game, 1)
        policy_rows = np.zeros(game.num_rows, bool)
        policy_rows[team_rows(game, 0)] = True

        def opponent(obs: np.ndarray, masks: dict[str, np.ndarray]) -> np.ndarray:
            actions = np.zeros((game.num_rows, game.action_spec.columns), np.int64)
            actions[bot_rows] = bot.act(obs[bot_rows], {k: v[bot_rows] for k, v in masks.items()})
            return actions

        return game, policy_rows, opponent, config.ppo.gamma(1.0 / config.game.steps_per_second)
    from five_actors.game.gymnasium_env import GymBatchEnv

    env = GymBatchEnv(args.env, args.num_envs, seed=seed)
    ppo = config.ppo
    if not any(o.startswith("ppo.horizon_seconds") for o in args.overrides):
        ppo = dataclasses.replace(ppo, horizon_seconds=GYM_HORIZON_STEPS * env.seconds_per_step)
    return env, None, None, ppo.gamma(env.seconds_per_step)
