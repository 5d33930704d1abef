"""Schedules over parameter versions: their values, their config syntax, and bad ones refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from five_actors.actors.params import model_spec
from five_actors.config import load_config, read_run_config, write_run_config
from five_actors.errors import ConfigError
from five_actors.model.config import PPOConfig
from five_actors.model.policy import Policy
from five_actors.model.ppo import PPO
from five_actors.schedule import schedule_value


def test_a_schedule_is_linear_between_its_points_and_flat_outside() -> None:
    points = ((100.0, 0.01), (300.0, 0.001))
    assert [schedule_value(points, v) for v in (0, 100, 200, 300, 10**6)] == pytest.approx(
        [0.01, 0.01, 0.0055, 0.001, 0.001]
    )
    assert schedule_value(3e-4, 12345) == 3e-4


def test_schedules_are_set_in_a_config_and_survive_the_run_config(tmp_path: Path) -> None:
    config = load_config(
        "smoke",
        [
            "ppo.entropy_coef=[[0, 0.02], [50, 0.002]]",
            "ppo.learning_rate=1e-3",
            "game.team_spirit=[[0, 0.5], [10, 1.0]]",
        ],
    )
    assert config.ppo.entropy_coef == ((0.0, 0.02), (50.0, 0.002)) and config.ppo.learning_rate == 1e-3
    assert config.game.team_spirit_at(5) == pytest.approx(0.75)
    write_run_config(config, tmp_path)
    assert read_run_config(tmp_path) == config


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (
            "ppo.entropy_coef=[[10, 0.01], [5, 0.001]]",
            "entropy_coef: schedule versions must be >= 0 and strictly ascending",
        ),
        ("ppo.learning_rate=[[0, 2.0]]", "learning_rate must be within [0.0, 1.0], got 2.0"),
        ("ppo.learning_rate=[]", "learning_rate: a schedule needs at least one"),
        ("ppo.entropy_coef=[[0, 0.01, 3]]", "entropy_coef: each schedule point is [version, value]"),
        ("game.team_spirit=[[0, 0.3], [100, 1.5]]", "game.team_spirit must be within [0.0, 1.0], got 1.5"),
        ("game.team_spirit='high'", "game.team_spirit"),
    ],
)
def test_bad_schedules_are_refused_naming_the_key(setting: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_config("smoke", [setting])


def test_ppo_follows_the_learning_rate_and_entropy_schedules() -> None:
    policy = Policy(model_spec(load_config("smoke")))
    ppo = PPO(policy, PPOConfig(learning_rate=((0.0, 1e-3), (100.0, 1e-4)), entropy_coef=((0.0, 0.01), (100.0, 0.001))))
    assert ppo.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3) and ppo.entropy_coef == pytest.approx(0.01)
    ppo.follow_version(50)
    assert ppo.optimizer.param_groups[0]["lr"] == pytest.approx(5.5e-4) and ppo.entropy_coef == pytest.approx(0.0055)
    ppo.follow_version(50, lr_scale=0.0)  # held after a surgery: Adam's moments move, the weights do not
    before = [p.detach().clone() for p in policy.parameters()]
    for p in policy.parameters():
        p.grad = torch.ones_like(p)
    ppo.optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(before, policy.parameters()))
