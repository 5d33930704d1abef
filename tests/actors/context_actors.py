"""Test actors for the context plumbing: they report what their TreeContext held when they started."""

from __future__ import annotations

import os
from typing import Any

from five_actors.runtime.actor import Actor


class ContextReporter(Actor):
    """Records, in on_start, the run config and run dir its supervisor gave it; reports them in status()."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    async def on_start(self) -> None:
        config = self.context.config
        self.seen = {
            "pid": os.getpid(),
            "name": None if config is None else config.name,
            "games_per_actor": None if config is None else config.training.games_per_actor,
            "rendezvous_port": None if config is None else config.training.rendezvous_port,
            "run_dir": None if self.context.run_dir is None else str(self.context.run_dir),
        }

    def status(self) -> dict[str, Any]:
        return dict(self.seen)
