"""The `[tree]` section: good trees load, bad ones are refused with the key named."""

from __future__ import annotations

from pathlib import Path

import pytest

from five_actors.config import load_config
from five_actors.errors import ConfigError
from five_actors.supervisor.config import ChildSpec, check_importable


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tree.toml"
    path.write_text(text)
    return path


def test_the_bundled_pingpong_tree_loads_and_imports() -> None:
    config = load_config("pingpong")
    assert [(c.id, c.kind) for c in config.tree.children] == [("ponger", "actor"), ("pinger", "process")]
    check_importable(config.tree)


def test_nested_children_load_as_specs(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            """
[[tree.children]]
id = "learners"
kind = "supervisor"
strategy = "one_for_all"
[[tree.children.children]]
id = "learner-0"
kind = "process"
actor = "five_actors.actors.pingpong:Ponger"
device = "cuda:1"
""",
        )
    )
    (learners,) = config.tree.children
    assert learners.strategy == "one_for_all" and learners.is_tree
    assert learners.children == [
        ChildSpec(id="learner-0", kind="process", actor="five_actors.actors.pingpong:Ponger", device="cuda:1")
    ]


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[tree]\nstrategy = "one_for_some"', "tree.strategy: 'one_for_some' is not one of"),
        ("[tree]\nmax_restarts = -1", "tree: max_restarts must be >= 0"),
        (
            '[[tree.children]]\nid = "a"\nactor = "no_colon_here"',
            r"tree.children\[0\]: actor: 'no_colon_here' is not of the form module:Class",
        ),
        (
            '[[tree.children]]\nid = "a"\nactor = "m:A"\n[[tree.children]]\nid = "a"\nactor = "m:B"',
            r"children\[1\].id: duplicate child id 'a'",
        ),
        (
            '[[tree.children]]\nid = "a"\nactor = "m:A"\nrestart = "sometimes"',
            r"tree.children\[0\].restart: 'sometimes' is not one of",
        ),
        (
            '[[tree.children]]\nid = "a"\nactor = "m:A"\nkind = "thread"',
            r"tree.children\[0\].kind: 'thread' is not one of",
        ),
        ('[[tree.children]]\nid = "a"\nkind = "actor"', r"tree.children\[0\]: actor: required"),
        (
            '[[tree.children]]\nid = "a"\nkind = "process"\nactor = "m:A"\ndevice = "gpu0"',
            r"tree.children\[0\]: device: 'gpu0' is not cpu",
        ),
        (
            '[[tree.children]]\nid = "a"\nactor = "m:A"\nshutdown_timeout = 0',
            r"tree.children\[0\]: shutdown_timeout: must be > 0",
        ),
        ('[[tree.children]]\nid = "a"\nactor = "m:A"\ncolour = "red"', r"tree.children\[0\].colour: unknown key"),
        (
            '[[tree.children]]\nid = "s"\nkind = "supervisor"\n'
            '[[tree.children.children]]\nid = "bad id!"\nactor = "m:A"',
            r"tree.children\[0\].children\[0\]: id: 'bad id!' is not a valid child id",
        ),
    ],
)
def test_bad_trees_are_refused_naming_the_key(tmp_path: Path, toml: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, toml))


@pytest.mark.parametrize(
    ("actor", "message"),
    [
        ("no_such_module_anywhere:Thing", r"tree.children\[1\].actor: cannot import 'no_such_module_anywhere'"),
        (
            "five_actors.actors.pingpong:Nope",
            r"tree.children\[1\].actor: module 'five_actors.actors.pingpong' has no class 'Nope'",
        ),
        (
            "five_actors.actors.pingpong:Ping",
            r"tree.children\[1\].actor: 'five_actors.actors.pingpong:Ping' is not an Actor subclass",
        ),
    ],
)
def test_unimportable_actor_classes_are_refused_before_start(tmp_path: Path, actor: str, message: str) -> None:
    text = (
        '[[tree.children]]\nid = "ok"\nactor = "five_actors.actors.pingpong:Ponger"\n'
        f'[[tree.children]]\nid = "x"\nactor = "{actor}"\n'
    )
    config = load_config(write(tmp_path, text))
    with pytest.raises(ConfigError, match=message):
        check_importable(config.tree)


def test_an_argument_the_actor_does_not_take_is_refused_before_start(tmp_path: Path) -> None:
    """A learner given the old `param_server` name: refused naming the key and what the class takes, where it used
    to crash every start of the child with a TypeError."""
    text = (
        '[[tree.children]]\nid = "learner"\nactor = "five_actors.actors.learner:LearnerActor"\n'
        'args = { rank = 0, param_server = "/root/params" }\n'
    )
    config = load_config(write(tmp_path, text))
    with pytest.raises(
        ConfigError,
        match=r"tree.children\[0\].args.param_server: .* takes no argument 'param_server' "
        r"\(it takes: rank, world_size, params, ",
    ):
        check_importable(config.tree)
    for name in ("default", "smoke", "cluster", "cartpole"):
        check_importable(load_config(name).tree)  # the bundled trees pass
