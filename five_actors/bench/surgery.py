"""`five-actors bench surgery`: a live surgery on the real actor system against training from scratch.

Two arms, each a real `five-actors up` subprocess (the whole tree: ParamServer, learner,
inference, game actors, EvalActor) on the same config, one after the other:

1. surgery: game v1 with an LSTM of `--lstm-from` units for the first half of the budget; then
   `POST /surgery` `game-version 2 + widen-lstm --lstm-to` (game-version 2 is add-observation of
   v2's features and add-action `recall`); training goes on to the budget;
2. scratch: game v2 with an LSTM of `--lstm-to` units from the start, for the same budget.

`--game-version 1` makes the surgery `widen-lstm` alone and keeps both arms on v1.

The budget is environment steps (game steps x games, summed over the GameActors in /actors):
with `--env-steps N` each arm trains N and arm 1 operates at N/2; otherwise arm 1 trains
`--minutes`/2 on v1, its env steps at that moment are half the budget, and both arms stop at
twice that. An arm that has not reached its budget after twice `--minutes` stops there
(`stopped_on: "time"`). Minutes count from the moment training flows (a game actor has
shipped chunks, a version was published) and the whole tree runs, so start-up is not part
of the budget.

It prints one JSON object: per arm a table of the EvalActor's rounds (minutes, env steps,
version, win rate vs the scripted bot with its 95% interval, vs the random bot, TrueSkill
mu above the random bot's), read from the run's `eval_result` events; for arm 1 the swap:
seconds from the request until the ParamServer's version passes the surgery's, env steps made
meanwhile against the rate before, learner steps discarded (taken while the surgery ran), and
the counters a swap moves (SWAP_COUNTERS) before the request and at the arm's end.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from five_actors.actors.history import eval_history
from five_actors.bench.running import UpProcess, running_metrics
from five_actors.errors import FiveActorsError
from five_actors.supervisor.health import problems

LEARNING_SET: tuple[str, ...] = (
    "game.lanes=1",
    "game.heroes_per_side=2",
    "game.time_limit_steps=600",
    "game.tower_hp=700",
    "game.ancient_hp=1250",
    "game.reward_tower=[9.0]",
    "game.reward_health=1.0",
    "ppo.learning_rate=5e-4",
    "ppo.horizon_seconds=60",
    "training.eval_every_s=90",
    "training.eval_games=16",
    "training.eval_past_versions=1",
)
"""The bench's settings on top of the config (before `--set`): a 2v2 one-lane game of 80 game
seconds, so that results arrive every few seconds of wall time and a small policy can move its
win rate within minutes; an eval round of 16 games every 90 s for the table (an eval round
takes a core away from training while it plays, so not more often).

