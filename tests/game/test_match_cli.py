"""`five-actors match`: a bot-vs-bot match from the command line, printed and recorded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

from five_actors.game.replay import load_replay


def five_actors(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run(
        [sys.executable, "-m", "five_actors", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_match_prints_the_result_and_records_the_replay(tmp_path: Path) -> None:
    path = tmp_path / "m.replay"
    done = five_actors(
        "match", "--seed", "2", "--record", str(path), "--set", "game.lanes=1", "--set", "game.time_limit_steps=150"
    )
    assert done.returncode == 0, done.stderr
    result = orjson.loads(done.stdout)
    assert result["steps"] == 150 and result["reason"] == "time_limit"
    replay = load_replay(path)
    assert replay.result == result and len(replay.meta["lanes"]) == 1 and replay.meta["seed"] == 2


def test_match_refuses_an_impossible_setting() -> None:
    done = five_actors("match", "--set", "game.heroes_per_side=0")
    assert done.returncode == 2
    assert "game.heroes_per_side" in done.stderr


def test_match_games_summarises_many_matches_with_each_teams_rewards() -> None:
    done = five_actors(
        "match", "--team0", "scripted", "--team1", "random", "--games", "6", "--seed", "4", "--set", "game.lanes=1"
    )
    assert done.returncode == 0, done.stderr
    summary = orjson.loads(done.stdout)
    assert summary["games"] == 6 and summary["team0_wins"] + summary["team1_wins"] + summary["draws"] == 6
    assert summary["team0_wins"] >= 5, summary
    scripted, random = summary["reward_per_hero_minute"]
    assert scripted["tower"] > random.get("tower", 0.0) and scripted["win"] > 0 and "win" not in random
    assert five_actors("match", "--games", "2", "--record", "x.replay").returncode == 2
