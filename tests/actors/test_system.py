"""The whole training system as a user runs it: `five-actors up --config smoke` in a real subprocess.

One run is shared by the assertions (starting the processes is the slow part): versions advance,
chunks flow, /health and /metrics answer, eval rates the policy; kill -9 of the inference
process, a game process and a learner is survived; SIGTERM stops cleanly; `logs replay` shows
it all; `up --resume` continues the version counter and the ratings.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from five_actors.bench.running import tree_cpu_seconds
from tests.supervisor.cluster import REMOTE, REPO, Proc, actor, get, log_events, wait_until

pytestmark = pytest.mark.timeout(400)

START = 240.0
"""Seconds for the tree's processes to start on a busy 2-core machine (torch imports, numba caches)."""


def _metric(view: dict[str, Any], path: str, name: str) -> Any:
    """The metric `name` of the actor at `path`; None while that actor is not in the view."""
    entry = next((a for a in view["actors"] if a["path"] == path), None)
    return None if entry is None else (entry.get("status") or {}).get("metrics", {}).get(name)


def _version(url: str) -> int:
    return int(_metric(get(f"{url}/actors")[1], "/root/params", "version") or 0)


class Run:
    """A running `up` and its HTTP address."""

    def __init__(self, proc: Proc, url: str, run_dir: Path) -> None:
        self.proc, self.url, self.run_dir = proc, url, run_dir

    def view(self) -> dict[str, Any]:
        return get(f"{self.url}/actors")[1]

    def kill_and_recover(self, path: str) -> None:
        """kill -9 the process of the actor at `path`; wait until it is back and versions advance again."""
        before = self.view()
        pid, restarts = actor(before, path)["pid"], actor(before, path)["restarts"]
        assert pid and pid != self.proc.proc.pid
        os.kill(pid, signal.SIGKILL)
        wait_until(
            lambda: (
                (a := actor(self.view(), path))["restarts"] > restarts and a["state"] == "running" and a["pid"] != pid
            ),
            timeout=START,
            what=f"{path} restarted",
        )
        version = _version(self.url)
        wait_until(
            lambda: _version(self.url) > version, timeout=START, what=f"versions advancing after {path} was killed"
        )
        wait_until(lambda: get(f"{self.url}/health")[0] == 200, timeout=60, what="/health 200 again")


def start(args: list[str], where: Path, name: str, run_dir: Path) -> Run:
    proc = Proc(["up", "--port", "0", *args], where, name)
    port = proc.wait_for_output(r"serving http://127\.0\.0\.1:(\d+)", timeout=60).group(1)
    return Run(proc, f"http://127.0.0.1:{port}", run_dir)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    where = tmp_path_factory.mktemp("system")
    run_dir = where / "run"
    running = start(["--config", "smoke", "--run-dir", str(run_dir)], where, "up", run_dir)
    try:
        yield running
    finally:
        running.proc.kill()


def test_training_runs_versions_advance_and_chunks_flow(run: Run) -> None:
    wait_until(lambda: _version(run.url) >= 3, timeout=START, what="three parameter versions")
    view = run.view()
    assert _metric(view, "/root/rollouts/game-0", "game_chunks_sent") > 0
    assert _metric(view, "/root/learners/learner-0", "steps") > 0
    assert (run.run_dir / "config.json").is_file() and list((run.run_dir / "checkpoints").iterdir())
    wait_until(lambda: get(f"{run.url}/health")[0] == 200, timeout=START, what="/health 200 with every process up")
    line = run.proc.wait_for_output(
        r"v \d+ \| env steps/s [\d,]+ \| samples/s [\d,]+ \| staleness [\d.]+ \| reuse [\d.]+"
    ).group(0)
    assert line


