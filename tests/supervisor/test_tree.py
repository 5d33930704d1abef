"""Each OTP supervision rule, with real actors in one process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from five_actors.config import from_mapping
from five_actors.runtime.actor import ActorRef, ActorSystem
from five_actors.supervisor.child import TreeContext
from five_actors.supervisor.config import TreeConfig
from five_actors.supervisor.tree import Supervisor
from tests.supervisor.actors import EVENTS, Crash, Finish, names

WORKER = "tests.supervisor.actors:Worker"


def worker(name: str, **extra: Any) -> dict[str, Any]:
    return {"id": name, "actor": WORKER, "args": {"name": name}, **extra}


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait until `predicate()` holds (the tests' only notion of time is this upper bound)."""
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


class Tree:
    """A root supervisor under test, in a fresh actor system."""

    def __init__(self, **tree: Any) -> None:
        tree.setdefault("backoff", 0.0)
        self.spec = from_mapping(TreeConfig, tree, "tree")
        self.system = ActorSystem("test")
        self.root: ActorRef | None = None

    async def start(self) -> Tree:
        self.root = self.system.spawn(Supervisor(self.spec, TreeContext(self.system)), "/root")
        assert await self.system.wait_started(self.root) is None
        return self

    def rows(self, sup: str = "/root") -> dict[str, dict[str, Any]]:
        actor = self.system.actor(sup)
        assert isinstance(actor, Supervisor)
        return {row["id"]: row for row in actor.rows()}

    async def tell(self, path: str, msg: Any) -> None:
        await self.system.ref(path).tell(msg)


@pytest.fixture(autouse=True)
def clear_events() -> None:
    EVENTS.clear()


@pytest.fixture
async def logs() -> AsyncIterator[list[dict[str, Any]]]:
    with capture_logs() as captured:
        yield captured


def events(logs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in logs if e["event"] == name]


async def test_children_start_in_order_and_stop_in_reverse() -> None:
    tree = await Tree(children=[worker("a"), worker("b"), worker("c")]).start()
    assert names("start") == ["start a", "start b", "start c"]
    assert await tree.system.stop(tree.root) == "shutdown"
    assert names("stop ") == ["stop c", "stop b", "stop a"]
    assert not tree.system.is_alive("/root/a")


async def test_one_for_one_restarts_only_the_crashed_child() -> None:
    tree = await Tree(strategy="one_for_one", children=[worker("a"), worker("b"), worker("c")]).start()
    EVENTS.clear()
    await tree.tell("/root/b", Crash())
    await until(lambda: tree.rows()["b"]["restarts"] == 1)
    assert names() == ["start b"]
    assert "was told to crash" in tree.rows()["b"]["last_error"]


async def test_one_for_all_stops_the_rest_in_reverse_and_restarts_all_in_order() -> None:
    tree = await Tree(strategy="one_for_all", children=[worker("a"), worker("b"), worker("c")]).start()
    EVENTS.clear()
    await tree.tell("/root/b", Crash())
    await until(lambda: all(row["state"] == "running" and row["restarts"] == 1 for row in tree.rows().values()))
    assert names("st") == ["stopping c", "stop c", "stopping a", "stop a", "start a", "start b", "start c"]


async def test_rest_for_one_restarts_the_child_and_those_started_after_it() -> None:
    tree = await Tree(strategy="rest_for_one", children=[worker("a"), worker("b"), worker("c")]).start()
    EVENTS.clear()
    await tree.tell("/root/b", Crash())
    await until(lambda: tree.rows()["c"]["restarts"] == 1 and tree.rows()["c"]["state"] == "running")
    assert names("st") == ["stopping c", "stop c", "start b", "start c"]
    assert tree.rows()["a"]["restarts"] == 0


async def test_permanent_transient_and_temporary_restart_types() -> None:
    children = [
        worker("perm", restart="permanent"),
        worker("trans", restart="transient"),
        worker("temp", restart="temporary"),
    ]
    tree = await Tree(max_restarts=10, children=children).start()
    for name in ("perm", "trans", "temp"):
        await tree.tell(f"/root/{name}", Finish())
    await until(lambda: "temp" not in tree.rows() and tree.rows()["perm"]["restarts"] == 1)
    await until(lambda: tree.rows()["trans"]["state"] == "stopped")
    assert tree.rows()["trans"]["restarts"] == 0  # a transient child that exits normally stays down
    assert names("start") == ["start perm", "start trans", "start temp", "start perm"]

    children = [worker("trans", restart="transient"), worker("temp", restart="temporary")]
    tree = await Tree(max_restarts=10, children=children).start()
    await tree.tell("/root/trans", Crash())
    await tree.tell("/root/temp", Crash())
    await until(lambda: "temp" not in tree.rows() and tree.rows()["trans"]["restarts"] == 1)
    assert tree.rows()["trans"]["state"] == "running"


