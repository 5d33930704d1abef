"""Two learners in one gloo group inside a real `five-actors up`: both train, and a kill -9 of one
restarts both (one_for_all) from the ParamServer's latest parameters."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.actors.test_system import START, _metric, _version, start
from tests.supervisor.cluster import REPO, actor, wait_until

pytestmark = pytest.mark.timeout(400)

LEARNER_0 = "/root/learners/learner-0"
LEARNER_1 = "/root/learners/learner-1"


def two_learner_config(where: Path) -> Path:
    """The smoke config with a second learner rank in the group, fed by the game actor too."""
    text = (REPO / "conf" / "smoke.toml").read_text()
    one = 'args = { rank = 0, world_size = 1, param_server = "head/root/params" }'
    feeds = 'learners = ["head.root.learners.learner-0/root/learners/learner-0"]'
    assert one in text and feeds in text, "conf/smoke.toml changed: update this test's edit"
    second = '''
[[tree.children.children]]
id = "learner-1"
kind = "process"
actor = "five_actors.actors.learner:LearnerActor"
args = { rank = 1, world_size = 2, param_server = "head/root/params" }
start_timeout = 60.0
shutdown_timeout = 10.0
'''
    text = text.replace(one, one.replace("world_size = 1", "world_size = 2"))
    text = text.replace("\n[[tree.children]]\nid = \"inference\"", second + "\n[[tree.children]]\nid = \"inference\"", 1)
    text = text.replace(feeds, feeds.replace('"]', '", "head.root.learners.learner-1/root/learners/learner-1"]'))
    path = where / "two-learners.toml"
    path.write_text(text.replace('name = "smoke"', 'name = "two-learners"'))
    return path


def test_two_learners_train_in_lockstep_and_a_killed_rank_restarts_the_group(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run = start(["--config", str(two_learner_config(tmp_path)), "--run-dir", str(run_dir)], tmp_path, "up", run_dir)
    try:
        wait_until(lambda: _version(run.url) >= 3, timeout=START, what="three versions from the two-learner group")
        view = run.view()
        steps = [_metric(view, path, "steps") for path in (LEARNER_0, LEARNER_1)]
        assert all(s and s > 0 for s in steps), steps

        before = {path: actor(view, path) for path in (LEARNER_0, LEARNER_1)}
        version = _version(run.url)
        os.kill(before[LEARNER_1]["pid"], signal.SIGKILL)

        def group_restarted() -> bool:
            now = run.view()
            return all(
                (a := actor(now, path))["restarts"] > before[path]["restarts"] and a["state"] == "running" and a["pid"] != before[path]["pid"]
                for path in (LEARNER_0, LEARNER_1)
            )

        wait_until(group_restarted, timeout=START, what="both ranks restarted (one_for_all)")
        wait_until(lambda: _version(run.url) > version, timeout=START, what="versions advancing after the group restart")
        # The new group started from the ParamServer's latest version: nothing before the kill was lost.
        restarted = run.view()
        assert _metric(restarted, LEARNER_0, "version") >= version
    finally:
        run.proc.kill()
