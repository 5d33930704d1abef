import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from five_actors.config import apply_override, from_mapping, load_config, resolve_config_path
from five_actors.errors import ConfigError


@dataclass(frozen=True)
class Inner:
    size: int = 4
    """How big."""

    def __post_init__(self) -> None:
        if self.size <= 0:
            raise ValueError(f"size must be positive, got {self.size}")


@dataclass(frozen=True)
class Outer:
    name: str
    rate: float = 1.0
    mode: Literal["a", "b"] = "a"
    inner: Inner = field(default_factory=Inner)
    items: list[Inner] = field(default_factory=list)


def test_builds_nested_dataclasses_and_widens_ints_to_floats() -> None:
    cfg = from_mapping(Outer, {"name": "x", "rate": 2, "inner": {"size": 8}, "items": [{"size": 1}]})
    assert cfg == Outer("x", 2.0, "a", Inner(8), [Inner(1)])
    assert isinstance(cfg.rate, float)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "x", "colour": 1}, "colour: unknown key"),
        ({}, "name: required key is missing"),
        ({"name": "x", "rate": "fast"}, "rate: expected a number"),
        ({"name": "x", "mode": "c"}, "mode: 'c' is not one of 'a', 'b'"),
        ({"name": "x", "inner": {"size": 0}}, "inner: size must be positive"),
        ({"name": "x", "items": [{"size": 1}, {"size": True}]}, "items[1].size: expected an integer"),
    ],
)
def test_errors_name_the_key(data: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        from_mapping(Outer, data)


def test_override_parses_toml_values_and_bare_strings() -> None:
    tree: dict = {"a": {"b": 1}}
    apply_override(tree, "a.b=2.5")
    apply_override(tree, "a.c=hello")
    apply_override(tree, "d.e=[1, 2]")
    assert tree == {"a": {"b": 2.5, "c": "hello"}, "d": {"e": [1, 2]}}
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        apply_override(tree, "nonsense")


def test_unknown_config_lists_the_bundled_ones(tmp_path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        resolve_config_path(tmp_path / "missing.toml")


def test_bad_toml_names_the_file(tmp_path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("name = \n")
    with pytest.raises(ConfigError, match="bad.toml: invalid TOML"):
        load_config(bad)


@pytest.mark.parametrize(
    "key",
    ["node.heartbeat_s", "tree.backoff", "training.eval_every_s", "training.allreduce_timeout_s", "ppo.learning_rate"],
)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_nan_and_infinity_are_refused_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{key}: expected a finite number, got {float(value)!r}")):
        load_config("smoke", [f"{key}={value}"])


def test_up_exits_2_naming_a_nan_key_before_anything_starts(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "five_actors",
            "up",
            "--config",
            "smoke",
            "--set",
            "tree.backoff=nan",
            "--run-dir",
            str(tmp_path / "run"),
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "tree.backoff: expected a finite number" in done.stderr, done.stderr
    assert not (tmp_path / "run" / "config.json").exists()
