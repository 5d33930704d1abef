"""The game side of add-action: a new action type is chosen only in a share of games, raised from 0 to 1.

A surgery that adds an action type records its anneal share (ModelState.anneal, 0 at first).
Whoever steps games masks the type off in every game outside the share, so the model behaves
exactly as before in those games, and raises the share as training shows the type is used
well (OpenAI Five reverted when TrueSkill fell).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from five_actors.errors import SurgeryRejected


def games_allowed(share: float, num_games: int) -> int:
    """How many of `num_games` games (the first ones) may use an action annealed to `share`."""
    if not 0.0 <= share <= 1.0:
        raise SurgeryRejected(f"an anneal share must be within [0, 1], got {share}")
    return round(share * num_games)


def apply_anneal(type_mask: np.ndarray, action_types: Sequence[str], anneal: Mapping[str, float], game_of_row: np.ndarray, num_games: int) -> np.ndarray:
    """`type_mask` [rows, types] with each annealed type masked off in the games outside its share (in place; returned)."""
    for name, share in anneal.items():
        if name not in action_types:
            raise SurgeryRejected(f"annealed action type {name!r} is not one of {list(action_types)}")
        type_mask[game_of_row >= games_allowed(share, num_games), action_types.index(name)] = False
    return type_mask
