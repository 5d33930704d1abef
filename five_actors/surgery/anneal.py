"""The game side of add-action: a new action type is chosen only in a share of games, raised from 0 to 1.

A surgery that adds an action type records its anneal share (ModelState.anneal, 0 at first).
Whoever steps games masks the type off in every game outside the share, so the model behaves
exactly as before in those games, and raises the share as training shows the type is used
well (OpenAI Five reverted when TrueSkill fell).

On a running cluster the ParamServer keeps an `Annealing`: each change a live surgery makes
(added action types, a new game version) grows from share 0 to 1 over a configured number of
parameter versions, is announced with every ParamsAvailable, and is reverted to 0 when the
latest version's TrueSkill falls too far below its value at the surgery.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from five_actors.errors import SurgeryRejected
from five_actors.game.layout import ActionSpec, ObsSpec, project_masks, project_obs

ANNEAL_COUNTER = "anneal_ppm:"
"""Prefix of the checkpoint counters that hold anneal shares, in parts per million."""


def games_allowed(share: float, num_games: int) -> int:
    """How many of `num_games` games (the first ones) may use an action annealed to `share`."""
    if not 0.0 <= share <= 1.0:
        raise SurgeryRejected(f"an anneal share must be within [0, 1], got {share}")
    return round(share * num_games)


def apply_anneal(
    type_mask: np.ndarray,
    action_types: Sequence[str],
    anneal: Mapping[str, float],
    game_of_row: np.ndarray,
    num_games: int,
) -> np.ndarray:
    """`type_mask` [rows, types] with each annealed type masked off in the games outside its share (in place;
    returned)."""
    for name, share in anneal.items():
        if name not in action_types:
            raise SurgeryRejected(f"annealed action type {name!r} is not one of {list(action_types)}")
        type_mask[game_of_row >= games_allowed(share, num_games), action_types.index(name)] = False
    return type_mask


GAME_VERSION = "game_version"
"""The anneal name of a game-version change: the share of games that play the model's game version
(the other games play the version before it: its newer features read 0, its newer action types masked)."""


def apply_game_version(
    obs: np.ndarray,
    masks: dict[str, np.ndarray],
    rows: np.ndarray,
    new: tuple[ObsSpec, ActionSpec],
    old: tuple[ObsSpec, ActionSpec],
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Observations and masks of game layout `new` with the rows `rows` seen as the older layout `old` would see
    them."""
    if not len(rows):
        return obs, masks
    obs, masks = obs.copy(), {k: v.copy() for k, v in masks.items()}
    obs[rows] = project_obs(project_obs(obs[rows], new[0], old[0]), old[0], new[0])
    older = project_masks(project_masks({k: v[rows] for k, v in masks.items()}, new[1], old[1]), old[1], new[1])
    for name, mask in older.items():
        masks[name][rows] = mask
    return obs, masks


@dataclass
class Anneal:
    """One change a live surgery anneals in (an added action type, or GAME_VERSION) from share 0 to 1."""

    name: str
    start_version: int
    """The parameter version the surgery made: share 0 there."""
    versions: int
    """Versions after `start_version` at which the share reaches 1."""
    baseline: float | None = None
    """The latest version's TrueSkill at the surgery (the first rating heard after it when none was known)."""
    reverted: str = ""
    """Why the change went back to share 0 for good; empty while it has not."""

    def share(self, version: int) -> float:
        """The share of games that have the change at parameter version `version`."""
        if self.reverted:
            return 0.0
        return min(1.0, max(0, version - self.start_version) / self.versions)


class Annealing:
    """The changes of a run's live surgeries being annealed in, and the revert rule (OpenAI Five reverted a
    change when TrueSkill fell): while a change's share is below 1, a TrueSkill of the latest version more
    than `revert_bound` below its baseline sends the change back to share 0."""

    def __init__(self, versions: int, revert_bound: float) -> None:
        if versions < 1:
            raise SurgeryRejected(f"an anneal must take at least 1 version, got {versions}")
        self.versions = versions
        self.revert_bound = revert_bound
        self.anneals: dict[str, Anneal] = {}
        self.trueskill: float | None = None
        """The latest rating heard (of whichever version was rated last)."""

    def start(self, names: Sequence[str], version: int) -> None:
        """Anneal `names` in from share 0 at parameter version `version`."""
        for name in names:
            self.anneals[name] = Anneal(name, version, self.versions, self.trueskill)

    def shares(self, version: int) -> dict[str, float]:
        """Every change's share at parameter version `version`."""
        return {name: anneal.share(version) for name, anneal in self.anneals.items()}

    def rating(self, version: int, trueskill: float) -> list[Anneal]:
        """Take the TrueSkill of parameter version `version`; returns the changes it reverts (with the reason set)."""
        self.trueskill = trueskill
        reverted = []
        for anneal in self.anneals.values():
            if anneal.reverted or anneal.share(version) >= 1.0:
                continue
            if anneal.baseline is None:
                anneal.baseline = trueskill
            elif version >= anneal.start_version and trueskill < anneal.baseline - self.revert_bound:
                anneal.reverted = (
                    f"TrueSkill of version {version} is {trueskill:.2f}, more than {self.revert_bound:g} below "
                    f"{anneal.baseline:.2f} at the surgery (version {anneal.start_version})"
                )
                reverted.append(anneal)
        return reverted

    def to_counters(self, version: int) -> dict[str, int]:
        """Checkpoint counters: `anneal_ppm:NAME` (the share at `version`), `anneal_start:NAME`,
        `anneal_reverted:NAME`."""
        counters = {}
        for name, anneal in self.anneals.items():
            counters[f"{ANNEAL_COUNTER}{name}"] = round(anneal.share(version) * 1e6)
            counters[f"anneal_start:{name}"] = anneal.start_version
            counters[f"anneal_reverted:{name}"] = int(bool(anneal.reverted))
        return counters

    def restore(self, counters: Mapping[str, int]) -> None:
        """Take back the changes of `to_counters` (a resumed run continues their anneal)."""
        for key, start in counters.items():
            if key.startswith("anneal_start:"):
                name = key.removeprefix("anneal_start:")
                reverted = "reverted before the run was resumed" if counters.get(f"anneal_reverted:{name}") else ""
                self.anneals[name] = Anneal(name, int(start), self.versions, None, reverted)
