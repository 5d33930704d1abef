"""The kernels' numba cache is stamped by every kernel file, not only the kernel's own."""

from __future__ import annotations

from five_actors.game import jit
from five_actors.game.bots import RandomBot
from five_actors.game.observe import observe_serial
from five_actors.game.sim import reset_game
from five_actors.game.step import step_serial


def test_every_kernel_cache_is_stamped_by_all_kernel_files() -> None:
    for dispatcher in (step_serial, observe_serial, reset_game, RandomBot.act.__globals__["_random_actions"]):
        impl = dispatcher._cache._impl
        assert isinstance(impl.locator, jit._GameStamp)
        assert dispatcher._cache._cache_file._source_stamp == jit.kernel_stamp()
