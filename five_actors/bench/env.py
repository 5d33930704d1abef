"""Lane game throughput: game steps/s and hero-steps/s on one thread and on all cores,
first-call compile time (fresh numba cache) and memory per game."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import numba
import numpy as np

from five_actors.game.bots import RandomBot
from five_actors.game.config import GameConfig
from five_actors.game.env import LaneGame

_COMPILE_PROBE = """
import numpy as np
from five_actors.game.env import LaneGame
from five_actors.game.config import GameConfig
from five_actors.game.bots import RandomBot
env = LaneGame(GameConfig(games_per_batch=2, numba_threads=1))
obs, masks = env.reset()
env.step(RandomBot(0).act(obs, masks))
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options."""
    parser.add_argument("--games", type=int, default=64, help="games per batch (default 64)")
    parser.add_argument("--steps", type=int, default=500, help="timed steps per measurement (default 500)")
    parser.add_argument("--version", type=int, default=1, choices=(1, 2), help="game version")
    parser.add_argument("--skip-compile", action="store_true", help="do not measure the cold compile time")


def _throughput(cfg: GameConfig, steps: int) -> dict[str, float]:
    """Time env.step alone over `steps` steps of random legal play (actions made outside the clock)."""
    env = LaneGame(cfg)
    bot = RandomBot(seed=0)
    obs, masks = env.reset(seed=0)
    for _ in range(50):
        step = env.step(bot.act(obs, masks))
        obs, masks = step.obs, step.masks
    stepping = acting = cpu = 0.0
    for _ in range(steps):
        t0 = time.perf_counter()
        actions = bot.act(obs, masks)
        t1 = time.perf_counter()
        c1 = time.process_time()
        step = env.step(actions)
        cpu += time.process_time() - c1
        stepping += time.perf_counter() - t1
        acting += t1 - t0
        obs, masks = step.obs, step.masks
    game_steps = steps * env.num_games
    hero_steps = game_steps * 2 * cfg.heroes_per_side
    return {
        "threads": cfg.numba_threads,
        "game_steps_per_s": round(game_steps / stepping, 1),
        "hero_steps_per_s": round(hero_steps / stepping, 1),
        # CPU seconds of this process: what a step costs when other processes share the cores.
        "hero_steps_per_cpu_s": round(hero_steps / cpu, 1),
        "random_bot_rows_per_s": round(steps * env.num_rows / acting, 1),
    }


def _compile_seconds() -> float:
    """Seconds for a fresh process to compile every kernel and take one step (empty numba cache)."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", _COMPILE_PROBE], env=env, check=True)
        return round(time.perf_counter() - start, 1)


def _memory_per_game(cfg: GameConfig) -> int:
    env = LaneGame(cfg)
    obs, masks = env.reset()
    held = env.state.nbytes + env._acc.nbytes + env._scratch.nbytes + env._vis.nbytes + env._slot_unit.nbytes
    held += obs.nbytes + sum(m.nbytes for m in masks.values())
    return int(held // cfg.games_per_batch)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the benchmark; returns the JSON-ready result."""
    base = GameConfig(games_per_batch=args.games, version=args.version)
    threads = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]  # all cores, set at import
    result: dict[str, Any] = {
        "benchmark": "env",
        "games": args.games,
        "steps": args.steps,
        "version": args.version,
        "rows": args.games * 2 * base.heroes_per_side,
        "obs_size": LaneGame(base).obs_spec.size,
        "cpus": os.cpu_count(),
        "one_thread": _throughput(
            GameConfig(games_per_batch=args.games, version=args.version, numba_threads=1), args.steps
        ),
        "all_cores": _throughput(
            GameConfig(games_per_batch=args.games, version=args.version, numba_threads=threads), args.steps
        ),
        "memory_per_game_bytes": _memory_per_game(base),
        "numpy": np.__version__,
        "numba": numba.__version__,
    }
    if not args.skip_compile:
        result["first_call_compile_s"] = _compile_seconds()
    return result
