"""OS-process children of an in-process head node: pinned devices, subtrees in a child node, stop."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from five_actors.config import from_mapping
from five_actors.runtime.config import NodeConfig
from five_actors.runtime.node import Node
from five_actors.supervisor.agent import AGENT_PATH, NodeAgent
from five_actors.supervisor.child import TreeContext
from five_actors.supervisor.config import TreeConfig
from five_actors.supervisor.processes import DEVICE_ENV, child_env, current_device
from five_actors.supervisor.tree import Supervisor
from tests.supervisor.cluster import REPO

REPORTER = "tests.supervisor.actors:EnvReporter"


def test_devices_pin_cuda_visible_devices() -> None:
    assert child_env("cuda:3", "t")["CUDA_VISIBLE_DEVICES"] == "3"
    assert child_env("cuda:3", "t")["FIVE_ACTORS_DEVICE"] == "cuda:0"
    assert child_env("cpu", "t")["CUDA_VISIBLE_DEVICES"] == ""
    assert child_env("cpu", "t")["FIVE_ACTORS_TOKEN"] == "t"


def test_a_process_childs_device_pin_wins_over_the_models_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    assert current_device("cuda") == "cuda" and current_device() == "cpu"  # not a supervisor's child
    monkeypatch.setenv(DEVICE_ENV, child_env("cpu", "t")[DEVICE_ENV])
    assert current_device("cuda") == "cpu"  # model.device = "cuda" in a child pinned to the CPU


@pytest.fixture
async def head(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Node]:
    monkeypatch.chdir(REPO)  # children import the test actors from the repository root
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    node = Node("head", "secret-token", NodeConfig(port=0))
    agent = NodeAgent(node)
    await node.start()
    node.system.spawn(agent, AGENT_PATH)
    try:
        yield node
    finally:
        await node.stop()


async def test_a_process_child_runs_a_pinned_subtree_in_its_own_node(head: Node) -> None:
    tree = {
        "children": [
            {"id": "local", "actor": REPORTER},
            {
                "id": "gpu",
                "kind": "process",
                "device": "cuda:3",
                "nice": 7,
                "strategy": "one_for_all",
                "children": [{"id": "a", "actor": REPORTER}, {"id": "b", "actor": REPORTER}],
            },
        ]
    }
    spec = from_mapping(TreeConfig, tree, "tree")
    root = head.system.spawn(Supervisor(spec, TreeContext(head.system, None, head)), "/root")
    assert await head.system.wait_started(root) is None
    agent = head.system.actor(AGENT_PATH)
    assert isinstance(agent, NodeAgent)
    view = await agent.view()
    actors: dict[str, Any] = {a["path"]: a for a in view["actors"]}
    assert set(actors) == {"/root", "/root/local", "/root/gpu", "/root/gpu/a", "/root/gpu/b"}
    child_pid = actors["/root/gpu"]["pid"]
    assert child_pid != os.getpid() and actors["/root/gpu"]["node"] == "head.root.gpu"
    assert actors["/root/gpu"]["kind"] == "process" and actors["/root/gpu"]["device"] == "cuda:3"
    for path in ("/root/gpu/a", "/root/gpu/b"):
        status = actors[path]["status"]
        assert (status["pid"], status["CUDA_VISIBLE_DEVICES"], status["FIVE_ACTORS_DEVICE"]) == (
            child_pid,
            "3",
            "cuda:0",
        )
    assert actors["/root/local"]["status"]["CUDA_VISIBLE_DEVICES"] != "3"
    # The process child runs 7 steps below its parent, in its own scheduling group where Linux has them.
    own_nice = os.getpriority(os.PRIO_PROCESS, 0)
    assert actors["/root/gpu/a"]["status"]["nice"] == min(own_nice + 7, 19)
    assert actors["/root/local"]["status"]["nice"] == own_nice
    if actors["/root/gpu/a"]["status"]["autogroup"] is not None:
        assert actors["/root/gpu/a"]["status"]["autogroup"].endswith("nice 7")

    assert await head.system.stop(root, 30.0) == "shutdown"
    with pytest.raises(ProcessLookupError):
        os.kill(child_pid, 0)


STARTER = """
import subprocess, sys, time
from five_actors.supervisor.processes import stop_with_parent
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], preexec_fn=stop_with_parent)
print(child.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_process_started_with_stop_with_parent_ends_when_its_parent_is_killed() -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    starter = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert starter.stdout is not None
        child = int(starter.stdout.readline())
        assert _alive(child)
        starter.kill()  # SIGKILL: the parent runs no cleanup of its own
        starter.wait()
        deadline = time.monotonic() + 30
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the child outlived its killed parent"
    finally:
        starter.kill()


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its new parent to reap it has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
