"""The supervisor tree as described in a config file's `[tree]` section.

    [tree]
    strategy = "one_for_one"
    max_restarts = 3
    max_seconds = 5.0

    [[tree.children]]
    id = "ponger"
    kind = "actor"
    actor = "five_actors.actors.pingpong:Ponger"

Shape errors (unknown strategy, bad `module:Class`, duplicate ids, ...) are refused while the
file is loaded; `check_importable` then imports every named class before anything starts.
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from five_actors.errors import ConfigError

Strategy = Literal["one_for_one", "one_for_all", "rest_for_one"]
RestartType = Literal["permanent", "transient", "temporary"]
ChildKind = Literal["actor", "supervisor", "process", "host"]

_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_CLASS_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")
_DEVICE = re.compile(r"^(cpu|cuda|cuda:\d+)$")


def _check_children(children: list[ChildSpec]) -> None:
    seen: set[str] = set()
    for i, child in enumerate(children):
        if child.id in seen:
            raise ValueError(f"children[{i}].id: duplicate child id {child.id!r}")
        seen.add(child.id)


@dataclass(frozen=True, kw_only=True)
class Restarts:
    """How a supervisor restarts its children: the root `[tree]` and every nested tree child (supervisor, host,
    process with children) have these keys."""

    strategy: Strategy = "one_for_one"
    """How a child's exit affects its siblings: one_for_one, one_for_all or rest_for_one."""
    max_restarts: int = 3
    """More than this many restarts within max_seconds and the supervisor gives up."""
    max_seconds: float = 5.0
    """The window of the restart intensity, in seconds."""
    backoff: float = 0.1
    """Seconds before the first restart; doubles per restart within the window."""
    backoff_max: float = 5.0
    """The longest wait before a restart, in seconds."""

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {self.max_restarts}")
        if self.max_seconds <= 0:
            raise ValueError(f"max_seconds must be > 0, got {self.max_seconds}")
        if self.backoff < 0 or self.backoff_max < self.backoff:
            raise ValueError(
                f"backoff must be >= 0 and <= backoff_max, got backoff={self.backoff}, backoff_max={self.backoff_max}"
            )


@dataclass(frozen=True)
class ChildSpec(Restarts):
    """One child of a supervisor: what runs, where, and how it is restarted (a nested tree: how it restarts its
    own children, `Restarts`)."""

    id: str
    """Name, unique among its siblings; the last part of the child's actor path."""
    kind: ChildKind = "actor"
    """actor (in this process), supervisor (nested), process (its own OS process) or host (a joined host)."""
    actor: str = ""
    """The actor class as `module:Class` (actor, and process without children)."""
    args: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for the actor class; a string starting with `/root/` names actors by tree path
    (a glob names a list), `"{index}"` and `"{count}"` are a counted copy's number and the count."""
    count: int | str = 1
    """How many copies (`ID-0`..`ID-N-1`): a number, or the name of a `[tree.counts]` key."""
    restart: RestartType = "permanent"
    """permanent (always restarted), transient (only after an abnormal exit) or temporary (never)."""
    shutdown_timeout: float = 5.0
    """Seconds to wait for a graceful stop before the child is killed."""
    device: str = "cpu"
    """process children: `cpu` or `cuda:N` (CUDA_VISIBLE_DEVICES is set before torch is imported)."""
    nice: int = 0
    """process children: how much lower than its parent's the OS scheduling priority is (0-19). On a
    host with fewer cores than busy processes, rollouts at a higher niceness than learners fill
    the CPU the learners leave idle instead of taking half of it."""
    start_timeout: float = 30.0
    """process children: seconds the new OS process may take to report that it is running."""
    children: list[ChildSpec] = field(default_factory=list)
    """Nested tree: its children (supervisor and host kinds, or a process hosting a subtree)."""

    def __post_init__(self) -> None:
        if not _ID.match(self.id):
            raise ValueError(f"id: {self.id!r} is not a valid child id (letters, digits, _ . -)")
        if self.actor and not _CLASS_PATH.match(self.actor):
            raise ValueError(f"actor: {self.actor!r} is not of the form module:Class")
        if self.kind == "actor" and not self.actor:
            raise ValueError("actor: required for a child of kind 'actor'")
        if self.kind in ("supervisor", "host") and self.actor:
            raise ValueError(f"actor: a child of kind {self.kind!r} runs its children, not an actor class")
        if self.kind == "actor" and self.children:
            raise ValueError("children: a child of kind 'actor' has no children")
        if self.kind == "process" and bool(self.actor) == bool(self.children):
            raise ValueError(
                "actor: a process child hosts either an actor (actor = ...) or a subtree (children), exactly one"
            )
        if self.shutdown_timeout <= 0:
            raise ValueError(f"shutdown_timeout: must be > 0, got {self.shutdown_timeout}")
        if self.start_timeout <= 0:
            raise ValueError(f"start_timeout: must be > 0, got {self.start_timeout}")
        if not _DEVICE.match(self.device):
            raise ValueError(f"device: {self.device!r} is not cpu, cuda or cuda:N")
        if not 0 <= self.nice <= 19:
            raise ValueError(f"nice: must be in 0..19 (a priority below its parent's), got {self.nice}")
        if self.nice and self.kind != "process":
            raise ValueError(f"nice: only a process child runs at its own priority, not a child of kind {self.kind!r}")
        super().__post_init__()
        _check_children(self.children)

    @property
    def is_tree(self) -> bool:
        """Whether this child runs a supervisor of its own children rather than one actor."""
        return self.kind in ("supervisor", "host") or (self.kind == "process" and not self.actor)


@dataclass(frozen=True)
class TreeConfig(Restarts):
    """The root supervisor: its strategy, restart intensity, backoff (`Restarts`) and children."""

    children: list[ChildSpec] = field(default_factory=list)
    """The root's children, started in this order and stopped in reverse."""
    counts: dict[str, int] = field(default_factory=dict)
    """Named numbers that children's `count` refers to (`up --learners N` sets `learners`)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_children(self.children)


SupervisorSpec = TreeConfig | ChildSpec
"""Anything that describes a supervisor: the root `[tree]` or a nested tree child."""


def import_class(class_path: str, where: str = "actor") -> type:
    """Import `module:Class`; a ConfigError naming `where` if that fails or it is not an Actor."""
    from five_actors.runtime.actor import Actor

    module_name, _, class_name = class_path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is a config problem to report
        raise ConfigError(
            f"{where}: cannot import {module_name!r} for {class_path!r}: {type(exc).__name__}: {exc}"
        ) from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ConfigError(f"{where}: module {module_name!r} has no class {class_name!r}")
    if not (isinstance(cls, type) and issubclass(cls, Actor)):
        raise ConfigError(f"{where}: {class_path!r} is not an Actor subclass")
    return cls


def check_importable(spec: SupervisorSpec, where: str = "tree") -> None:
    """Import every actor class in the tree and check its `args` against the class's constructor, so that a typo
    stops `up` before anything starts."""
    for i, child in enumerate(spec.children):
        key = f"{where}.children[{i}]"
        if child.actor:
            cls = import_class(child.actor, f"{key}.actor")
            takes = inspect.signature(cls).parameters
            if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in takes.values()):
                for name in child.args:
                    if name not in takes:
                        accepted = ", ".join(takes) or "none"
                        raise ConfigError(
                            f"{key}.args.{name}: {child.actor} takes no argument {name!r} (it takes: {accepted})"
                        )
        check_importable(child, key)
