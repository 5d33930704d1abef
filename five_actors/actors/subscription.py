"""Staying subscribed to the ParamServer: a restarted one starts with no subscribers, so each subscribes again."""

from __future__ import annotations

import asyncio
import functools
from typing import Any, NoReturn

from five_actors.actors.messages import Subscribe
from five_actors.errors import FiveActorsError
from five_actors.runtime.actor import Actor

RETRY_S = 1.0
"""Wait before subscribing again after the ParamServer could not be reached."""

RESUBSCRIBE_S = 0.5
"""Wait after the ParamServer went down before subscribing to its restart."""


async def keep_subscribed(actor: Actor, params_address: str, log: Any) -> NoReturn:
    """Subscribe `actor` to the ParamServer at `params_address`, and again each time it exits (run as a task)."""
    loop = asyncio.get_running_loop()
    params = actor.system.ref(params_address)
    while True:
        try:
            await params.tell(Subscribe(actor.ref.address), sender=actor.ref)
        except FiveActorsError as exc:
            log.info("params_unavailable", error=str(exc))
            await asyncio.sleep(RETRY_S)
            continue
        gone: asyncio.Future[str] = loop.create_future()
        unwatch = actor.system.watch_address(params_address, functools.partial(resolve_once, gone))
        try:
            await gone
        finally:
            unwatch()
        await asyncio.sleep(RESUBSCRIBE_S)


def resolve_once(future: asyncio.Future[str], reason: str) -> None:
    """Set `future`'s result unless it has one (a watch callback: the actor may be reported down twice)."""
    if not future.done():
        future.set_result(reason)