The game is also made decisive in that time: towers and ancient at half health (creeps
tanked by heroes can take a tower within a game), each tower worth 9 instead of 2.25/3 and
health 1 per fraction instead of 2 (with the paper's weights, the towers' fire costs more
than hitting them pays, and self-play settles on heroes that keep away from every fight while
the random bot wins the tie-break on tower health), and a 60 s reward horizon, so that the
win at the end of an 80 s game is seen. With these, two 8-minute runs of the default tree (LSTM
128, game v1) beat the random bot in 0.97 and 0.81 of the last round's games and the scripted
bot in 0.25 and 0.28 (README, "Learning in minutes")."""

SMOKE_SET: tuple[str, ...] = ("training.pool_max_versions=1",)
"""`--smoke` on conf/smoke.toml: a small opponent pool, as a surgery operates (and verifies) every pool version before
it answers."""

SWAP_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("GameActor", "game_steps_dropped_arch", "game_steps_dropped_arch"),
    ("GameActor", "game_lost_steps", "game_lost_steps"),
    ("GameActor", "game_chunks_lost", "game_chunks_lost"),
    ("GameActor", "game_arch_switches", "game_arch_switches"),
    ("LearnerActor", "steps", "learner_steps"),
    ("LearnerActor", "chunks_dropped_arch", "learner_chunks_dropped_arch"),
    ("LearnerActor", "chunks_refused", "learner_chunks_refused"),
    ("ParamServerActor", "refused", "publishes_refused"),
)
"""The counters a swap moves: (actor class, metric in /actors, name in the report)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options."""
    parser.add_argument("--config", default="default", help="config file or bundled name (default: default)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override after the bench's own settings (repeatable)",
    )
    parser.add_argument(
        "--minutes",
        type=float,
        default=20.0,
        help="training minutes of each arm (default 20); sets the env-step budget",
    )
    parser.add_argument("--env-steps", type=int, help="env steps of each arm instead (arm 1 operates at half)")
    parser.add_argument(
        "--game-version",
        type=int,
        choices=(1, 2),
        default=2,
        help="game version after the surgery and of the scratch arm (default 2; 1: the surgery is widen-lstm alone)",
    )
    parser.add_argument("--lstm-from", type=int, default=64, help="LSTM units before the surgery (default 64)")
    parser.add_argument(
        "--lstm-to", type=int, default=128, help="LSTM units after it, and of the scratch arm (default 128)"
    )
    parser.add_argument(
        "--probe-steps", type=int, default=128, help="recorded game steps the surgery is verified on (default 128)"
    )
    parser.add_argument(
        "--start-timeout",
        type=float,
        default=300.0,
        help="seconds an arm's tree may take to start training (default 300)",
    )
    parser.add_argument(
        "--run-dir",
        type=Path,
        help="keep both runs here (RUN_DIR/surgery, RUN_DIR/scratch); default: a temporary directory",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=(
            "a tiny run for tests: conf/smoke.toml, 0.2 minutes per arm, LSTM 32 -> 48, 32 probe steps, "
            "both arms at once"
        ),
    )


@dataclasses.dataclass
class Budget:
    """When an arm stops: env steps (None until arm 1's first half sets it) and a wall-time cap."""

    minutes: float
    env_steps: int | None

    def reached(self, reading: Reading) -> bool:
        """Whether `reading` is at the budget (never while the budget is still unknown)."""
        return self.env_steps is not None and reading.env_steps >= self.env_steps

    @property
    def cap_s(self) -> float:
        """Seconds after which an arm stops whatever its env steps."""
        return 2.0 * 60.0 * self.minutes


@dataclasses.dataclass(frozen=True)
class Reading:
    """One read of the tree: UNIX time, env steps so far, the ParamServer's version, summed swap counters."""

    t: float
    env_steps: int
    version: int
    counters: dict[str, float]
    healthy: bool
    """Whether every permanent actor of the tree (the EvalActor too) runs, as /health judges it."""


class Watch:
    """Reads an `up` run's counters from /actors; a counter of an actor that restarted keeps its earlier total."""

    def __init__(self, up: UpProcess, poll_s: float) -> None:
        self.up = up
        self.poll_s = poll_s
        self.readings: list[Reading] = []
        self._last: dict[tuple[str, str], float] = {}
        self._base: dict[tuple[str, str], float] = {}

    def _total(self, metrics: dict[str, dict[str, Any]], key: str) -> float:
        for path, values in metrics.items():
            value = float(values.get(key, 0.0))
            if value < self._last.get((path, key), 0.0):
                self._base[(path, key)] = self._base.get((path, key), 0.0) + self._last[(path, key)]
            self._last[(path, key)] = value
        return sum(v + self._base.get(k, 0.0) for k, v in self._last.items() if k[1] == key)

    def read(self) -> Reading:
        """Read /actors once (the reading is kept for the env-steps-over-time lookup)."""
        if not self.up.running:
            raise FiveActorsError(f"`up` stopped during the benchmark:\n{self.up.output_tail()}")
        view = self.up.view()
        by_class = {cls: running_metrics(view, cls) for cls in ("GameActor", "LearnerActor", "ParamServerActor")}
        env_steps = self._total(by_class["GameActor"], "game_env_steps")
        counters = {name: self._total(by_class[cls], key) for cls, key, name in SWAP_COUNTERS}
        version = max((int(m.get("version", 0)) for m in by_class["ParamServerActor"].values()), default=0)
        reading = Reading(time.time(), int(env_steps), version, counters, not problems(view))
        self.readings.append(reading)
        return reading

    def until(
        self, done: Callable[[Reading], bool], timeout: float, poll_s: float | None = None
    ) -> tuple[Reading, bool]:
        """Read every `poll_s` until `done(reading)` or `timeout` seconds: (the last reading, whether done)."""
        deadline = time.monotonic() + timeout
        reading = self.readings[-1] if self.readings else None
        while True:
            try:
                reading = self.read()
            except OSError:
                pass  # /actors did not answer in time (a busy machine): the next poll tries again
            else:
                if done(reading):
                    return reading, True
            if time.monotonic() >= deadline:
                if reading is None:
                    raise FiveActorsError(f"{self.up.url}/actors did not answer within {timeout:g}s")
                return reading, False
            time.sleep(self.poll_s if poll_s is None else poll_s)

    def env_steps_at(self, t: float) -> int:
        """Env steps at UNIX time `t`: the last reading at or before it."""
        return next((r.env_steps for r in reversed(self.readings) if r.t <= t), 0)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run both arms and report their tables and the swap."""
    if args.smoke:
        args.config, args.minutes, args.lstm_from, args.lstm_to, args.probe_steps = "smoke", 0.2, 32, 48, 32
    if args.lstm_to <= args.lstm_from:
        raise FiveActorsError(
            f"--lstm-to {args.lstm_to} must be larger than --lstm-from {args.lstm_from}: surgery only widens"
        )
    if args.minutes <= 0 or (args.env_steps is not None and args.env_steps < 2):
        raise FiveActorsError("--minutes must be positive and --env-steps at least 2")
    overrides = [*(SMOKE_SET if args.smoke else LEARNING_SET), *args.overrides]
    budget = Budget(args.minutes, args.env_steps)
    ops = ["widen-lstm", str(args.lstm_to)]
    if args.game_version == 2:
        ops = ["game-version", "2", "+", *ops]
    with tempfile.TemporaryDirectory(prefix="bench-surgery-") as tmp:
        root = args.run_dir or Path(tmp)
        arms: dict[str, Callable[[], dict[str, Any]]] = {
            "surgery": lambda: _surgery_arm(
                args, [*overrides, "game.version=1", f"model.lstm_size={args.lstm_from}"], root / "surgery", budget, ops
            ),
            "scratch": lambda: _scratch_arm(
                args,
                [*overrides, f"game.version={args.game_version}", f"model.lstm_size={args.lstm_to}"],
                root / "scratch",
                budget,
            ),
        }
        if args.smoke:
            # Both trees at once: start-up is most of a smoke run; the arms share the CPUs, which a real run must not.
            with ThreadPoolExecutor(len(arms)) as pool:
                futures = {name: pool.submit(arm) for name, arm in arms.items()}
                results = {name: future.result() for name, future in futures.items()}
        else:
            results = {name: arm() for name, arm in arms.items()}
    return {
        "benchmark": "surgery",
        "variant": "live surgery through the actor system (POST /surgery on `five-actors up`)",
        "config": args.config,
        "overrides": overrides,
        "budget": {
            "env_steps_per_arm": budget.env_steps,
            "operated_at_env_steps": results["surgery"]["swap"]["env_steps_at_request"],
            "minutes_per_arm": args.minutes,
            "same": "env steps (game steps x games, all GameActors)",
            "arms_at_once": args.smoke,
        },
        "operations": " ".join(ops),
        "arms": results,
    }


def _poll_s(args: argparse.Namespace) -> float:
    return 0.5 if args.smoke else 2.0


def _start(watch: Watch, args: argparse.Namespace) -> Reading:
    """Wait until training flows (env steps made, a version published) and every actor, the EvalActor too, runs."""
    reading, ok = watch.until(
        lambda r: r.env_steps > 0 and r.version >= 1 and r.healthy, args.start_timeout, poll_s=1.0
    )
    if not ok:
        raise FiveActorsError(
            f"the actor system did not start training within {args.start_timeout:g}s:\n{watch.up.output_tail()}"
        )
    return reading


def _surgery_arm(
    args: argparse.Namespace, overrides: list[str], run_dir: Path, budget: Budget, ops: list[str]
) -> dict[str, Any]:
    with UpProcess(args.config, overrides, run_dir, args.start_timeout) as up:
        watch = Watch(up, _poll_s(args))
        start = _start(watch, args)
        if budget.env_steps is not None:
            half = budget.env_steps // 2
            watch.until(lambda r: r.env_steps >= half, budget.cap_s / 2)
        else:
            watch.until(lambda r: r.t - start.t >= 30.0 * args.minutes, 30.0 * args.minutes)
        pause = _swap(watch, ops, args.probe_steps)
        if budget.env_steps is None:
            budget.env_steps = 2 * pause["env_steps_at_request"]
        end, reached = watch.until(budget.reached, max(0.0, budget.cap_s - (time.time() - start.t)))
        pause["counters"] = {
            key: {
                "before": int(pause["counters"][key]),
                "at_end": int(end.counters[key]),
                "since_request": int(end.counters[key] - pause["counters"][key]),
            }
            for key in end.counters
        }
    return {
        "game": "v1" if args.game_version == 1 else "v1, then v2 from the surgery",
        "lstm": [args.lstm_from, args.lstm_to],
        **_summary(start, end, reached),
        "swap": pause,
        "table": _table(run_dir, watch, start.t),
    }


def _scratch_arm(args: argparse.Namespace, overrides: list[str], run_dir: Path, budget: Budget) -> dict[str, Any]:
    with UpProcess(args.config, overrides, run_dir, args.start_timeout) as up:
        watch = Watch(up, _poll_s(args))
        start = _start(watch, args)
        end, reached = watch.until(budget.reached, budget.cap_s)
    return {
        "game": f"v{args.game_version}",
        "lstm": [args.lstm_to],
        **_summary(start, end, reached),
        "table": _table(run_dir, watch, start.t),
    }


def _summary(start: Reading, end: Reading, reached: bool) -> dict[str, Any]:
    return {
        "minutes": round((end.t - start.t) / 60.0, 2),
        "env_steps": end.env_steps,
        "final_version": end.version,
        "stopped_on": "env steps" if reached else "time",
    }


def _swap(watch: Watch, ops: list[str], probe_steps: int) -> dict[str, Any]:
    """POST the surgery and time it: until the ParamServer's version passes the surgery's (the pause), and until
    the answer (the opponent pool operated too).

    The tree is read all along (the request waits on a thread), so the table's env steps and
    the counters cover the surgery itself.
    """
    before = watch.read()
    rate = _rate(watch.readings, before.t - 30.0)
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(watch.up.post, "/surgery", {"ops": ops, "dry_run": False, "probe_steps": probe_steps})
        answered, _ = watch.until(lambda r: answer.done(), 700.0, poll_s=0.2)
        status, report = answer.result()
    if status != 200:
        raise FiveActorsError(f"the surgery was refused ({status}): {report.get('message', report)}")
    version_to = int(report["version_to"])
    during = [r for r in watch.readings if r.t >= before.t]
    passed = [i for i, r in enumerate(during) if r.version > version_to]
    if passed:
        resumed, handed_over = during[passed[0]], during[max(passed[0] - 1, 0)]
    else:
        resumed, ok = watch.until(lambda r: r.version > version_to, 600.0, poll_s=0.2)
        if not ok:
            raise FiveActorsError(
                f"versions did not advance past {version_to} within 600 s of the surgery:\n{watch.up.output_tail()}"
            )
        handed_over = answered
    pause_s = resumed.t - before.t
    verification = report["verification"][str(report["version_from"])]
    return {
        "pause_s": round(pause_s, 3),
        "request_to_answer_s": round(answered.t - before.t, 3),
        "param_server_pause_s": report["pause_seconds"],
        "param_server_in_play_s": report["in_play_seconds"],
        "param_server_surgery_s": report["seconds"],
        "version_from": report["version_from"],
        "version_to": version_to,
        "versions_operated": len(report["versions_operated"]),
        "pool_dropped": len(report["pool_dropped"]),
        "architecture": report["changes"]["architecture"],
        "max_prob_diff": verification["max_prob_diff"],
        "max_value_diff": verification["max_value_diff"],
        "env_steps_at_request": before.env_steps,
        "env_steps_during_pause": resumed.env_steps - before.env_steps,
        "env_steps_at_prior_rate": None if rate is None else round(rate * pause_s),
        # The new model is the operated version_from: learner steps taken until the hand-over are not kept.
        "learner_steps_discarded": int(handed_over.counters["learner_steps"] - before.counters["learner_steps"]),
        "counters": before.counters,
    }


def _rate(readings: list[Reading], since: float) -> float | None:
    """Env steps per second over the readings after UNIX time `since`, None with fewer than two."""
    window = [r for r in readings if r.t >= since]
    if len(window) < 2 or window[-1].t <= window[0].t:
        return None
    return (window[-1].env_steps - window[0].env_steps) / (window[-1].t - window[0].t)


def _table(run_dir: Path, watch: Watch, started: float) -> list[dict[str, Any]]:
    """One row per eval round (read once `up` has stopped and flushed its logs), env steps from this bench's
    readings."""
    return eval_history(run_dir, started, watch.env_steps_at)
