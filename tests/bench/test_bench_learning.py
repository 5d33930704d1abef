"""`five-actors bench learning`: a real `up` per seed, its eval rounds, the bars and the plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from five_actors.bench.learning_curve import bars_met, holds
from tests.supervisor.cluster import cli_json


def row(minutes: float, scripted: float, half: float = 0.1, random: float = 0.5) -> dict[str, object]:
    return {
        "minutes": minutes,
        "win_rate_scripted": scripted,
        "ci_scripted": [scripted - half, scripted + half],
        "win_rate_random": random,
    }


def test_bars_are_the_first_minutes_a_rate_is_reached() -> None:
    rows = [row(5, 0.1, random=0.95), row(20, 0.5), row(40, 0.85), row(50, 0.7)]
    assert bars_met(rows) == {"random_0.9": 5, "scripted_0.5": 20, "scripted_0.8": 40}
    assert bars_met(rows[:1]) == {"random_0.9": 5, "scripted_0.5": None, "scripted_0.8": None}


def test_the_last_third_holds_within_the_best_earlier_rounds_interval() -> None:
    earlier = [row(10, 0.6, half=0.2), row(30, 0.8, half=0.1)]
    assert holds([*earlier, row(65, 0.72), row(85, 0.9)], 90) is True  # 0.72 >= 0.8 - 0.1
    assert holds([*earlier, row(65, 0.65), row(85, 0.9)], 90) is False, "a fall past the interval is a fall back"
    assert holds(earlier, 90) is None, "no round in the last third: unknown"


def test_a_curriculums_rounds_on_its_smaller_game_do_not_meet_the_bars() -> None:
    small = [
        {**row(5, 0.9, random=1.0), "heroes_per_side": 2, "lanes": 1},
        {**row(25, 1.0), "heroes_per_side": 2, "lanes": 1},
    ]
    full = [{**row(m, w), "heroes_per_side": 5, "lanes": 3} for m, w in ((35, 0.3), (50, 0.55), (70, 0.6))]
    assert bars_met([*small, *full]) == {"random_0.9": None, "scripted_0.5": 50, "scripted_0.8": None}
    assert holds([*small, *full], 90) is True, "the 2v2 round's 1.00 before minute 60 sets no floor for 5v5"
    assert holds([*full[:2], {**full[2], "win_rate_scripted": 0.4}], 90) is False


@pytest.mark.timeout(600)
def test_a_smoke_run_reports_rounds_bars_and_a_plot(tmp_path: Path) -> None:
    args = ["bench", "learning", "--config", "smoke", "--minutes", "0.5", "--seeds", "1", "--first-seed", "3"]
    result, stderr = cli_json([*args, "--run-dir", str(tmp_path)], timeout=540)
    [seed] = result["seeds"]
    assert seed["seed"] == 3 and set(seed["bars"]) == {"random_0.9", "scripted_0.5", "scripted_0.8"}
    rounds = seed["rounds"]
    assert rounds and all(0.0 <= r["win_rate_random"] <= 1.0 and isinstance(r["trueskill"], float) for r in rounds)
    assert {(r["heroes_per_side"], r["lanes"]) for r in rounds} == {(2, 1)}, "the smoke config's game"
    assert json.loads((tmp_path / "seed-3" / "config.json").read_text())["training"]["seed"] == 3
    assert Path(result["plot"]).read_bytes().startswith(b"\x89PNG") and "seed 3" in Path(result["page"]).read_text()
    assert "seed 3: " in stderr, "progress while it trains"