def test_eval_rates_the_policy_and_metrics_show_the_training_facts(run: Run) -> None:
    view = wait_until(
        lambda: (v := run.view()) and (_metric(v, "/root/eval", "eval_rounds") or 0) >= 1 and v,
        timeout=START,
        what="an eval round",
    )
    last = actor(view, "/root/eval")["status"]["last"]
    assert set(last["results"]) >= {"random", "scripted"} and isinstance(last["trueskill"], float)
    assert list((run.run_dir / "replays").glob("eval-*-vs-scripted.replay"))
    metrics = get(f"{run.url}/metrics")[1]
    for name in (
        "five_actors_version",
        "five_actors_eval_trueskill",
        "five_actors_eval_win_rate_scripted",
        "five_actors_game_env_steps",
        "five_actors_sample_reuse",
        "five_actors_inference_latency_p99_ms",
    ):
        assert f"\n{name}{{" in metrics, name
    run.proc.wait_for_output(r"vs scripted [\d.]+ \[[\d.]+, [\d.]+\] \| TrueSkill -?[\d.]+", timeout=60)


def test_the_trees_cpu_is_told_apart_by_the_actor_each_process_hosts(run: Run) -> None:
    """What `bench system` reports as `cpu_cores`: the head as "up", each process child by its actor's path, and
    nothing of a process outside the tree, even one whose command line names a path of it."""
    wait_until(lambda: _version(run.url) >= 1, timeout=START, what="training started")
    learner = actor(run.view(), "/root/learners/learner-0")
    first = tree_cpu_seconds(run.proc.proc.pid)
    stranger = subprocess.Popen([sys.executable, "-c", "while True: pass", "--path", "/root/learners/learner-0"])
    try:
        wait_until(lambda: _metric(run.view(), learner["path"], "steps") > learner["status"]["metrics"]["steps"] + 2)
        wait_until(lambda: _cpu_seconds(stranger.pid) > 0.5, what="the stranger spinning")
        assert stranger.poll() is None
        later, own = tree_cpu_seconds(run.proc.proc.pid), _cpu_seconds(learner["pid"])
    finally:
        stranger.kill()
        stranger.wait()
    hosted = {a["path"] for a in run.view()["actors"] if a.get("pid") and a["pid"] != run.proc.proc.pid}
    assert set(later) == hosted | {"up"}
    assert hosted >= {"/root/learners/learner-0", "/root/inference", "/root/rollouts/game-0", "/root/eval"}
    assert later[learner["path"]] > first[learner["path"]]  # it trained meanwhile
    assert abs(later[learner["path"]] - own) < 0.2  # its own process only: the stranger spun a core meanwhile
    assert all(later[k] >= first.get(k, 0.0) for k in later)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("path", ["/root/inference", "/root/rollouts/game-0", "/root/learners/learner-0"])
def test_kill_9_of_each_process_kind_is_survived(run: Run, path: str) -> None:
    wait_until(lambda: _version(run.url) >= 1, timeout=START, what="training started")
    run.kill_and_recover(path)


