"""`up --resume` refuses, naming the files and how to go on, what it cannot resume from (issue 14)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from five_actors.actors.eval import RATINGS_FILE
from five_actors.actors.params import initial_policy, model_spec, state_arrays
from five_actors.actors.store import POOL_FILE, CheckpointStore
from five_actors.cli import check_resumable
from five_actors.config import load_config, write_run_config
from five_actors.errors import FiveActorsError
from tests.supervisor.cluster import REPO


def run_dir_with(tmp_path: Path, checkpoint: bool) -> Path:
    """A run dir as `up` leaves it: config.json, and (when `checkpoint`) a readable version 4."""
    config = load_config("smoke")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_run_config(config, run_dir)
    if checkpoint:
        spec = model_spec(config)
        CheckpointStore(run_dir / "checkpoints").save(
            4, spec, state_arrays(initial_policy(spec, 0)), None, {"learner_steps": 40}
        )
    return run_dir


def up_resume(run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable,
        "-m",
        "five_actors",
        "up",
        "--resume",
        str(run_dir),
        "--port",
        "0",
        "--duration",
        "1",
        *extra,
    ]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_no_readable_checkpoint_refuses_the_resume_naming_the_files(tmp_path: Path) -> None:
    run_dir = run_dir_with(tmp_path, checkpoint=False)
    (run_dir / "checkpoints").mkdir()
    damaged = run_dir / "checkpoints" / "v000000008.ckpt"
    damaged.write_bytes(b"not a checkpoint")
    done = up_resume(run_dir)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "no readable checkpoint" in done.stderr and str(damaged) in done.stderr and "--allow-fresh" in done.stderr
    assert not (run_dir / "token").exists()  # nothing started
    check_resumable(run_dir, allow_fresh=True)  # said otherwise: the run starts over


@pytest.mark.parametrize("damaged", [f"checkpoints/{POOL_FILE}", str(RATINGS_FILE)])
def test_a_damaged_pool_or_ratings_file_is_named_with_how_to_go_on(tmp_path: Path, damaged: str) -> None:
    run_dir = run_dir_with(tmp_path, checkpoint=True)
    check_resumable(run_dir, allow_fresh=False)
    (run_dir / damaged).parent.mkdir(parents=True, exist_ok=True)
    (run_dir / damaged).write_text("{not json")
    with pytest.raises(FiveActorsError, match=rf"{damaged}.*move .*{damaged} aside to resume with"):
        check_resumable(run_dir, allow_fresh=False)
