"""Actor behaviour the links rely on: ask timeouts, asks to dead actors, watches of dead actors."""

from __future__ import annotations

import asyncio

import pytest

from five_actors.errors import ActorDown, AskTimeout
from five_actors.runtime.actor import Actor, ActorSystem, Down
from tests.runtime.peer_node import Die, Echo, Probe, Sleep


class Watcher(Actor):
    """Collects the Down messages it receives."""

    def __init__(self) -> None:
        self.downs: asyncio.Queue[Down] = asyncio.Queue()

    async def on_down(self, msg: Down) -> None:
        await self.downs.put(msg)


async def test_ask_without_a_reply_in_time_raises_ask_timeout_and_the_actor_goes_on() -> None:
    system = ActorSystem("n")
    ref = system.spawn(Echo(), "/echo")
    with pytest.raises(AskTimeout, match="no reply from n/echo to Sleep within 0.05s"):
        await ref.ask(Sleep(10), timeout=0.05)
    system.kill(ref)
    await system.wait(ref)


async def test_ask_to_a_dead_actor_fails_at_once() -> None:
    system = ActorSystem("n")
    ref = system.spawn(Echo(), "/echo")
    assert await system.stop(ref) == "shutdown"
    with pytest.raises(ActorDown, match="no actor running at n/echo"):
        await ref.ask(Probe(1), timeout=60)
    with pytest.raises(ActorDown):
        await ref.tell(Probe(1))


async def test_ask_fails_with_actor_down_when_the_actor_crashes_on_it() -> None:
    system = ActorSystem("n")
    ref = system.spawn(Echo(), "/echo")
    with pytest.raises(ActorDown, match="n/echo is down \\(RuntimeError: bad\\)"):
        await ref.ask(Die("bad"), timeout=60)


async def test_watch_of_an_already_dead_actor_delivers_down_noproc() -> None:
    system = ActorSystem("n")
    watcher = Watcher()
    system.spawn(watcher, "/watcher")
    system.watch(watcher.ref, system.ref("/never-started"))
    assert await asyncio.wait_for(watcher.downs.get(), 5) == Down("n/never-started", "noproc")
    echo = system.spawn(Echo(), "/echo")
    system.watch(watcher.ref, echo)
    system.kill(echo)
    assert await asyncio.wait_for(watcher.downs.get(), 5) == Down("n/echo", "killed")
    await system.stop(watcher.ref)
