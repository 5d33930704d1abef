"""A tree sized by numbers: `count` copies, tree paths in actor arguments, `up --learners N --game-actors M`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from five_actors.config import config_from_tree, load_config
from five_actors.errors import ConfigError
from five_actors.supervisor.config import ChildSpec, TreeConfig
from five_actors.supervisor.sizing import size_tree
from tests.supervisor.cluster import Proc, actor, get, wait_until
from tests.supervisor.test_up import Head


def sized(name: str, *overrides: str) -> TreeConfig:
    return size_tree(load_config(name, overrides).tree, "head", "/root")


def child(tree: TreeConfig | ChildSpec, path: str) -> ChildSpec:
    node: TreeConfig | ChildSpec = tree
    for part in path.strip("/").split("/"):
        node = next(c for c in node.children if c.id == part)
    assert isinstance(node, ChildSpec)
    return node


def test_counts_make_numbered_copies_and_paths_become_addresses() -> None:
    tree = sized("default", "tree.counts.learners=3", "tree.counts.game_actors=4")
    learners = child(tree, "learners").children
    assert [c.id for c in learners] == ["learner-0", "learner-1", "learner-2"]
    assert [(c.args["rank"], c.args["world_size"], c.args["params"]) for c in learners] == [
        (i, 3, "head/root/params") for i in range(3)
    ]
    games = child(tree, "rollouts").children
    assert [c.id for c in games] == ["game-0", "game-1", "game-2", "game-3"]
    assert games[3].args == {
        "inference": "head.root.inference/root/inference",
        "learners": [f"head.root.learners.learner-{i}/root/learners/learner-{i}" for i in range(3)],
        "params": "head/root/params",
    }
    assert child(tree, "eval").args == {"params": "head/root/params"}


def test_bundled_configs_size_to_the_explicit_trees_they_replace() -> None:
    smoke = sized("smoke")
    assert [c.id for c in child(smoke, "learners").children] == ["learner-0"]
    assert child(smoke, "rollouts/game-0").args["learners"] == ["head.root.learners.learner-0/root/learners/learner-0"]
    cluster = sized("cluster", "tree.counts.learners=2")
    worker_game = child(cluster, "remote/worker/game-1")  # a head path named from inside a joined host
    assert worker_game.args["learners"] == [
        f"head.root.learners.learner-{i}/root/learners/learner-{i}" for i in range(2)
    ]
    assert worker_game.args["inference"] == "head.root.inference/root/inference"


def test_the_explicit_form_passes_unchanged() -> None:
    for name in ("pingpong", "smoke"):
        explicit = sized(name)
        assert size_tree(explicit, "head", "/root") == explicit


def tree_of(children: list[dict]) -> TreeConfig:
    return config_from_tree({"tree": {"counts": {"n": 2}, "children": children}}, (), "test").tree


GAME = "five_actors.actors.game:GameActor"


@pytest.mark.parametrize(
    ("children", "message"),
    [
        ([{"id": "g", "actor": GAME, "count": "m"}], "tree.children[0].count: 'm' is not a key of [tree.counts] (n)"),
        ([{"id": "g", "actor": GAME, "count": 0}], "tree.children[0].count: must be at least 1, got 0"),
        (
            [{"id": "g", "actor": GAME, "args": {"params": "/root/nowhere"}}],
            "tree.children[0].args.params: '/root/nowhere' names no child in the tree",
        ),
        (
            [
                {"id": "h", "kind": "host", "children": [{"id": "g", "actor": GAME}]},
                {"id": "e", "actor": GAME, "args": {"peers": ["/root/h/*"]}},
            ],
            "tree.children[1].args.peers[0]: /root/h/g runs on a joined host",
        ),
    ],
)
def test_bad_counts_and_paths_are_refused_naming_the_key(children: list[dict], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        size_tree(tree_of(children), "head", "/root")
    assert message in str(refused.value)


def test_up_resizes_the_smoke_tree_from_the_command_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = [
        "up",
        "--config",
        "smoke",
        "--learners",
        "2",
        "--game-actors",
        "2",
        "--games-per-actor",
        "2",
        "--run-dir",
        str(run_dir),
        "--port",
        "0",
    ]
    proc = Proc(args, tmp_path, "up")
    try:
        head = Head(proc, run_dir)
        paths = {
            "/root/learners/learner-0",
            "/root/learners/learner-1",
            "/root/rollouts/game-0",
            "/root/rollouts/game-1",
        }

        def running() -> set[str]:
            return {a["path"] for a in head.view()["actors"] if a["state"] == "running"}

        wait_until(lambda: paths <= running(), timeout=180, what="two learners and two game actors")
        view = head.view()
        assert {
            a["path"] for a in view["actors"] if a["path"].startswith(("/root/learners/", "/root/rollouts/"))
        } == paths
        trained = wait_until(
            lambda: all(
                (actor(head.view(), f"/root/learners/learner-{i}")["status"].get("metrics") or {}).get("steps", 0) > 0
                for i in range(2)
            ),
            timeout=240,
            what="both ranks of the group stepping",
        )
        assert trained
        config = json.loads((run_dir / "config.json").read_text())
        assert config["training"]["games_per_actor"] == 2
        assert [c["args"]["world_size"] for c in config["tree"]["children"][1]["children"]] == [2, 2]
        wait_until(lambda: get(f"{head.url}/health")[0] == 200, timeout=120, what="the whole tree up (/health 200)")
    finally:
        proc.kill()