def test_sigterm_stops_cleanly_logs_replay_and_resume_continues(run: Run, tmp_path: Path) -> None:
    wait_until(lambda: _version(run.url) >= 1, timeout=START, what="training started")
    wait_until(lambda: log_events(run.run_dir, "eval_result"), timeout=START, what="an eval round to replay")
    assert run.proc.terminate(timeout=120) == 0, run.proc.err
    assert "stopped cleanly" in run.proc.out
    assert "terminate called" not in run.proc.err  # no child aborted at exit (the learner's torch thread is joined)
    assert not log_events(run.run_dir, "child_exit_unclean")
    final = max(e["version"] for e in log_events(run.run_dir, "checkpoint_saved"))
    rounds = max(e["round"] for e in log_events(run.run_dir, "eval_result"))
    assert log_events(run.run_dir, "training_progress")

    def logs(command: str, *options: str) -> subprocess.CompletedProcess[str]:
        """`five-actors logs COMMAND RUN_DIR OPTIONS...` in a subprocess."""
        argv = [sys.executable, "-m", "five_actors", "logs", command, str(run.run_dir), *options]
        env = dict(os.environ, PYTHONPATH=str(REPO))
        return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)

    replay = logs("replay", "--event", "eval_result")
    assert replay.returncode == 0 and "eval_result" in replay.stdout and "opponent=scripted" in replay.stdout
    history = logs("eval", "--json")
    rows = [json.loads(line) for line in history.stdout.splitlines()]
    assert history.returncode == 0 and [r["round"] for r in rows] == list(range(1, rounds + 1)), history.stderr
    assert all(0.0 <= r["win_rate_scripted"] <= 1.0 and isinstance(r["trueskill"], float) for r in rows)
    assert rows[-1]["env_steps"] > 0 and rows[-1]["version"] >= rows[0]["version"]
    played = logs("rollouts", "--json", "--window", "0.5")
    windows = [json.loads(line) for line in played.stdout.splitlines()]
    chunks = log_events(run.run_dir, "rollout_chunk")
    assert played.returncode == 0 and windows, played.stderr
    assert sum(w["agent_steps"] for w in windows) == sum(c["chunks"] * c["steps"] for c in chunks)
    assert {"reward", "reward_hero_death", "reward_xp", "reward_tower", "reward_win"} <= set(windows[0])
    assert windows[-1]["version"] == max(c["version"] for c in chunks)
    plot = tmp_path / "curves.png"
    drawn = logs("eval", "--plot", str(plot))
    assert drawn.returncode == 0, drawn.stderr
    assert plot.read_bytes().startswith(b"\x89PNG") and len(plot.read_bytes()) > 10_000
    page = plot.with_suffix(".html").read_text()
    assert "data:image/png;base64," in page and f"{rows[-1]['version']:>8}" in page, (
        "the page shows the picture and the rounds"
    )

    again = start(["--resume", str(run.run_dir)], tmp_path, "resume", run.run_dir)
    try:
        wait_until(lambda: _version(again.url) > final, timeout=START, what="versions beyond the last checkpoint")
        restored = log_events(run.run_dir, "checkpoint_restored")
        assert restored and restored[-1]["version"] == final
        wait_until(
            lambda: max(e["round"] for e in log_events(run.run_dir, "eval_result")) > rounds,
            timeout=START,
            what="eval rounds continuing",
        )
        assert again.proc.terminate(timeout=120) == 0, again.proc.err
    finally:
        again.proc.kill()


def test_a_joined_host_plays_games_and_its_loss_is_reported_while_training_goes_on(tmp_path: Path) -> None:
    config = tmp_path / "cluster.toml"
    config.write_text((REPO / "five_actors" / "conf" / "smoke.toml").read_text() + REMOTE)
    run_dir = tmp_path / "run"
    head = start(["--config", str(config), "--run-dir", str(run_dir)], tmp_path, "head", run_dir)
    join = ["join", head.url.replace("http://", "ws://"), "--token-file", str(run_dir / "token"), "--name", "worker"]
    host = None
    try:
        wait_until(lambda: (run_dir / "token").is_file(), what="the token file")
        host = Proc([*join, "--run-dir", str(tmp_path / "host-1")], tmp_path, "host-1")
        game = "/root/remote/worker/game-1"
        wait_until(
            lambda: (_metric(head.view(), game, "game_chunks_sent") or 0) > 0,
            timeout=START,
            what="the worker's game actor shipping chunks",
        )
        wait_until(lambda: get(f"{head.url}/health")[0] == 200, timeout=START, what="/health 200 with the worker")
        assert actor(head.view(), game)["node"] == "worker"

        host.proc.kill()  # the host disappears
        host.proc.wait()
        status, body = wait_until(
            lambda: (r := get(f"{head.url}/health"))[0] == 503 and r, timeout=60, what="the lost host in /health"
        )
        assert any("/root/remote/worker" in p for p in body["problems"]), body
        version = _version(head.url)
        wait_until(lambda: _version(head.url) > version + 1, timeout=START, what="training going on without the host")

        host = Proc([*join, "--run-dir", str(tmp_path / "host-2")], tmp_path, "host-2")  # it comes back
        wait_until(
            lambda: get(f"{head.url}/health")[0] == 200, timeout=START, what="/health 200 after the host rejoined"
        )
        assert actor(head.view(), "/root/remote/worker")["restarts"] >= 1
        assert head.proc.terminate(timeout=120) == 0, head.proc.err
    finally:
        head.proc.kill()
        if host is not None:
            host.kill()
