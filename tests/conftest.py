"""Shared setup: the lane game's kernels are compiled before the first test starts."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from five_actors.runtime.actor import ActorSystem


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile (or load from numba's cache) every kernel the game, its bots and the actors use.

    A fresh checkout has no cache and compiling takes a minute or two on a small machine; done
    here, outside any test's timeout, it is paid once instead of inside whichever test (or
    child process) happens to step a game first.
    """
    from five_actors.game.bots import RandomBot, ScriptedBot
    from five_actors.game.config import GameConfig
    from five_actors.game.env import LaneGame

    started = time.monotonic()
    config = GameConfig(games_per_batch=2, seed=0)
    env = LaneGame(config)
    obs, masks = env.reset()
    for bot in (RandomBot(seed=0), ScriptedBot(config)):
        step = env.step(bot.act(obs, masks))
        obs, masks = step.obs, step.masks
    elapsed = time.monotonic() - started
    if elapsed > 5:
        print(f"\ncompiled the lane game's kernels in {elapsed:.0f}s (numba caches them for later runs)")


@pytest.fixture
async def system() -> AsyncIterator[ActorSystem]:
    """An actor system for in-process actor tests; every actor still running is stopped after."""
    system = ActorSystem("test")
    yield system
    for cell in system.cells():
        await system.stop(cell.path)
