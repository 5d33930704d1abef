"""Training goes on through faults that used to stop it silently (issue 14), on a real `five-actors up --config smoke`.

The ParamServer checkpoints rarely here (every 1000 versions), so a restarted one restores a version far
more than `max_staleness` behind the learner: every chunk made from it would be dropped as stale. The
head's watchdog calls STALL_S seconds without progress a stall.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.supervisor.cluster import Proc, actor, get, log_events, wait_until
from tests.surgery.test_live import LEARNER, START, metric

pytestmark = pytest.mark.timeout(600)

PARAMS = "/root/params"

STALL_S = 20


class Run:
    def __init__(self, proc: Proc, url: str, run_dir: Path) -> None:
        self.proc, self.url, self.run_dir = proc, url, run_dir
        self.token = (run_dir / "token").read_text().strip()

    def version(self) -> int:
        return int(metric(self.url, PARAMS, "version") or 0)

    def trained(self) -> int:
        return int(metric(self.url, LEARNER, "chunks_trained") or 0)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    where = tmp_path_factory.mktemp("never-stops")
    run_dir = where / "run"
    settings = {"checkpoint_every": 1000, "pool_add_every": 1000, "stall_s": STALL_S}
    sets = [word for key, value in settings.items() for word in ("--set", f"training.{key}={value}")]
    proc = Proc(["up", "--port", "0", "--config", "smoke", "--run-dir", str(run_dir), *sets], where, "up")
    try:
        port = proc.wait_for_output(r"serving http://127\.0\.0\.1:(\d+)", timeout=START).group(1)
        running = Run(proc, f"http://127.0.0.1:{port}", run_dir)
        wait_until(lambda: running.version() >= 2, timeout=START, what="training under way")
        yield running
    finally:
        proc.kill()


def kill(run: Run, path: str) -> None:
    status, body = get(f"{run.url}/control/kill", token=run.token, body={"path": path})
    assert status == 200, body


def test_param_server_restarts_do_not_freeze_training(run: Run) -> None:
    # Far enough ahead of the only checkpoint (version 0) that a chunk of it is too stale to train on.
    wait_until(lambda: run.version() > 12, timeout=240, what="the learner 12 versions past the checkpoint")
    for _ in range(4):
        before = len(log_events(run.run_dir, "checkpoint_restored"))
        kill(run, PARAMS)
        wait_until(
            lambda b=before: len(log_events(run.run_dir, "checkpoint_restored")) > b,
            timeout=60,
            what="the ParamServer restored",
        )
        time.sleep(1.0)
    restored = log_events(run.run_dir, "checkpoint_restored")[-1]["version"]
    learner_version = int(metric(run.url, LEARNER, "version", "progress") or 0)
    assert learner_version - restored > 8, "the restart must leave the server further behind than max_staleness"
    trained = run.trained()
    wait_until(lambda: run.version() >= learner_version + 3, timeout=180, what="versions advancing past the learner's")
    wait_until(lambda: run.trained() > trained + 8, timeout=120, what="chunks trained again")
    assert log_events(run.run_dir, "params_behind_learner")


def stalled_health(run: Run) -> dict[str, object] | None:
    """/health's body while it is 503 and names a training stall."""
    status, body = get(f"{run.url}/health")
    return body if status == 503 and any("training stalled" in p for p in body["problems"]) else None


def test_a_stopped_learner_is_reported_and_restarted(run: Run) -> None:
    pid = actor(get(f"{run.url}/actors")[1], LEARNER)["pid"]
    stalls_before = len(log_events(run.run_dir, "training_stalled"))
    os.kill(pid, signal.SIGSTOP)
    try:
        body = wait_until(lambda: stalled_health(run), timeout=STALL_S + 60, what="/health naming the stall")
        assert any("no new version" in p or f"{LEARNER} trained no chunk" in p for p in body["problems"]), body
        wait_until(
            lambda: actor(get(f"{run.url}/actors")[1], LEARNER).get("pid") not in (None, pid),
            timeout=120,
            what="the learner restarted by the watchdog",
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)  # only matters when the watchdog did not kill it
    stalls = log_events(run.run_dir, "training_stalled")[stalls_before:]
    assert stalls and any(LEARNER in s["restart"] for s in stalls), stalls
    version = run.version()
    wait_until(lambda: run.version() >= version + 3, timeout=180, what="versions advancing after the restart")
    wait_until(lambda: get(f"{run.url}/health")[0] == 200, timeout=120, what="/health ok again")
