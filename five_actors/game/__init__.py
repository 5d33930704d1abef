"""The lane game: a vectorised Dota-like 5v5 environment, its bots and replays.

`LaneGame`, `obs_spec`, `action_spec`, the bots and `play_match` are imported lazily so that
reading a config does not load numba.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "LaneGame": "five_actors.game.env",
    "obs_spec": "five_actors.game.spec",
    "action_spec": "five_actors.game.spec",
    "GameConfig": "five_actors.game.config",
    "RandomBot": "five_actors.game.bots",
    "ScriptedBot": "five_actors.game.bots",
    "play_match": "five_actors.game.match",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'five_actors.game' has no attribute {name!r}")
