"""Bots and matches: the scripted bot beats random play, and a played match replays."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from five_actors.game.bots import RandomBot, ScriptedBot
from five_actors.game.config import GameConfig
from five_actors.game.match import play_match, play_matches
from five_actors.game.replay import KIND_ANCIENT, KIND_HERO, UNIT_COLUMNS, load_replay

# One lane keeps 200 games within a test's budget; the bots are the same on every map.
ONE_LANE = GameConfig(lanes=1)


def test_scripted_bot_beats_random_bot_in_at_least_95_percent_of_200_games() -> None:
    results = play_matches(ONE_LANE, ScriptedBot(ONE_LANE), RandomBot(seed=1), games=200, seed=7)
    wins = sum(r["winner"] == 0 for r in results)
    assert wins >= 190, f"scripted won {wins} of 200"
    for r in (r for r in results if r["winner"] == 0 and r["reason"] == "time_limit"):
        assert r["towers"][0] > r["towers"][1], f"a game won at the time limit is won on towers destroyed: {r}"
    kills = np.array([r["kills"] for r in results])
    assert kills[:, 0].sum() > 3 * kills[:, 1].sum()


def test_a_recorded_match_replays(tmp_path: Path) -> None:
    cfg = GameConfig(lanes=1, time_limit_steps=400)
    path = tmp_path / "match.replay"
    result = play_match(cfg, ScriptedBot(cfg), RandomBot(seed=2), seed=3, record=path)
    replay = load_replay(path)
    assert replay.result == result
    assert result["steps"] == 400 and result["reason"] == "time_limit"
    assert len(replay.frames) == result["steps"] + 1
    assert replay.meta["seed"] == 3 and replay.meta["hero_types"] == list(cfg.hero_types)
    assert replay.meta["map_size"] == cfg.map_size and replay.meta["game_version"] == 1
    first = replay.frames[0].units
    kind = first[:, UNIT_COLUMNS.index("kind")]
    assert (kind == KIND_HERO).sum() == 10 and (kind == KIND_ANCIENT).sum() == 2
    moved = replay.frames[200].units[:10, :2] - first[:10, :2]
    assert np.abs(moved).max() > 10, "heroes walk"
    kinds = {e["kind"] for frame in replay.frames for e in frame.events}
    assert {"last_hit", "kill"} <= kinds
