"""`five-actors eval CKPT --vs REF`: a checkpoint against the random bot, the scripted bot or another checkpoint."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from five_actors.actors.params import initial_policy, model_spec
from five_actors.actors.store import CheckpointStore
from five_actors.cli import main
from five_actors.config import load_config, write_run_config
from five_actors.game.replay import load_replay
from five_actors.model.checkpoint import save_checkpoint
from five_actors.surgery.ops import apply, parse_ops
from five_actors.surgery.state import ModelState
from tests.actors.support import TINY_GAME


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory as `up` leaves it: config.json and two checkpoints written like the ParamServer's."""
    run_dir = tmp_path_factory.mktemp("run")
    config = load_config("smoke", TINY_GAME)
    write_run_config(config, run_dir)
    store = CheckpointStore(run_dir / "checkpoints")
    for version in (2, 7):
        save_checkpoint(store.path(version), initial_policy(model_spec(config), version), None, {"version": version})
    return run_dir


def test_a_run_directory_is_evaluated_against_random_from_its_newest_checkpoint(run_dir: Path, tmp_path: Path) -> None:
    replay = tmp_path / "game0.replay"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "five_actors",
            "eval",
            str(run_dir),
            "--vs",
            "random",
            "--games",
            "4",
            "--replay",
            str(replay),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = orjson.loads(done.stdout)
    assert report["checkpoint"].endswith("v000000007.ckpt") and report["version"] == 7
    assert report["games"] == 4 and report["wins"] + report["draws"] + report["losses"] == 4
    assert 0.0 <= report["ci_low"] <= report["win_rate"] <= report["ci_high"] <= 1.0
    assert 0 < report["mean_game_steps"] <= 40  # the run's config.json: 40-step games, 2 heroes a side
    assert report["reference_trueskill"]["score"] == 0.0 and "anchor" not in report
    assert "checkpoint vs random: 4/4 games done" in done.stderr
    assert load_replay(replay).meta["heroes_per_side"] == 2


def test_against_scripted_or_a_checkpoint_the_reference_is_anchored_on_random(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = str(run_dir / "checkpoints" / "v000000002.ckpt")
    for vs in ("scripted", str(run_dir)):
        assert main(["eval", ckpt, "--vs", vs, "--games", "2", "--seed", "3"]) == 0
        report = orjson.loads(capsys.readouterr().out)
        assert report["version"] == 2 and report["games"] == 2 and report["anchor"]["games"] == 2
        # The reference was rated against the pinned random bot first, so its score is not the default 0 by
        # construction.
        assert report["reference_trueskill"]["sigma"] < 25 / 3 and "random play is 0" in report["scale"]


def test_a_corrupt_or_missing_checkpoint_and_an_unknown_reference_are_refused(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corrupt = tmp_path / "v000000002.ckpt"
    data = bytearray((run_dir / "checkpoints" / "v000000002.ckpt").read_bytes())
    data[200] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    (tmp_path / "empty").mkdir()
    cases = [
        ([str(corrupt), "--vs", "random"], "checksum does not match"),
        ([str(tmp_path / "nothing.ckpt"), "--vs", "random"], "no such checkpoint file or run directory"),
        ([str(tmp_path / "empty"), "--vs", "random"], "no checkpoints (v*.ckpt)"),
        ([str(run_dir), "--vs", "grandmaster"], "--vs 'grandmaster': expected 'random', 'scripted'"),
        ([str(run_dir), "--vs", "random", "--config", "default"], "does not fit the game of config default"),
    ]
    for args, message in cases:
        assert main(["eval", *args, "--games", "1"]) == 2, args
        captured = capsys.readouterr()
        assert captured.out == "" and message in captured.err, (args, captured.err)


def test_a_checkpoint_grown_by_game_size_plays_its_own_game_not_the_run_configs(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A curriculum run's config.json keeps the game it started on; its checkpoints after the growth are played on the
    game their layout reads."""
    grown_dir = tmp_path / "grown"
    config = load_config("smoke", TINY_GAME)
    write_run_config(config, grown_dir)
    small = ModelState.of(initial_policy(model_spec(config), 3))
    grown = apply(parse_ops("game-size 3 2".split()), small)
    path = CheckpointStore(grown_dir / "checkpoints").path(9)
    save_checkpoint(path, grown.build_policy(), None, {"version": 9})
    replay = tmp_path / "grown.replay"
    assert main(["eval", str(grown_dir), "--vs", "scripted", "--games", "2", "--replay", str(replay)]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["version"] == 9 and report["games"] == 2
    meta = load_replay(replay).meta
    assert (meta["heroes_per_side"], len(meta["lanes"])) == (3, 2)  # lanes: each lane's waypoints
