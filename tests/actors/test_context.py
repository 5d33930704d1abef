"""The run config reaches every actor of the tree: in the head, in process children, in their subtrees."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from five_actors.config import (
    Config,
    bundled_configs,
    config_to_dict,
    from_mapping,
    load_config,
    read_run_config,
    write_run_config,
)
from five_actors.errors import ConfigError
from five_actors.runtime.config import NodeConfig
from five_actors.runtime.node import Node
from five_actors.supervisor.agent import AGENT_PATH, NodeAgent
from five_actors.supervisor.child import TreeContext
from five_actors.supervisor.config import TreeConfig
from five_actors.supervisor.main import resolve_run_config
from five_actors.supervisor.tree import Supervisor
from tests.supervisor.cluster import REPO

REPORTER = "tests.actors.support:ContextReporter"


@pytest.mark.parametrize("name", bundled_configs())
def test_every_bundled_config_survives_the_round_trip_through_config_json(name: str, tmp_path: Path) -> None:
    config = resolve_run_config(load_config(name))
    write_run_config(config, tmp_path)
    assert read_run_config(tmp_path) == config


def test_up_picks_a_rendezvous_port_unless_one_is_set() -> None:
    assert resolve_run_config(Config()).training.rendezvous_port > 0
    fixed = load_config("pingpong", ["training.rendezvous_port=29555"])
    assert resolve_run_config(fixed).training.rendezvous_port == 29555


def test_bad_training_values_are_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"training: minibatch_chunks \(64\) must not exceed buffer_chunks \(32\)"):
        load_config("pingpong", ["training.buffer_chunks=32", "training.minibatch_chunks=64"])
    with pytest.raises(ConfigError, match=r"max_outstanding_chunks \(16\) must be 0 \(no backpressure\) or at least"):
        load_config("pingpong", ["training.minibatch_chunks=32", "training.max_outstanding_chunks=16"])
    with pytest.raises(ConfigError, match="training.games_per_actr: unknown key"):
        load_config("pingpong", ["training.games_per_actr=3"])


def test_a_broken_config_json_is_reported(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(ConfigError, match="config.json: invalid JSON"):
        read_run_config(tmp_path)


@pytest.fixture
async def head(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Node]:
    monkeypatch.chdir(REPO)  # children import the test actors from the repository root
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    node = Node("head", "secret-token", NodeConfig(port=0))
    node.system.spawn(NodeAgent(node), AGENT_PATH)
    await node.start()
    try:
        yield node
    finally:
        await node.stop()


async def test_actors_in_the_head_and_in_process_children_see_the_run_config(head: Node, tmp_path: Path) -> None:
    base = load_config("pingpong", ["training.games_per_actor=7"])
    config = resolve_run_config(dataclasses.replace(base, name="ctx-test"))
    write_run_config(config, tmp_path)
    tree = {
        "children": [
            {"id": "local", "actor": REPORTER},
            {"id": "proc", "kind": "process", "actor": REPORTER},
            {"id": "group", "kind": "process", "children": [{"id": "inner", "actor": REPORTER}]},
        ]
    }
    context = TreeContext(head.system, tmp_path, head, config=config)
    root = head.system.spawn(Supervisor(from_mapping(TreeConfig, tree, "tree"), context), "/root")
    assert await head.system.wait_started(root) is None
    agent = head.system.actor(AGENT_PATH)
    assert isinstance(agent, NodeAgent)
    actors: dict[str, Any] = {a["path"]: a for a in (await agent.view())["actors"]}
    expected = {
        "name": "ctx-test",
        "games_per_actor": 7,
        "rendezvous_port": config.training.rendezvous_port,
        "run_dir": str(tmp_path),
    }
    for path in ("/root/local", "/root/proc", "/root/group/inner"):
        status = actors[path]["status"]
        assert {k: status[k] for k in expected} == expected, path
    assert actors["/root/proc"]["status"]["pid"] != os.getpid()
    assert await head.system.stop(root, 30.0) == "shutdown"


def test_config_to_dict_is_plain_json() -> None:
    data = config_to_dict(Config())
    assert data["training"]["rollout_chunk_steps"] == 16 and isinstance(data["tree"]["children"], list)
