"""`five-actors bench learn` through the real command line, tiny budgets, on CartPole and the lane game."""

import json

import pytest

from five_actors.cli import main


def _bench(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[dict, str]:
    assert main(["bench", "learn", *args]) == 0
    out = capsys.readouterr()
    return json.loads(out.out), out.err


def test_learn_prints_a_curve_per_seed_and_a_progress_line(capsys: pytest.CaptureFixture[str]) -> None:
    result, stderr = _bench(
        capsys,
        "--env",
        "CartPole-v1",
        "--steps",
        "512",
        "--seeds",
        "2",
        "--num-envs",
        "4",
        "--set",
        "model.lstm_size=8",
    )
    assert result["seeds"] == 2 and [r["seed"] for r in result["runs"]] == [0, 1]
    run = result["runs"][0]
    assert run["curve"][-1]["steps"] == 512 and run["curve"][-1]["mean_return"] > 0
    assert "learn CartPole-v1 seed 1: 512/512 steps" in stderr


def test_learn_on_the_lane_game_plays_the_scripted_bot(capsys: pytest.CaptureFixture[str]) -> None:
    result, _ = _bench(
        capsys,
        "--env",
        "lane",
        "--steps",
        "80",
        "--seeds",
        "1",
        "--num-envs",
        "1",
        "--set",
        "baseline.rollout_chunks=1",
        "--set",
        "baseline.epochs=1",
        "--set",
        "model.lstm_size=16",
    )
    run = result["runs"][0]
    assert result["env"] == "lane" and run["curve"][-1]["steps"] == 80  # 1 game x 5 heroes x 16 steps
    assert result["final_win_rates"] == [None]  # no game finishes in 16 steps


def test_bad_config_values_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "learn", "--steps", "10", "--set", "ppo.clip=0"]) == 2
    assert "clip must be positive" in capsys.readouterr().err
