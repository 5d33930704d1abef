"""`five-actors up` as a real process: the pingpong tree over two OS processes, HTTP, kill -9, stop."""

from __future__ import annotations

import ctypes.util
import json
import os
import pty
import re
import signal
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from five_actors.supervisor.gpus import NO_NVML
from tests.supervisor.cluster import REPO, Proc, actor, get, log_events, wait_until


class Head:
    """A running `five-actors up` with its HTTP base URL, run dir and token."""

    def __init__(self, proc: Proc, run_dir: Path, host: str = "127.0.0.1") -> None:
        self.proc = proc
        self.run_dir = run_dir
        port = proc.wait_for_output(rf"serving http://{re.escape(host)}:(\d+)").group(1)
        self.url = f"http://{host}:{port}"
        self.token = (run_dir / "token").read_text().strip()

    def view(self) -> dict:
        status, body = get(f"{self.url}/actors")
        assert status == 200
        return body


@pytest.fixture(scope="module")
def pingpong(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    where = tmp_path_factory.mktemp("pingpong")
    run_dir = where / "run"
    args = [
        "up",
        "--config",
        "conf/pingpong.toml",
        "--run-dir",
        str(run_dir),
        "--port",
        "0",
        "--set",
        "node.heartbeat_s=1.0",
    ]
    proc = Proc(args, where, "up")
    try:
        yield Head(proc, run_dir)
    finally:
        proc.kill()


def test_pingpong_is_healthy_and_spans_two_processes(pingpong: Head) -> None:
    assert f"run dir: {pingpong.run_dir}" in pingpong.proc.out
    assert stat.S_IMODE(os.stat(pingpong.run_dir / "token").st_mode) == 0o600
    status, body = wait_until(lambda: (r := get(f"{pingpong.url}/health"))[0] == 200 and r, what="/health 200")
    assert body["status"] == "ok" and body["gpus"] == [] and body["gpus_reason"]
    view = wait_until(
        lambda: (v := pingpong.view()) and actor(v, "/root/ponger")["in_per_s"] > 0 and v, what="pings flowing"
    )
    pinger, ponger = actor(view, "/root/pinger"), actor(view, "/root/ponger")
    assert pinger["pid"] != ponger["pid"] and pinger["node"] != ponger["node"]
    assert {n["node"] for n in view["nodes"]} == {"head", pinger["node"]}
    assert all(link["state"] == "up" for n in view["nodes"] for link in n["links"])
    assert pinger["status"]["progress"]["pings"] > 0
    status, metrics = get(f"{pingpong.url}/metrics")
    assert status == 200 and 'five_actors_actor_restarts{node="head",path="/root/ponger"} 0.0' in metrics
    wait_until(lambda: "pings/s" in pingpong.proc.out, what="a progress line with pings/s")


def test_control_routes_refuse_a_missing_or_wrong_token(pingpong: Head) -> None:
    for token in (None, "not-the-token"):
        status, body = get(f"{pingpong.url}/control/kill", token=token, body={"path": "/root/ponger"})
        assert status == 401 and body["error"] == "unauthorized"
    assert actor(pingpong.view(), "/root/ponger")["restarts"] == 0  # the request never reached an actor
    refused = wait_until(lambda: log_events(pingpong.run_dir, "http_unauthorized"), what="http_unauthorized lines")
    assert {r["route"] for r in refused} == {"/control/kill"}
    status, body = get(f"{pingpong.url}/control/kill", token=pingpong.token, body={"path": "/nowhere"})
    assert status == 404


def test_kill_9_of_the_process_child_restarts_it(pingpong: Head) -> None:
    before = actor(pingpong.view(), "/root/pinger")
    os.kill(before["pid"], signal.SIGKILL)
    after = wait_until(
        lambda: (a := actor(pingpong.view(), "/root/pinger"))["restarts"] == 1 and a["state"] == "running" and a,
        what="the pinger restarted",
    )
    assert after["pid"] != before["pid"] and after["last_error"] == "killed by SIGKILL"
    restarted = wait_until(lambda: log_events(pingpong.run_dir, "child_restarted"), what="child_restarted in the logs")
    assert [(r["child"], r["restarts"]) for r in restarted] == [("pinger", 1)]
    wait_until(lambda: actor(pingpong.view(), "/root/pinger")["status"]["progress"]["pings"] > 0, what="pings again")
    summary = subprocess.run(
        [sys.executable, "-m", "five_actors", "logs", "summary", str(pingpong.run_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    row = next(line for line in summary.stdout.splitlines() if line.startswith("/root/pinger "))
    assert "killed by SIGKILL" in row


def test_a_hung_process_child_is_killed_when_its_link_is_lost_and_restarted(pingpong: Head) -> None:
    before = wait_until(
        lambda: (a := actor(pingpong.view(), "/root/pinger"))["state"] == "running" and a, what="pinger up"
    )
    os.kill(before["pid"], signal.SIGSTOP)  # alive but silent: only the link's heartbeat can tell
    after = wait_until(
        lambda: (
            (a := actor(pingpong.view(), "/root/pinger"))["restarts"] == before["restarts"] + 1
            and a["state"] == "running"
            and a
        ),
        what="the hung pinger replaced",
    )
    assert after["last_error"] == "link_lost" and after["pid"] != before["pid"]
    with pytest.raises(ProcessLookupError):
        os.kill(before["pid"], 0)


def test_health_command_prints_the_tree(pingpong: Head) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "five_actors", "health", "--url", pingpong.url], cwd=REPO, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    assert "/root/pinger" in shown.stdout and "/root/ponger" in shown.stdout and "health: ok" in shown.stdout
    shown = subprocess.run(
        [sys.executable, "-m", "five_actors", "health", "--url", pingpong.url, "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    body = json.loads(shown.stdout)
    assert body["health"]["status"] == "ok" and {"/root/pinger", "/root/ponger"} <= {a["path"] for a in body["actors"]}


def test_health_says_no_gpu_once(pingpong: Head) -> None:
    if ctypes.util.find_library("nvidia-ml") is not None:
        pytest.skip("this host has NVML: its GPUs are listed per node")
    shown = subprocess.run(
        [sys.executable, "-m", "five_actors", "health", "--url", pingpong.url], cwd=REPO, capture_output=True, text=True
    )
    assert len(pingpong.view()["nodes"]) == 2  # two nodes, one line about GPUs
    assert shown.stdout.count(NO_NVML) == 1 and "NVMLError" not in shown.stdout
    assert get(f"{pingpong.url}/health")[1]["gpus_reason"] == NO_NVML


def test_progress_lines_come_every_10_s_when_stdout_is_a_file(pingpong: Head) -> None:
    lines = wait_until(
        lambda: len(ls := re.findall(r"^ *(\d+)s \|", pingpong.proc.out, re.M)) >= 3 and ls,
        timeout=60,
        what="three progress lines",
    )
    assert "\r" not in pingpong.proc.out and "pings/s" in pingpong.proc.out
    gaps = [int(b) - int(a) for a, b in zip(lines, lines[1:])]
    assert all(9 <= gap <= 12 for gap in gaps), gaps


def test_sigterm_stops_children_in_reverse_and_exits_0(pingpong: Head) -> None:
    pinger_pid = actor(pingpong.view(), "/root/pinger")["pid"]
    assert pingpong.proc.terminate() == 0, pingpong.proc.err
    assert "stopped cleanly" in pingpong.proc.out
    exits = [(e["child"], e["reason"]) for e in log_events(pingpong.run_dir, "child_exited")]
    assert exits[-2:] == [("pinger", "shutdown"), ("ponger", "shutdown")]
    with pytest.raises(ProcessLookupError):
        os.kill(pinger_pid, 0)


def test_root_gives_up_exits_non_zero_naming_the_child(tmp_path: Path) -> None:
    config = tmp_path / "crashy.toml"
    config.write_text(
        """
[tree]
max_restarts = 1
max_seconds = 60.0
backoff = 0.0
[[tree.children]]
id = "steady"
actor = "five_actors.actors.pingpong:Ponger"
[[tree.children]]
id = "crasher"
actor = "tests.supervisor.actors:Crasher"
args = { after = 0.1 }
"""
    )
    proc = Proc(["up", "--config", str(config), "--run-dir", str(tmp_path / "run"), "--port", "0"], tmp_path, "up")
    try:
        assert proc.proc.wait(120) == 1
    finally:
        proc.kill()
    assert "root supervisor exited abnormally: SupervisorError: gave up" in proc.err
    assert "child 'crasher'" in proc.err and "ZeroDivisionError: crasher divided by zero" in proc.err


def test_a_bad_config_is_refused_before_anything_starts(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[[tree.children]]\nid = "x"\nactor = "five_actors.actors.pingpong:NoSuchActor"\n')
    proc = Proc(["up", "--config", str(config), "--run-dir", str(tmp_path / "run"), "--port", "0"], tmp_path, "up")
    assert proc.proc.wait(60) == 2
    assert "tree.children[0].actor" in proc.err and "NoSuchActor" in proc.err
    assert not (tmp_path / "run").exists()


def test_children_exit_when_the_head_is_killed(tmp_path: Path) -> None:
    proc = Proc(
        ["up", "--config", "conf/pingpong.toml", "--run-dir", str(tmp_path / "run"), "--port", "0"], tmp_path, "up"
    )
    try:
        head = Head(proc, tmp_path / "run")
        pinger_pid = wait_until(lambda: actor(head.view(), "/root/pinger")["pid"], what="the pinger's pid")
        proc.proc.kill()
        proc.proc.wait()
    finally:
        proc.kill()

    def gone() -> bool:
        try:
            os.kill(pinger_pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(gone, what="the orphaned pinger process to exit")


def test_process_children_listen_on_the_heads_interface_and_advertise_its_address(tmp_path: Path) -> None:
    # 127.0.0.2 is loopback on Linux but not 127.0.0.1: a child still on 127.0.0.1 would be missed.
    args = [
        "up",
        "--config",
        "conf/pingpong.toml",
        "--run-dir",
        str(tmp_path / "run"),
        "--port",
        "0",
        "--host",
        "127.0.0.2",
    ]
    proc = Proc(args, tmp_path, "up")
    try:
        head = Head(proc, tmp_path / "run", host="127.0.0.2")
        view = wait_until(
            lambda: (v := head.view()) and actor(v, "/root/pinger")["state"] == "running" and v,
            what="the pinger running",
        )
        head_links = next(n["links"] for n in view["nodes"] if n["node"] == "head")
        [url] = [link["url"] for link in head_links if link["peer"] == actor(view, "/root/pinger")["node"]]
        host, port = url.removeprefix("ws://").rsplit(":", 1)
        assert host == "127.0.0.2"  # what the child advertised in its hello
        status, body = get(f"http://127.0.0.2:{port}/health")  # the child's own node answers there
        assert status in (200, 503) and "status" in body
        with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", int(port)), timeout=5):
            pass
    finally:
        proc.kill()


def test_the_live_line_repaints_in_place_on_a_terminal(tmp_path: Path) -> None:
    terminal, child_end = pty.openpty()
    args = [
        "up",
        "--config",
        "conf/pingpong.toml",
        "--run-dir",
        str(tmp_path / "run"),
        "--port",
        "0",
        "--duration",
        "6",
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "five_actors", *args], cwd=REPO, stdout=child_end, stderr=subprocess.DEVNULL, env=env
    )
    os.close(child_end)
    shown = b""
    try:
        while chunk := os.read(terminal, 4096):
            shown += chunk
    except OSError:
        pass  # EIO: the process closed the terminal
    finally:
        os.close(terminal)
        assert proc.wait(60) == 0
    text = shown.decode()
    first, last = text.index("\x1b[K"), text.rindex("\x1b[K")
    assert text.count("\x1b[K") >= 3 and "\n" not in text[first:last]  # every second the same line, repainted