async def test_intensity_exceeded_gives_up_and_the_parent_decides(logs: list[dict[str, Any]]) -> None:
    nested = {"id": "sub", "kind": "supervisor", "max_restarts": 1, "max_seconds": 60.0, "backoff": 0.0}
    nested["children"] = [worker("flaky"), worker("sibling")]
    tree = await Tree(max_restarts=5, children=[nested, worker("other")]).start()
    await tree.tell("/root/sub/flaky", Crash())
    await until(lambda: tree.rows("/root/sub")["flaky"]["restarts"] == 1)
    await tree.tell("/root/sub/flaky", Crash())
    # The second crash is over the nested limit: it stops its children and exits; the root restarts it.
    await until(lambda: tree.rows()["sub"]["restarts"] == 1 and tree.rows()["sub"]["state"] == "running")
    gave_up = events(logs, "supervisor_gave_up")
    assert [(e["actor"], e["child"]) for e in gave_up] == [("/root/sub", "flaky")]
    assert "gave up (more than max_restarts=1 within 60s)" in tree.rows()["sub"]["last_error"]
    assert "flaky was told to crash" in tree.rows()["sub"]["last_error"]
    assert tree.rows("/root/sub")["flaky"]["restarts"] == 0  # a fresh nested supervisor
    assert tree.rows()["other"]["restarts"] == 0
    assert "stop sibling" in names()


async def test_root_gives_up_and_exits_abnormally_naming_the_child() -> None:
    tree = await Tree(max_restarts=0, children=[worker("a"), worker("b")]).start()
    await tree.tell("/root/b", Crash())
    reason = await tree.system.wait(tree.root)
    assert reason.startswith("SupervisorError: gave up (more than max_restarts=0 within 5s)")
    assert "child 'b'" in reason and "b was told to crash" in reason
    assert names("stop ") == ["stop a"]  # the surviving sibling was stopped before the exit


async def test_a_child_that_cannot_start_fails_the_supervisor_start() -> None:
    tree = Tree(children=[worker("a"), {"id": "bad", "actor": "tests.supervisor.actors:FailsToStart"}, worker("c")])
    tree.root = tree.system.spawn(Supervisor(tree.spec, TreeContext(tree.system)), "/root")
    reason = await tree.system.wait_started(tree.root)
    assert reason is not None and "child 'bad' failed to start" in reason and "cannot start" in reason
    assert names() == ["start a", "stopping a", "stop a"]


async def test_shutdown_waits_its_timeout_then_kills(logs: list[dict[str, Any]]) -> None:
    slow = worker("slow", shutdown_timeout=0.2)
    slow["args"]["stop_delay"] = 3600.0
    tree = await Tree(children=[slow, worker("quick")]).start()
    await tree.system.stop(tree.root, timeout=30.0)
    assert names("stop") == ["stopping quick", "stop quick", "stopping slow"]  # slow never finished on_stop
    exits = {e["child"]: e["reason"] for e in events(logs, "child_exited")}
    assert exits == {"quick": "shutdown", "slow": "killed"}


async def test_backoff_doubles_between_restarts_within_the_window() -> None:
    tree = await Tree(backoff=0.2, backoff_max=10.0, max_restarts=5, max_seconds=60.0, children=[worker("a")]).start()
    gaps = []
    for restarts in (1, 2):
        EVENTS.clear()
        crashed = time.monotonic()
        await tree.tell("/root/a", Crash())
        await until(lambda: tree.rows()["a"]["restarts"] == restarts)
        ((started, _),) = EVENTS
        gaps.append(started - crashed)
    # Lower bounds only: a busy machine can make a restart later, never earlier.
    assert gaps[0] >= 0.2 * 0.9
    assert gaps[1] >= 0.4 * 0.9
