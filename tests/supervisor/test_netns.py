"""Two hosts for real: the head in this network namespace, a worker in a namespace of its own.

The two are joined only by a veth pair, each end with its own address: the worker shares no
loopback with the head, so every address a process advertises must be one the other host can
reach. The link is made slow and lossy (a token-bucket qdisc), cut and restored with `ip link set down/up`
under a running tree, and the
learners of one gloo group run on both hosts (each rank finds the interface to use by its route to
the rendezvous host: no GLOO_SOCKET_IFNAME is set). Needs root and iproute2 (CI has both); skipped,
saying why, where a namespace cannot be made.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from five_actors.actors.group import route_interface
from tests.supervisor.cluster import REMOTE, REPO, Proc, actor, get, log_events, wait_until
from tests.surgery.test_live import metric

pytestmark = pytest.mark.timeout(600)

START = 240.0
"""Seconds for a tree's processes to start on a busy 2-core machine (torch imports, numba caches)."""

SMOKE = (REPO / "five_actors" / "conf" / "smoke.toml").read_text()
SETTINGS = SMOKE[: SMOKE.index("[[tree.children]]")]
"""conf/smoke.toml without its tree: the tiny game and model, fast publishing."""


@dataclasses.dataclass
class Hosts:
    """The worker's namespace and the veth pair between it and the head."""

    namespace: str
    head_if: str
    worker_if: str
    head_ip: str
    worker_ip: str

    def worker(self, args: list[str], where: Path, name: str) -> Proc:
        """`python -m five_actors ARGS` inside the worker's namespace."""
        return Proc(args, where, name, prefix=["ip", "netns", "exec", self.namespace])

    def link(self, state: str) -> None:
        """Cut ("down") or restore ("up") the head's end of the pair."""
        _ip("link", "set", self.head_if, state)

    def shape(self, *qdisc: str) -> None:
        """Put the queueing discipline `qdisc` (tc words) on both ends of the pair; none: take it off again."""
        for side in ([], ["-n", self.namespace]):
            device = self.worker_if if side else self.head_if
            if qdisc:
                _run("tc", *side, "qdisc", "replace", "dev", device, "root", *qdisc)
            else:
                subprocess.run(["tc", *side, "qdisc", "del", "dev", device, "root"], capture_output=True, timeout=30)

    def dropped(self) -> int:
        """Packets the queueing disciplines on both ends have dropped."""
        total = 0
        for side in ([], ["-n", self.namespace]):
            device = self.worker_if if side else self.head_if
            shown = _run("tc", "-s", *side, "qdisc", "show", "dev", device)
            total += sum(int(n) for n in re.findall(r"dropped (\d+)", shown))
        return total


def _ip(*args: str) -> None:
    _run("ip", *args)


