"""Vectorised bots: `RandomBot` (uniform over legal actions) and `ScriptedBot` (a lane pusher).

A bot maps the observations and masks of some rows to actions: `bot.act(obs, masks)`. The
rows must come as whole teams (heroes_per_side consecutive rows each, in hero order), as
LaneGame lays them out; the scripted bot assigns hero j of a team to lane j mod lanes.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from five_actors.game.config import GameConfig
from five_actors.game.spec import obs_spec
from five_actors.game.state import (
    A_ABILITY0, A_ATTACK, A_MOVE, A_NOOP, AB_KIND, AK_HASTE, AK_HEAL, DIRECTIONS, FOUNTAIN_AT, hero_tables,
)


@njit(cache=True)
def _seed(seed: int) -> None:
    np.random.seed(seed)


@njit(cache=True)
def _pick(mask: np.ndarray) -> int:
    """A uniformly random True index of `mask` (0 when none)."""
    count = 0
    for j in range(mask.shape[0]):
        if mask[j]:
            count += 1
    if count == 0:
        return 0
    r = np.random.randint(count)
    for j in range(mask.shape[0]):
        if mask[j]:
            if r == 0:
                return j
            r -= 1
    return 0


@njit(cache=True)
def _random_actions(mtype: np.ndarray, mmove: np.ndarray, mtarget: np.ndarray, out: np.ndarray) -> None:
    for r in range(mtype.shape[0]):
        t = _pick(mtype[r])
        out[r, 0] = t
        out[r, 1] = _pick(mmove[r, t])
        out[r, 2] = _pick(mtarget[r, t])


class RandomBot:
    """Uniformly random legal actions: a type among the legal ones, then legal head choices."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def act(self, obs: np.ndarray, masks: dict[str, np.ndarray]) -> np.ndarray:
        """Actions `[rows, 3]` for the rows of `obs` and `masks`."""
        out = np.zeros((masks["type"].shape[0], 3), dtype=np.int64)
        _seed(int(self._rng.integers(0, 2**31 - 1)))
        _random_actions(masks["type"], masks["move"], masks["target"], out)
        return out
