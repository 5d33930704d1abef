"""The runtime's deferred replies, which the InferenceActor's batching rests on."""

from __future__ import annotations

import asyncio

import pytest

from five_actors.errors import ActorDown, ModelError, RemoteError
from five_actors.runtime.actor import Actor, ActorSystem, message


@message
class Hold:
    """Answered only when a Release arrives."""

    key: str


@message
class Release:
    """Answer the held asks: with `value`, or refuse them when `refuse`."""

    value: int
    refuse: bool = False


class Holder(Actor):
    """Keeps asks pending while taking further messages."""

    def __init__(self) -> None:
        self.held: list[asyncio.Future[int]] = []

    async def on_hold(self, msg: Hold) -> asyncio.Future[int]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.held.append(future)
        return future

    async def on_release(self, msg: Release) -> int:
        held, self.held = self.held, []
        for future in held:
            future.set_exception(ModelError("refused")) if msg.refuse else future.set_result(msg.value)
        return len(held)

    async def on_stop(self) -> None:
        for future in self.held:
            future.cancel()


async def test_a_handler_returning_a_future_replies_later_and_keeps_taking_messages() -> None:
    system = ActorSystem("t")
    ref = system.spawn(Holder(), "/holder")
    asks = [asyncio.create_task(ref.ask(Hold(str(i)))) for i in range(3)]
    await asyncio.sleep(0.05)
    assert not any(a.done() for a in asks), "held asks wait for their future"
    assert await ref.ask(Release(7)) == 3
    assert await asyncio.gather(*asks) == [7, 7, 7]
    refused = asyncio.create_task(ref.ask(Hold("x")))
    await asyncio.sleep(0.05)
    await ref.tell(Release(0, refuse=True))
    with pytest.raises(RemoteError, match="ModelError: refused"):
        await refused
    dropped = asyncio.create_task(ref.ask(Hold("y")))
    await asyncio.sleep(0.05)
    await system.stop(ref)
    with pytest.raises(ActorDown):
        await dropped