def _run(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise OSError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done.stdout


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    if shutil.which("ip") is None:
        pytest.skip("network namespaces need iproute2 (`ip`), which is not installed")
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    tag = os.getpid() % 10_000
    net = 200 + os.getpid() % 50
    made = Hosts(f"fa-worker-{tag}", f"fah{tag}", f"faw{tag}", f"10.{net}.77.1", f"10.{net}.77.2")
    try:
        _ip("netns", "add", made.namespace)
    except OSError as exc:
        pytest.skip(f"cannot make a network namespace here: {exc}")
    try:
        _ip("link", "add", made.head_if, "type", "veth", "peer", "name", made.worker_if, "netns", made.namespace)
        _ip("addr", "add", f"{made.head_ip}/30", "dev", made.head_if)
        _ip("link", "set", made.head_if, "up")
        _ip("-n", made.namespace, "addr", "add", f"{made.worker_ip}/30", "dev", made.worker_if)
        _ip("-n", made.namespace, "link", "set", made.worker_if, "up")
        _ip("-n", made.namespace, "link", "set", "lo", "up")
        yield made
    finally:
        subprocess.run(["ip", "link", "del", made.head_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", made.namespace], capture_output=True)


def test_each_rank_finds_the_interface_its_route_to_the_rendezvous_leaves_by(hosts: Hosts) -> None:
    """What gloo binds to when GLOO_SOCKET_IFNAME is unset: on the worker the veth end, on the head the other end;
    loopback for a rendezvous on this machine."""
    probe = (
        "import sys; from five_actors.actors.group import route_interface; print(route_interface(sys.argv[1], 29500))"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    worker = ["ip", "netns", "exec", hosts.namespace, sys.executable, "-c", probe, hosts.head_ip]
    found = subprocess.run(worker, capture_output=True, text=True, timeout=60, env=env)
    assert found.stdout.strip() == hosts.worker_if, found.stderr
    assert route_interface(hosts.head_ip, 29500) == hosts.head_if
    assert route_interface("127.0.0.1", 29500) == "lo"


def _version(url: str) -> int:
    return int(metric(url, "/root/params", "version") or 0)


def _up(config_text: str, hosts: Hosts, where: Path, *extra: str) -> tuple[Proc, str, Path]:
    """`up` on the head's end of the pair; returns the process, its URL and its run dir."""
    config, run_dir = where / "two-hosts.toml", where / "head-run"
    config.write_text(config_text)
    args = ["up", "--config", str(config), "--run-dir", str(run_dir), "--host", hosts.head_ip, "--port", "0"]
    head = Proc([*args, *extra], where, "head")
    port = head.wait_for_output(rf"serving http://{re.escape(hosts.head_ip)}:(\d+)", timeout=START).group(1)
    return head, f"http://{hosts.head_ip}:{port}", run_dir


def _join(hosts: Hosts, url: str, run_dir: Path, where: Path) -> Proc:
    args = ["join", url.replace("http://", "ws://"), "--token-file", str(run_dir / "token"), "--name", "worker"]
    args += ["--host", hosts.worker_ip, "--run-dir", str(where / "worker-run")]
    return hosts.worker(args, where, "worker")


def test_a_worker_cut_off_is_reported_and_taken_back_while_the_head_trains_on(hosts: Hosts, tmp_path: Path) -> None:
    head, url, run_dir = _up(SMOKE + REMOTE, hosts, tmp_path, "--set", "node.heartbeat_s=10")
    worker = None
    game = "/root/remote/worker/game-1"
    try:
        wait_until(lambda: (run_dir / "token").is_file(), what="the token file")
        worker = _join(hosts, url, run_dir, tmp_path)
        wait_until(lambda: (metric(url, game, "game_chunks_sent") or 0) > 0, START, "the worker's games shipping")
        wait_until(lambda: get(f"{url}/health")[0] == 200, START, "/health 200 with the worker")
        view = get(f"{url}/actors")[1]
        assert actor(view, game)["node"] == "worker"
        head_links = next(n["links"] for n in view["nodes"] if n["node"] == "head")
        assert {link["url"].split("//")[1].rsplit(":", 1)[0] for link in head_links if link["peer"] == "worker"} == {
            hosts.worker_ip
        }, "the head reaches the worker at the worker's own address"

        # A slow, lossy link. This kernel has no netem qdisc (nor CI's), so a token bucket stands in: both ends at
        # 1 Mbit/s with 50 ms of queue, so packets wait (delay) and past the queue are dropped (loss). TCP carries
        # the links through it: the worker keeps shipping, the head keeps training, no host is lost.
        hosts.shape("tbf", "rate", "1mbit", "burst", "8kb", "latency", "50ms")
        try:
            sent, version = metric(url, game, "game_chunks_sent") or 0, _version(url)
            wait_until(lambda: (metric(url, game, "game_chunks_sent") or 0) > sent, START, "shipping, slowly")
            wait_until(lambda: _version(url) > version + 2, START, "the head training with the slow link")
            assert hosts.dropped() > 0, "the token bucket dropped no packet: the link was not lossy"
            assert not log_events(run_dir, "host_lost") and get(f"{url}/health")[0] == 200
        finally:
            hosts.shape()

        # A cut link drops packets; nothing closes a socket. The links' heartbeats (node.heartbeat_s) find it.
        hosts.link("down")
        wait_until(lambda: log_events(run_dir, "host_lost"), 90, "the head's heartbeat finding the worker gone")
        status, body = wait_until(
            lambda: (r := get(f"{url}/health"))[0] == 503 and r, 60, "the cut-off worker reported in /health"
        )
        assert any("/root/remote/worker" in problem for problem in body["problems"]), body
        version = _version(url)
        wait_until(lambda: _version(url) > version + 2, START, "the head training on without the worker")
        assert worker.proc.poll() is None, "the worker keeps running while it cannot reach the head"

        hosts.link("up")
        wait_until(lambda: get(f"{url}/health")[0] == 200, START, "/health 200 once the link is back")
        row = actor(get(f"{url}/actors")[1], "/root/remote/worker")
        assert row["restarts"] >= 1 and row["node"] == "worker"
        sent = metric(url, game, "game_chunks_sent") or 0
        wait_until(lambda: (metric(url, game, "game_chunks_sent") or 0) > sent, START, "the worker shipping again")
        assert worker.proc.poll() is None, "the same worker process came back"
        assert head.terminate(timeout=120) == 0, head.err
    finally:
        hosts.link("up")
        head.kill()
        if worker is not None:
            worker.kill()


LEARNERS_ON_BOTH = """
[[tree.children]]
id = "params"
kind = "actor"
actor = "five_actors.actors.param_server:ParamServerActor"

[[tree.children]]
id = "learners"
kind = "supervisor"
strategy = "one_for_all"

[[tree.children.children]]
id = "learner-0"
kind = "process"
actor = "five_actors.actors.learner:LearnerActor"
args = { rank = 0, world_size = 2, params = "/root/params" }
start_timeout = 120.0

[[tree.children.children]]
id = "worker"
kind = "host"
start_timeout = 600.0

[[tree.children.children.children]]
id = "learner-1"
kind = "actor"
actor = "five_actors.actors.learner:LearnerActor"
args = { rank = 1, world_size = 2, params = "head/root/params" }

[[tree.children]]
id = "inference"
kind = "process"
actor = "five_actors.actors.inference:InferenceActor"
args = { params = "/root/params" }
start_timeout = 120.0

[[tree.children]]
id = "game-0"
kind = "process"
actor = "five_actors.actors.game:GameActor"
args.inference = "/root/inference"
args.learners = ["head.root.learners.learner-0/root/learners/learner-0", "worker/root/learners/worker/learner-1"]
args.params = "/root/params"
start_timeout = 120.0
"""


def test_learners_on_both_hosts_train_as_one_gloo_group(hosts: Hosts, tmp_path: Path) -> None:
    # Rank 0 waits in the rendezvous while the worker joins and starts rank 1: allow it a while.
    rendezvous = [f"training.rendezvous_host={hosts.head_ip}", "training.allreduce_timeout_s=120"]
    head, url, run_dir = _up(SETTINGS + LEARNERS_ON_BOTH, hosts, tmp_path, *(f"--set={o}" for o in rendezvous))
    worker = None
    ranks = ["/root/learners/learner-0", "/root/learners/worker/learner-1"]
    try:
        wait_until(lambda: (run_dir / "token").is_file(), what="the token file")
        worker = _join(hosts, url, run_dir, tmp_path)
        wait_until(lambda: _version(url) >= 3, START, "versions published by the two-host group")
        steps = [metric(url, rank, "steps") or 0 for rank in ranks]
        wait_until(
            lambda: all((metric(url, r, "steps") or 0) > s for r, s in zip(ranks, steps, strict=True)),
            START,
            "both ranks stepping",
        )
        assert abs((metric(url, ranks[0], "steps") or 0) - (metric(url, ranks[1], "steps") or 0)) <= 2, (
            "one allreduced step per round on both ranks"
        )
        started = log_events(run_dir, "learner_started") + log_events(tmp_path / "worker-run", "learner_started")
        assert sorted(e["rank"] for e in started if e["world_size"] == 2) == [0, 1]
        assert actor(get(f"{url}/actors")[1], ranks[1])["node"] == "worker"
        assert head.terminate(timeout=120) == 0, head.err
    finally:
        head.kill()
        if worker is not None:
            worker.kill()
