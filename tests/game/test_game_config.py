"""The [game] config section: defaults load, impossible values are refused naming the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from five_actors.config import Config, load_config
from five_actors.errors import ConfigError
from five_actors.game.config import GameConfig


def test_default_config_has_the_full_game() -> None:
    cfg = Config().game
    assert (cfg.lanes, cfg.heroes_per_side, cfg.version) == (3, 5, 1)
    assert len(cfg.hero_types) >= 5


def test_a_config_file_sets_the_game(tmp_path: Path) -> None:
    path = tmp_path / "small.toml"
    path.write_text('[game]\nlanes = 1\nversion = 2\nhero_types = ["mage", "priest"]\nreward_tower = [1.0]\n')
    cfg = load_config(path, ["game.team_spirit=0.5"]).game
    assert (cfg.lanes, cfg.version, cfg.hero_types, cfg.team_spirit) == (1, 2, ("mage", "priest"), 0.5)


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("game.heroes_per_side=0", "game.heroes_per_side"),
        ("game.creep_speed=-1.0", "game.creep_speed"),
        ("game.version=3", "game.version"),
        ("game.lanes=4", "game.lanes"),
        ('game.hero_types=["wizard"]', "wizard"),
        ("game.team_spirit=1.5", "game.team_spirit"),
        ("game.draft=sometimes", "game.draft"),
        ("game.lane_width=0", "game.lane_width"),
    ],
)
def test_impossible_values_are_refused(tmp_path: Path, setting: str, named: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text("")
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(path, [setting])


def test_direct_construction_refuses_too() -> None:
    with pytest.raises(ValueError, match="game.hero_speed"):
        GameConfig(hero_speed=0.0)


def test_reading_a_config_does_not_load_the_game_kernels() -> None:
    code = "import sys, five_actors.config; five_actors.config.Config(); print('numba' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env={"PYTHONPATH": ":".join(sys.path)}
    )
    assert done.stdout.strip() == "False", done.stderr


def test_every_kernel_parameter_index_is_its_names_place() -> None:
    """The kernels read the parameter vector by P_ indices: each one is its name's position (by
    lookup, not by hand-kept order), and no two share a place."""
    from five_actors.game import state

    indices = {name: value for name, value in vars(state).items() if name.startswith("P_") and isinstance(value, int)}
    assert sorted(indices.values()) == list(range(len(state.PARAM_NAMES)))
    assert state.pack_params(GameConfig(tower_hp=1234.0))[state.P_TOWER_HP] == 1234.0
    assert state.pack_params(GameConfig())[state.P_TEAM_SPIRIT] == GameConfig().team_spirit_at(0)
