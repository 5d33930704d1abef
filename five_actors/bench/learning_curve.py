"""`five-actors bench learning`: does `five-actors up` learn? Win rates and TrueSkill over time, per seed.

For each seed a real `five-actors up --config CONFIG` subprocess trains for `--minutes` (one seed
after the other: a learning run beside another measures the other), with `training.seed` and
`game.seed` set to the seed. The EvalActor's rounds are read back from the run's logs
(five_actors.actors.history). It prints one JSON object: per seed the rounds (minutes since
`up` started, env steps, version, win rates with 95% intervals against the random bot, the
scripted bot and past versions, TrueSkill with the random bot at 0) and the minutes at which
each bar was first met (BARS), whether the win rate against the scripted bot held over the
last third of the run, and the paths of a plot of every seed (PNG and HTML,
five_actors.actors.history_plot). Progress goes to stderr every 30 s.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from five_actors.actors.history import eval_history
from five_actors.actors.history_plot import plot_history
from five_actors.bench.running import UpProcess
from five_actors.errors import FiveActorsError

BARS: tuple[tuple[str, str, float], ...] = (
    ("random_0.9", "win_rate_random", 0.9),
    ("scripted_0.5", "win_rate_scripted", 0.5),
    ("scripted_0.8", "win_rate_scripted", 0.8),
)
"""(name, row key, win rate) of each bar: the first minute a round's win rate reaches it."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options."""
    parser.add_argument("--config", default="default", help="config file or bundled name (default: default)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)"
    )
    parser.add_argument("--minutes", type=float, default=60.0, help="training minutes per seed (default 60)")
    parser.add_argument("--seeds", type=int, default=2, help="seeds, run one after the other (default 2)")
    parser.add_argument("--first-seed", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument(
        "--run-dir",
        type=Path,
        default=Path("runs/bench-learning"),
        help="where the runs (RUN_DIR/seed-N) and the plot (RUN_DIR/learning.png, .html) go "
        "(default runs/bench-learning)",
    )


def final_game(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rounds played on the game of the run's last round: a curriculum (`training.surgery_schedule` with
    game-size) starts on a smaller game, whose rounds are not the bars' test."""
    if not rows:
        return rows
    size = (rows[-1].get("heroes_per_side"), rows[-1].get("lanes"))
    return [r for r in rows if (r.get("heroes_per_side"), r.get("lanes")) == size]


def bars_met(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """The minutes at which each bar of BARS was first met on the run's final game (None: never)."""
    met: dict[str, float | None] = {}
    for name, key, level in BARS:
        met[name] = next((r["minutes"] for r in final_game(rows) if r.get(key) is not None and r[key] >= level), None)
    return met


def holds(rows: list[dict[str, Any]], minutes: float) -> bool | None:
    """Whether every round of the run's last third won against the scripted bot at least as often as
    the best earlier round on the same game less that round's 95% half-width (None: no round in one of the two
    parts)."""
    rows = final_game(rows)
    cut = minutes * 2.0 / 3.0
    earlier = [r for r in rows if r["minutes"] < cut and r.get("win_rate_scripted") is not None]
    last = [r for r in rows if r["minutes"] >= cut and r.get("win_rate_scripted") is not None]
    if not earlier or not last:
        return None
    best = max(earlier, key=lambda r: r["win_rate_scripted"])
    floor = best["win_rate_scripted"] - (best["ci_scripted"][1] - best["ci_scripted"][0]) / 2.0
    return all(r["win_rate_scripted"] >= floor for r in last)


def _train(config: str, overrides: list[str], run_dir: Path, minutes: float, label: str) -> list[dict[str, Any]]:
    with UpProcess(config, overrides, run_dir, address_timeout=300.0) as up:
        started = time.monotonic()
        while (elapsed := time.monotonic() - started) < minutes * 60.0:
            if not up.running:
                raise FiveActorsError(f"{label}: `up` stopped early:\n{up.output_tail()}")
            time.sleep(min(30.0, minutes * 60.0 - elapsed))
            rows = _rows(run_dir)
            last = rows[-1] if rows else None
            summary = (
                "no eval round yet"
                if last is None
                else (
                    f"v{last['version']} vs random {last['win_rate_random']} vs scripted {last['win_rate_scripted']} "
                    f"TrueSkill {last['trueskill']:.1f}"
                )
            )
            print(
                f"{label}: {(time.monotonic() - started) / 60:.1f}/{minutes:g} min, {summary}",
                file=sys.stderr,
                flush=True,
            )
    return _rows(run_dir)


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    try:
        return eval_history(run_dir)
    except FiveActorsError:
        return []  # no logs yet


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Train every seed, then report and plot."""
    if args.minutes <= 0 or args.seeds < 1:
        raise FiveActorsError("--minutes must be positive and --seeds at least 1")
    seeds: list[dict[str, Any]] = []
    curves: dict[str, list[dict[str, Any]]] = {}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        run_dir = args.run_dir / f"seed-{seed}"
        overrides = [*args.overrides, f"training.seed={seed}", f"game.seed={seed}"]
        rows = _train(args.config, overrides, run_dir, args.minutes, f"seed {seed}")
        curves[f"seed {seed}"] = rows
        seeds.append(
            {
                "seed": seed,
                "run_dir": str(run_dir),
                "bars": bars_met(rows),
                "holds": holds(rows, args.minutes),
                "rounds": rows,
            }
        )
    png = args.run_dir / "learning.png"
    page = plot_history(curves, png, title=f"five-actors up --config {args.config}: {args.minutes:g} minutes per seed")
    return {
        "config": args.config,
        "overrides": args.overrides,
        "minutes": args.minutes,
        "seeds": seeds,
        "plot": str(png),
        "page": str(page),
    }
