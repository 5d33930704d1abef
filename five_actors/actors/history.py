"""A run's evaluation history read back from its logs: one row per EvalActor round.

Each round's `eval_result` events (one per opponent) give the version, the win rates against
the scripted and random bots with their 95% intervals, and the TrueSkill score; in an
environment of one team (no opponents) a round's one event gives the mean return of its
held-out episodes with its 95% interval instead (`mean_return`, `ci_return`, `episodes`; no
win rates, TrueSkill None). The head's `training_progress` events (every 10 s) give the env
steps played by then. `five-actors logs
eval RUN_DIR` prints the rows as a table; the benchmarks report them as JSON.

What the policy did while it trained is read back the same way, per window of minutes: the
GameActors' `rollout_chunk` events (the rows the latest version played, their shaped reward and
each component summed) as each component per 1,000 agent-steps (one row for one step: a hero of
the lane game, a copy of a one-agent environment). `five-actors logs rollouts RUN_DIR` prints them.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from five_actors.actors.ratings import wilson_interval
from five_actors.errors import LogsError
from five_actors.logreplay import LogFilter, find_log_dir, read_merged


def eval_history(
    run_dir: Path, started: float | None = None, env_steps_at: Callable[[float], int | None] | None = None
) -> list[dict[str, Any]]:
    """The rounds in time order. `started` (UNIX time) is minute 0, by default the first
    training_progress event; `env_steps_at(ts)` overrides the env steps read from the logs."""
    rounds: dict[int, dict[str, Any]] = {}
    progress: list[tuple[float, int]] = []
    for record, _raw in read_merged(find_log_dir(run_dir), LogFilter(events=("eval_result", "training_progress"))):
        if record["event"] == "training_progress":
            if "env_steps" in record:
                progress.append((float(record["ts"]), int(record["env_steps"])))
            started = float(record["ts"]) if started is None else started
            continue
        row = rounds.setdefault(int(record["round"]), {"ts": float(record["ts"]), "version": int(record["version"])})
        row["ts"] = max(row["ts"], float(record["ts"]))
        row["trueskill"] = record.get("trueskill")
        row[record.get("opponent", RETURNS)] = record
    times = [t for t, _ in progress]

    def logged_steps(ts: float) -> int | None:
        index = bisect.bisect_right(times, ts)
        return progress[index - 1][1] if index else None

    origin = started if started is not None else min((r["ts"] for r in rounds.values()), default=0.0)
    table = []
    for number in sorted(rounds):
        row = rounds[number]
        scripted, random, returns = row.get("scripted"), row.get("random"), row.get(RETURNS)
        past = [r for name, r in row.items() if name.startswith("v") and isinstance(r, dict)]
        lane = scripted or random or {}
        table.append(
            {
                "round": number,
                "minutes": round((row["ts"] - origin) / 60.0, 2),
                "env_steps": (env_steps_at or logged_steps)(row["ts"]),
                "version": row["version"],
                "heroes_per_side": lane.get("heroes_per_side"),
                "lanes": lane.get("lanes"),
                "win_rate_scripted": None if scripted is None else scripted["win_rate"],
                "ci_scripted": None if scripted is None else [scripted["ci_low"], scripted["ci_high"]],
                "win_rate_random": None if random is None else random["win_rate"],
                "ci_random": None if random is None else [random["ci_low"], random["ci_high"]],
                **_pooled_past(past),
                "trueskill": row["trueskill"],
                "mean_return": None if returns is None else returns["mean_return"],
                "ci_return": None if returns is None else [returns["ci_low"], returns["ci_high"]],
                "episodes": None if returns is None else returns["episodes"],
            }
        )
    return table


RETURNS = "returns"
"""Where a round of a one-team environment keeps its event (it has no opponent to be named by)."""


def rollout_history(run_dir: Path, window_minutes: float = 5.0) -> list[dict[str, Any]]:
    """Per window of `window_minutes` from the start of training (the first training_progress or rollout_chunk
    event, whichever was logged first): its first minute, the newest version that played, the agent-steps played
    by the latest version, and the shaped reward (`reward`) and each component (`reward_NAME`) per 1,000 of them."""
    if not window_minutes > 0:
        raise LogsError(f"the window must be a positive number of minutes, got {window_minutes}")
    started: float | None = None
    windows: dict[int, dict[str, Any]] = {}
    events = ("rollout_chunk", "training_progress")
    for record, _raw in read_merged(find_log_dir(run_dir), LogFilter(events=events)):
        started = float(record["ts"]) if started is None else started
        if record["event"] != "rollout_chunk":
            continue
        index = int((float(record["ts"]) - started) // (60.0 * window_minutes))
        row = windows.setdefault(index, {"version": 0, "agent_steps": 0, "sums": {}})
        row["version"] = max(row["version"], int(record["version"]))
        row["agent_steps"] += int(record["chunks"]) * int(record["steps"])
        for key, value in record.items():
            if _is_reward(key):
                row["sums"][key] = row["sums"].get(key, 0.0) + float(value)
    table = []
    for index in sorted(windows):
        row = windows[index]
        per = 1000.0 / row["agent_steps"] if row["agent_steps"] else 0.0
        table.append(
            {
                "minutes": round(index * window_minutes, 2),
                "version": row["version"],
                "agent_steps": row["agent_steps"],
                **{key: round(total * per, 4) for key, total in row["sums"].items()},
            }
        )
    return table


def rollouts_text(rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned text table: one column per reward component, named without its `reward_`."""
    keys = list(dict.fromkeys(k for row in rows for k in row if _is_reward(k)))
    names = [key.removeprefix("reward_") if key != "reward" else "total" for key in keys]
    width = max([9, *(len(name) + 1 for name in names)])
    lines = [
        "reward per 1,000 agent-steps of the latest version",
        f"{'min':>7} {'version':>8} {'agent steps':>12}" + "".join(f"{name:>{width}}" for name in names),
    ]
    for row in rows:
        cells = "".join(f"{row.get(key, 0.0):>{width}.2f}" for key in keys)
        lines.append(f"{row['minutes']:>7.1f} {row['version']:>8} {row['agent_steps']:>12,}" + cells)
    return "\n".join(lines) + "\n"


