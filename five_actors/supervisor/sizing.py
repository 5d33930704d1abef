"""A tree sized by numbers: `count` copies of a child, and actor arguments that name actors by tree path.

    [tree.counts]
    learners = 2                                  # five-actors up --learners 4 sets it

    [[tree.children.children]]
    id = "learner"
    count = "learners"                            # learner-0, learner-1 (or count = 2)
    args = { rank = "{index}", world_size = "{count}" }

    [[tree.children.children]]
    id = "game"
    count = 2
    args = { inference = "/root/inference", learners = "/root/learners/*" }

`size_tree` turns this into the explicit tree the supervisors run: each counted child becomes
copies `ID-0 .. ID-N-1` whose arguments `"{index}"` and `"{count}"` read as numbers, and every
argument string that starts with the root path becomes the address the supervisor gives that
actor (`head.root.inference/root/inference`); a glob (`*`, `?`, `[`) becomes the list of every
match, in tree order. An explicit tree (no counts, addresses spelled out) passes unchanged.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Any

from five_actors.errors import ConfigError
from five_actors.supervisor.config import ChildSpec, TreeConfig
from five_actors.supervisor.processes import child_node_id

INDEX, COUNT = "{index}", "{count}"
"""Argument values that a counted child's copies read as their number and the number of copies."""


def size_tree(tree: TreeConfig, head_node: str, root_path: str) -> TreeConfig:
    """The explicit tree: counted children copied, tree paths in actor arguments resolved (ConfigError naming the
    key)."""
    children = _expand(tree.children, tree.counts, "tree")
    addresses: dict[str, str | None] = {}
    _collect(children, root_path, head_node, addresses)
    return dataclasses.replace(tree, children=_resolve(children, addresses, root_path, "tree"))


def count_names(children: list[ChildSpec]) -> set[str]:
    """The `[tree.counts]` keys that some child's `count` names."""
    names = {c.count for c in children if isinstance(c.count, str)}
    return names.union(*(count_names(c.children) for c in children))


def _expand(children: list[ChildSpec], counts: dict[str, int], where: str) -> list[ChildSpec]:
    out: list[ChildSpec] = []
    for i, child in enumerate(children):
        key = f"{where}.children[{i}]"
        nested = _expand(child.children, counts, key)
        if isinstance(child.count, str):
            if child.count not in counts:
                raise ConfigError(
                    f"{key}.count: {child.count!r} is not a key of [tree.counts] "
                    f"({', '.join(sorted(counts)) or 'none'})"
                )
            n = counts[child.count]
        else:
            n = child.count
        if n < 1:
            raise ConfigError(f"{key}.count: must be at least 1, got {n}")
        if child.count == 1:  # not counted: the child keeps its id
            args = {name: _number(value, 0, 1) for name, value in child.args.items()}
            out.append(dataclasses.replace(child, args=args, children=nested))
            continue
        for index in range(n):
            args = {name: _number(value, index, n) for name, value in child.args.items()}
            out.append(dataclasses.replace(child, id=f"{child.id}-{index}", count=1, args=args, children=nested))
    return out


def _number(value: Any, index: int, count: int) -> Any:
    return index if value == INDEX else count if value == COUNT else value


def _collect(children: list[ChildSpec], parent_path: str, node: str | None, out: dict[str, str | None]) -> None:
    """Path -> address of every child; None inside a host child (its node is the joining host's name)."""
    for child in children:
        path = f"{parent_path}/{child.id}"
        if child.kind == "host":
            here = None
        elif child.kind == "process":
            here = child_node_id(node, path) if node is not None else None
        else:
            here = node
        out[path] = f"{here}{path}" if here is not None else None
        _collect(child.children, path, here, out)


def _resolve(children: list[ChildSpec], addresses: dict[str, str | None], root: str, where: str) -> list[ChildSpec]:
    out = []
    for i, child in enumerate(children):
        key = f"{where}.children[{i}]"
        args = {
            name: _resolve_value(value, addresses, root, f"{key}.args.{name}") for name, value in child.args.items()
        }
        out.append(dataclasses.replace(child, args=args, children=_resolve(child.children, addresses, root, key)))
    return out


def _resolve_value(value: Any, addresses: dict[str, str | None], root: str, where: str) -> Any:
    if isinstance(value, list):
        items: list[Any] = []
        for i, item in enumerate(value):
            resolved = _resolve_value(item, addresses, root, f"{where}[{i}]")
            items.extend(resolved if isinstance(resolved, list) and not isinstance(item, list) else [resolved])
        return items
    if not isinstance(value, str) or not (value == root or value.startswith(root + "/")):
        return value
    matches = [path for path in addresses if fnmatch.fnmatchcase(path, value)]
    if not matches:
        raise ConfigError(f"{where}: {value!r} names no child in the tree")
    unknown = [path for path in matches if addresses[path] is None]
    if unknown:
        raise ConfigError(
            f"{where}: {unknown[0]} runs on a joined host, whose node is known only once it joins: spell out its "
            "address"
        )
    found = [addresses[path] for path in matches]
    return found if any(c in value for c in "*?[") else found[0]
