"""`five-actors bench env-train`: the actor system training a gymnasium environment, to a target return.

For each of `--seeds` seeds, `five-actors up --config CONFIG --set env.id=ENV --set training.seed=S`
runs for `--minutes` as a subprocess. Once a second the tree's view (/actors) is read through
the live line's own bookkeeping (five_actors.actors.live: env frames summed over the GameActors
and kept across their restarts, learner samples/s) and the GameActors' mean return over their
last 100 finished episodes (an average over the GameActors when there are several). Reported
per seed: median environment frames/s and learner samples/s after `--warmup-s` seconds of
training, the frames and wall time (from the start of `up`) at which the mean return over a full
window of 100 episodes first reaches `--target`, and whether it stays: after that, the mean
return never falls below 90% of the target for the rest of the run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from five_actors.actors.game import RETURNS_KEPT
from five_actors.actors.live import TrainingLine
from five_actors.bench.running import UpProcess, running_metrics
from five_actors.errors import ConfigError, FiveActorsError

TARGETS = {"gymnasium:CartPole-v1": 475.0, "gymnasium:LunarLander-v3": 200.0}
"""The usual "solved" mean return of environments with one."""

STAYS_SHARE = 0.9
"""After first reaching the target, the mean return must stay at or above this share of it."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options."""
    parser.add_argument(
        "--env", default="gymnasium:CartPole-v1", help="env.id of the run (default gymnasium:CartPole-v1)"
    )
    parser.add_argument("--config", default="cartpole", help="config file or bundled name (default: cartpole)")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key (repeatable)"
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="wall time of each seed's run (default 10)")
    parser.add_argument("--seeds", type=int, default=1, help="runs with training.seed F..F+K-1 (default 1)")
    parser.add_argument("--first-seed", type=int, default=0, help="F, the first seed (default 0)")
    parser.add_argument("--target", type=float, default=None, help=f"target mean return (default: {TARGETS})")
    parser.add_argument(
        "--warmup-s", type=float, default=30.0, help="seconds of training left out of the FPS medians (default 30)"
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run each seed in turn; returns per-seed results and their medians."""
    target = args.target if args.target is not None else TARGETS.get(args.env)
    if target is None:
        raise ConfigError(f"--target: no known target return for {args.env!r}; give one")
    runs = [_one_seed(args, seed, target) for seed in range(args.first_seed, args.first_seed + args.seeds)]

    def median(key: str) -> float | None:
        values = [r[key] for r in runs if r[key] is not None]
        return round(float(np.median(values)), 1) if values else None

    return {
        "benchmark": "env-train",
        "env": args.env,
        "config": args.config,
        "overrides": args.set,
        "minutes": args.minutes,
        "target": target,
        "seeds": args.seeds,
        "first_seed": args.first_seed,
        "env_frames_per_s": median("env_frames_per_s"),
        "samples_per_s": median("samples_per_s"),
        "frames_to_target": median("frames_to_target"),
        "seconds_to_target": median("seconds_to_target"),
        "seeds_reaching_target": sum(r["frames_to_target"] is not None for r in runs),
        "seeds_staying": sum(bool(r["stays"]) for r in runs),
        "runs": runs,
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def _one_seed(args: argparse.Namespace, seed: int, target: float) -> dict[str, Any]:
    overrides = [f"env.id={args.env}", f"training.seed={seed}", *args.set]
    line = TrainingLine(log_every_s=float("inf"))
    samples: list[dict[str, Any]] = []
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="bench-env-train-") as tmp,
        UpProcess(args.config, overrides, Path(tmp) / "run") as up,
    ):
        trained_since: float | None = None
        while time.monotonic() - started < 60 * args.minutes:
            time.sleep(1.0)
            if not up.running:
                raise FiveActorsError(f"`up` stopped during the run:\n{up.output_tail()}")
            try:
                view = up.view()
            except OSError as exc:
                raise FiveActorsError(f"`up` did not answer {up.url}/actors: {exc}\n{up.output_tail()}") from None
            facts = line.facts(view)
            if facts is None or facts["env_steps"] == 0:
                continue
            now = time.monotonic() - started
            trained_since = now if trained_since is None else trained_since
            games = list(running_metrics(view, "GameActor").values())
            full = bool(games) and all(m.get("game_returns_kept", 0) >= RETURNS_KEPT for m in games)
            samples.append(
                {
                    "t": now,
                    "warm": now - trained_since >= args.warmup_s,
                    "frames": facts["env_steps"],
                    "fps": facts["env_steps_per_s"],
                    "samples_per_s": facts["samples_per_s"],
                    "mean_return": facts["mean_return"] if full else None,
                }
            )
        sys.stderr.write(f"env-train {args.env} seed {seed}: {samples[-1]['frames'] if samples else 0:,} frames\n")
    return _summary(seed, samples, target)


def _summary(seed: int, samples: list[dict[str, Any]], target: float) -> dict[str, Any]:
    """One seed's figures from its once-a-second samples."""
    warm = [s for s in samples if s["warm"]]
    reached = next(
        (i for i, s in enumerate(samples) if s["mean_return"] is not None and s["mean_return"] >= target), None
    )
    after = [s["mean_return"] for s in samples[reached:] if s["mean_return"] is not None] if reached is not None else []
    returns = [s["mean_return"] for s in samples if s["mean_return"] is not None]
    return {
        "seed": seed,
        "frames": samples[-1]["frames"] if samples else 0,
        "env_frames_per_s": round(float(np.median([s["fps"] for s in warm])), 1) if warm else None,
        "samples_per_s": round(float(np.median([s["samples_per_s"] for s in warm])), 1) if warm else None,
        "frames_to_target": samples[reached]["frames"] if reached is not None else None,
        "seconds_to_target": round(samples[reached]["t"], 1) if reached is not None else None,
        "stays": min(after) >= STAYS_SHARE * target if after else None,
        "min_return_after_target": round(min(after), 1) if after else None,
        "final_mean_return": round(returns[-1], 1) if returns else None,
        "best_mean_return": round(max(returns), 1) if returns else None,
    }
