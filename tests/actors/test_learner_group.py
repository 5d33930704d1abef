"""Two learners in one gloo group inside a real `five-actors up`: both train; a live surgery switches
both ranks to the new architecture in place (no restart, every chunk accounted for); a kill -9 of one
restarts both (one_for_all) from the ParamServer's latest parameters, and the game's ledger still accounts for
every chunk, the ones the dead ranks held counted lost."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.actors.test_system import START, _metric, _version, start
from tests.supervisor.cluster import actor, log_events, wait_until
from tests.surgery.test_live import metric, post, settled_chunk_counts

pytestmark = pytest.mark.timeout(400)

LEARNER_0 = "/root/learners/learner-0"
LEARNER_1 = "/root/learners/learner-1"


def test_two_learners_train_switch_architecture_together_and_a_killed_rank_restarts_the_group(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run = start(
        [
            "--config",
            "smoke",
            "--learners",
            "2",
            "--run-dir",
            str(run_dir),
            "--set",
            "training.pool_max_versions=2",
            "--set",
            "training.surgery_lr_hold_steps=3",
        ],
        tmp_path,
        "up",
        run_dir,
    )
    try:
        wait_until(lambda: _version(run.url) >= 3, timeout=START, what="three versions from the two-learner group")
        view = run.view()
        steps = [_metric(view, path, "steps") for path in (LEARNER_0, LEARNER_1)]
        assert all(s and s > 0 for s in steps), steps

        # A live surgery: both ranks take the new architecture in the same round, without a restart.
        token = (run_dir / "token").read_text().strip()
        status, report = post(f"{run.url}/surgery", {"ops": ["widen-lstm", "48"], "probe_steps": 32}, token)
        assert status == 200, report
        new_arch, swapped_at = report["changes"]["architecture"]["to"], report["version_to"]
        wait_until(
            lambda: all(metric(run.url, path, "arch", "progress") == new_arch for path in (LEARNER_0, LEARNER_1)),
            timeout=120,
            what="both ranks on the new architecture",
        )
        wait_until(lambda: _version(run.url) >= swapped_at + 6, timeout=120, what="versions advancing after the swap")
        view = run.view()
        assert all(actor(view, path)["restarts"] == 0 for path in (LEARNER_0, LEARNER_1))
        adopted = log_events(run_dir, "learner_arch_adopted")
        assert len(adopted) == 2 and not log_events(run_dir, "learner_group_stopped")
        # The learning rate is held at 0 for the first steps on the new weights (Adam's moments settle), then resumes.
        for switch in adopted:
            rates = [
                e["learning_rate"]
                for e in log_events(run_dir, "train_step")
                if e["rank"] == switch["rank"] and e["ts"] > switch["ts"]
            ]
            assert rates[:3] == [0.0, 0.0, 0.0] and rates[3] > 0, rates
        # Every chunk the game made is trained, refused, dropped, evicted or waiting on one of the ranks (or lost,
        # counted by the game), at a moment when none is in flight.
        counts = settled_chunk_counts(run.url, (LEARNER_0, LEARNER_1))
        assert counts["made"] == counts["accounted"] > 0, counts

        view = run.view()
        before = {path: actor(view, path) for path in (LEARNER_0, LEARNER_1)}
        version = _version(run.url)
        os.kill(before[LEARNER_1]["pid"], signal.SIGKILL)

        def group_restarted() -> bool:
            now = run.view()
            return all(
                (a := actor(now, path))["restarts"] > before[path]["restarts"]
                and a["state"] == "running"
                and a["pid"] != before[path]["pid"]
                for path in (LEARNER_0, LEARNER_1)
            )

        wait_until(group_restarted, timeout=START, what="both ranks restarted (one_for_all)")

        def restarted() -> list[dict]:
            return [e for e in log_events(run_dir, "learner_started") if e["rank"] == 0][1:]

        start_version = wait_until(restarted, timeout=START, what="the new group started")[0]["version"]
        # The new group started from the ParamServer's latest version: nothing before the kill was lost.
        assert start_version >= version
        wait_until(lambda: _version(run.url) > start_version, timeout=START, what="the new group publishing versions")
        # The game's ledger kept every chunk's fate across the restart: what the killed rank (and the rank its
        # supervisor stopped with it) held unused is lost, everything else is trained, refused, dropped, evicted,
        # or waiting in the new ranks by their own count.
        after = settled_chunk_counts(run.url, (LEARNER_0, LEARNER_1))
        assert after["made"] == after["accounted"], after
        assert after["lost"] > counts["lost"] and after["chunks_trained"] > counts["chunks_trained"], (counts, after)
    finally:
        run.proc.kill()