def _is_reward(key: str) -> bool:
    """Whether a rollout_chunk field is the shaped reward or one of its components."""
    return key == "reward" or key.startswith("reward_")


def _pooled_past(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The round's games against past versions taken together: win rate (a draw counts half) and its 95% interval."""
    games = sum(int(r.get("games", 0)) for r in results)
    if not games:
        return {"win_rate_past": None, "ci_past": None}
    score = sum(r["wins"] + 0.5 * r["draws"] for r in results)
    low, high = wilson_interval(score, games)
    return {"win_rate_past": round(score / games, 4), "ci_past": [round(low, 4), round(high, 4)]}


def history_text(rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned text table ('-' where a figure is unknown): win rates and TrueSkill, or the mean
    return of held-out episodes where the environment has one team."""
    if any(row.get("mean_return") is not None for row in rows):
        return _returns_text(rows)
    header = (
        f"{'min':>7} {'env steps':>11} {'version':>8} {'vs scripted [95% CI]':>22} {'vs random':>10} "
        f"{'vs past':>8} {'TrueSkill':>10}"
    )
    lines = [header]
    for row in rows:
        steps = "-" if row["env_steps"] is None else f"{row['env_steps']:,}"
        scripted = (
            "-"
            if row["win_rate_scripted"] is None
            else f"{row['win_rate_scripted']:.2f} [{row['ci_scripted'][0]:.2f}, {row['ci_scripted'][1]:.2f}]"
        )
        random = "-" if row["win_rate_random"] is None else f"{row['win_rate_random']:.2f}"
        past = "-" if row.get("win_rate_past") is None else f"{row['win_rate_past']:.2f}"
        lines.append(
            f"{row['minutes']:>7.1f} {steps:>11} {row['version']:>8} {scripted:>22} {random:>10} {past:>8} "
            f"{row['trueskill']:>10.2f}"
        )
    return "\n".join(lines) + "\n"


def _returns_text(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'min':>7} {'env steps':>11} {'version':>8} {'mean return [95% CI]':>28} {'episodes':>9}"]
    for row in rows:
        steps = "-" if row["env_steps"] is None else f"{row['env_steps']:,}"
        low, high = row["ci_return"] or (None, None)
        returns = "-" if row["mean_return"] is None else f"{row['mean_return']:.1f} [{low:.1f}, {high:.1f}]"
        episodes = "-" if row["episodes"] is None else str(row["episodes"])
        lines.append(f"{row['minutes']:>7.1f} {steps:>11} {row['version']:>8} {returns:>28} {episodes:>9}")
    return "\n".join(lines) + "\n"
