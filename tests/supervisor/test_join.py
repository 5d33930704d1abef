"""Two `five-actors` processes on this machine: a head, and a host that joins it and runs a subtree."""

from __future__ import annotations

from pathlib import Path

from tests.supervisor.cluster import Proc, actor, get, log_events, wait_until

HEAD_CONFIG = """
[tree]
backoff = 0.1
[[tree.children]]
id = "ponger"
actor = "five_actors.actors.pingpong:Ponger"
[[tree.children]]
id = "worker-host"
kind = "host"
start_timeout = 120.0
[[tree.children.children]]
id = "pinger"
actor = "five_actors.actors.pingpong:Pinger"
args = { peer = "head/root/ponger" }
"""


def test_a_joined_host_runs_the_subtree_the_head_assigns(tmp_path: Path) -> None:
    config = tmp_path / "cluster.toml"
    config.write_text(HEAD_CONFIG)
    run_dir = tmp_path / "head-run"
    head = Proc(["up", "--config", str(config), "--run-dir", str(run_dir), "--port", "0"], tmp_path, "head")
    host = None
    try:
        port = head.wait_for_output(r"serving http://127\.0\.0\.1:(\d+)").group(1)
        url = f"http://127.0.0.1:{port}"
        status, body = wait_until(lambda: get(f"{url}/health"), what="/health answers")
        assert status == 503 and any("worker-host" in p for p in body["problems"])  # no host has joined yet

        join_args = [
            "join",
            f"ws://127.0.0.1:{port}",
            "--token-file",
            str(run_dir / "token"),
            "--name",
            "worker-host",
            "--run-dir",
            str(tmp_path / "host-run"),
            "--host",
            "127.0.0.2",
        ]
        host = Proc(join_args, tmp_path, "host")
        wait_until(lambda: get(f"{url}/health")[0] == 200, what="/health 200 once the host joined")
        view = wait_until(
            lambda: (
                (v := get(f"{url}/actors")[1])
                and actor(v, "/root/worker-host/pinger")["status"]["progress"]["pings"] > 0
                and v
            ),
            what="the joined host's pinger pinging the head",
        )
        assert actor(view, "/root/worker-host")["node"] == "worker-host"
        assert actor(view, "/root/worker-host/pinger")["pid"] != actor(view, "/root/ponger")["pid"]
        assert {n["node"] for n in view["nodes"]} == {"head", "worker-host"}
        assert [e["host"] for e in log_events(run_dir, "host_joined")] == ["worker-host"]
        # The host listens on --host and advertises it: the head's link knows it at 127.0.0.2.
        head_links = next(n["links"] for n in view["nodes"] if n["node"] == "head")
        assert [link["url"].rsplit(":", 1)[0] for link in head_links if link["peer"] == "worker-host"] == [
            "ws://127.0.0.2"
        ]

        # The host dies: the head sees its link go, and restarts the child once a host joins again.
        host.kill()
        wait_until(lambda: get(f"{url}/health")[0] == 503, what="/health 503 without the host")
        host = Proc(join_args, tmp_path, "host2")
        row = wait_until(
            lambda: (a := actor(get(f"{url}/actors")[1], "/root/worker-host"))["state"] == "running" and a,
            what="the host child back",
        )
        assert row["restarts"] == 1 and row["last_error"] == "link_lost"
        wait_until(lambda: get(f"{url}/health")[0] == 200, what="/health 200 again")

        assert head.terminate() == 0, head.err
        assert host.terminate() == 0, host.err
    finally:
        head.kill()
        if host is not None:
            host.kill()


def test_sigterm_while_waiting_for_a_host_stops_cleanly(tmp_path: Path) -> None:
    config = tmp_path / "cluster.toml"
    config.write_text(HEAD_CONFIG)
    run_dir = tmp_path / "head-run"
    head = Proc(["up", "--config", str(config), "--run-dir", str(run_dir), "--port", "0"], tmp_path, "head")
    try:
        head.wait_for_output(r"serving http://")
        wait_until(lambda: log_events(run_dir, "child_started"), what="the ponger started")
        assert head.terminate() == 0, head.err
    finally:
        head.kill()
    assert [(e["child"], e["reason"]) for e in log_events(run_dir, "child_exited")] == [
        ("worker-host", "shutdown"),
        ("ponger", "shutdown"),
    ]
