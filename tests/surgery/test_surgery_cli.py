"""`five-actors surgery ... --checkpoint IN --out OUT`: the offline round trip on checkpoint files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import torch

from five_actors.actors.params import initial_policy, model_spec
from five_actors.cli import main
from five_actors.config import load_config
from five_actors.model.checkpoint import load_into, read_checkpoint, save_checkpoint
from five_actors.model.policy import Policy
from five_actors.surgery.state import ModelState


@pytest.fixture
def checkpoint(tmp_path: Path, trained: ModelState) -> Path:
    policy = trained.build_policy()
    optimizer = torch.optim.Adam(policy.parameters())
    optimizer.load_state_dict(dict(trained.optimizer or {}))
    path = tmp_path / "in.ckpt"
    save_checkpoint(path, policy, optimizer, {"version": 7, "updates": 2})
    return path


def test_round_trip_writes_a_loadable_wider_checkpoint(checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.ckpt"
    command = [
        sys.executable,
        "-m",
        "five_actors",
        "surgery",
        "widen-lstm",
        "48",
        "+",
        "add-action",
        "blink",
        "move",
        "--checkpoint",
        str(checkpoint),
        "--out",
        str(out),
        "--probe-steps",
        "16",
        "--json",
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    report = orjson.loads(done.stdout)
    assert report["verification"]["preserved"] and report["verification"]["max_prob_diff"] <= 1e-6
    assert report["changes"]["widths"] == {"lstm_size": [32, 48]}
    assert report["changes"]["shapes_changed"]["lstm.weight_hh"] == {"from": [128, 32], "to": [192, 48]}
    assert report["changes"]["action_types_added"] == ["blink"]
    new = read_checkpoint(out)
    assert new.spec.lstm_size == 48 and new.spec.hash == report["changes"]["architecture"]["to"]
    assert new.counters == {"version": 7, "updates": 2, "anneal_ppm:blink": 0}
    policy = Policy(new.spec)
    optimizer = torch.optim.Adam(policy.parameters())
    load_into(new, policy, optimizer)  # strict: every name and shape
    assert len(optimizer.state) == len(list(policy.parameters()))


def test_dry_run_reports_and_writes_nothing(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.ckpt"
    before = checkpoint.read_bytes()
    code = main(
        [
            "surgery",
            "game-version",
            "2",
            "--checkpoint",
            str(checkpoint),
            "--out",
            str(out),
            "--dry-run",
            "--probe-steps",
            "8",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "features added to self: recall_cd, kills, deaths" in printed
    assert "action type added: recall" in printed
    assert "max probability difference 0" in printed and "dry run: nothing written" in printed
    assert not out.exists() and checkpoint.read_bytes() == before


def test_refused_surgery_writes_nothing(checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.ckpt"
    code = main(
        ["surgery", "widen-lstm", "16", "--checkpoint", str(checkpoint), "--out", str(out), "--probe-steps", "8"]
    )
    assert code == 2
    assert "removal is not supported" in capsys.readouterr().err
    assert not out.exists()


def test_corrupt_checkpoint_is_refused(checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = bytearray(checkpoint.read_bytes())
    data[len(data) // 2] ^= 0xFF
    checkpoint.write_bytes(bytes(data))
    out = tmp_path / "out.ckpt"
    code = main(["surgery", "widen-lstm", "48", "--checkpoint", str(checkpoint), "--out", str(out)])
    assert code == 2
    assert "corrupt" in capsys.readouterr().err
    assert not out.exists()


def test_out_or_dry_run_is_required(checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["surgery", "widen-lstm", "48", "--checkpoint", str(checkpoint)]) == 2
    assert "--out" in capsys.readouterr().err


def test_no_probe_steps_is_refused(checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "surgery",
            "widen-lstm",
            "48",
            "--checkpoint",
            str(checkpoint),
            "--out",
            str(tmp_path / "o"),
            "--probe-steps",
            "0",
        ]
    )
    assert code == 2
    assert "at least one step" in capsys.readouterr().err


FACTORY = "env.factory=tests.actors.gym_factories:cartpole_grown"
GROWN = ["--config", "cartpole", "--set", "env.id=lane", "--set", FACTORY]
"""The cartpole config on CartPole with a fifth observation feature."""


def test_add_observation_carries_an_external_environments_model_to_its_grown_space(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = initial_policy(model_spec(load_config("cartpole")), seed=3)  # reads CartPole's obs0..obs3
    path, out = tmp_path / "cartpole.ckpt", tmp_path / "grown.ckpt"
    save_checkpoint(path, policy, torch.optim.Adam(policy.parameters()), {"version": 4})
    args = ["surgery", "add-observation", "self.obs4", "--checkpoint", str(path), "--out", str(out)]
    assert main([*args, *GROWN, "--probe-steps", "64", "--json"]) == 0
    report = orjson.loads(capsys.readouterr().out)
    # Verified on the grown environment's own observations: the old model reads obs0..obs3 of them, the new one all 5.
    assert report["verification"]["preserved"] and report["verification"]["rows"] == 2
    assert report["changes"]["features_added"] == {"self": ["obs4"]}
    new = read_checkpoint(out)
    assert new.spec.obs.block("self").features == ("obs0", "obs1", "obs2", "obs3", "obs4")

    assert main(["surgery", "add-observation", "all", "--checkpoint", str(path), "--dry-run", *GROWN]) == 2
    assert "a model of an external environment needs the new ones named" in capsys.readouterr().err
    assert main(["surgery", "add-observation", "self.obs0", "--checkpoint", str(path), "--dry-run", *GROWN]) == 2
    assert "already has feature 'obs0'" in capsys.readouterr().err
    assert main(["surgery", "widen-lstm", "96", "--checkpoint", str(path), "--dry-run", "--set", "env.teams=2"]) == 2
    assert "--set overrides a config: give --config as well" in capsys.readouterr().err
