"""TrueSkill ratings with the paper's settings, Wilson intervals, and their file in the run directory.

Settings (PAPER.md, appendix J): mu 25, sigma 25/3, beta sigma/2, tau 0, draw probability 0.02.
The random bot is the scale's reference: its rating is pinned (never updated) and every
reported score is `mu - mu(random)`, so random play is 0 as on the paper's scale.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import trueskill

from five_actors.errors import FiveActorsError
from five_actors.files import write_atomic

MU = 25.0
SIGMA = MU / 3
REFERENCE = "random"
"""The pinned player: the zero of every reported score."""
FILE_FORMAT = 1


def make_env() -> trueskill.TrueSkill:
    """A TrueSkill environment with the paper's settings."""
    return trueskill.TrueSkill(mu=MU, sigma=SIGMA, beta=SIGMA / 2, tau=0.0, draw_probability=0.02)


def wilson_interval(score: float, games: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval (95% for z 1.96) of a win rate `score / games`; (0, 1) for no games."""
    if games <= 0:
        return 0.0, 1.0
    p = score / games
    denominator = 1.0 + z * z / games
    centre = (p + z * z / (2 * games)) / denominator
    half = z * math.sqrt(p * (1 - p) / games + z * z / (4 * games * games)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


class Ratings:
    """Players' TrueSkill ratings by name ("random", "scripted", "v12", ...), with `REFERENCE` pinned."""

    def __init__(self) -> None:
        self.env = make_env()
        self.players: dict[str, trueskill.Rating] = {REFERENCE: self.env.create_rating()}
        self.games: dict[str, int] = {}

    def rating(self, name: str) -> trueskill.Rating:
        """The player's rating (a new player starts at mu 25, sigma 25/3)."""
        return self.players.setdefault(name, self.env.create_rating())

    def record(self, player: str, opponent: str, outcome: float) -> None:
        """One game of `player` against `opponent`: outcome 1 (player won), 0.5 (draw) or 0 (lost)."""
        if outcome not in (0.0, 0.5, 1.0):
            raise ValueError(f"outcome must be 0, 0.5 or 1, got {outcome!r}")
        ranks = {1.0: [0, 1], 0.5: [0, 0], 0.0: [1, 0]}[outcome]  # lower rank is better
        (mine,), (theirs,) = self.env.rate([(self.rating(player),), (self.rating(opponent),)], ranks=ranks)
        for name, new in ((player, mine), (opponent, theirs)):
            if name != REFERENCE:
                self.players[name] = new
            self.games[name] = self.games.get(name, 0) + 1

    def score(self, name: str) -> float:
        """The player's mu on the paper's scale: random play is 0."""
        return self.rating(name).mu - self.players[REFERENCE].mu

    def table(self) -> dict[str, dict[str, float]]:
        """Every player's score, mu, sigma and games, for logs and GetStats."""
        return {
            name: {
                "score": round(self.score(name), 3),
                "mu": round(r.mu, 3),
                "sigma": round(r.sigma, 3),
                "games": self.games.get(name, 0),
            }
            for name, r in sorted(self.players.items())
        }

    def to_dict(self) -> dict[str, Any]:
        """The ratings as JSON-ready data (see `from_dict`)."""
        return {name: [r.mu, r.sigma, self.games.get(name, 0)] for name, r in self.players.items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ratings:
        """Ratings saved by `to_dict`."""
        ratings = cls()
        for name, (mu, sigma, games) in data.items():
            ratings.players[str(name)] = ratings.env.create_rating(float(mu), float(sigma))
            ratings.games[str(name)] = int(games)
        return ratings


def save_state(path: Path, state: dict[str, Any]) -> None:
    """Write the evaluator's state (ratings, rounds, version history) atomically."""
    write_atomic(path, orjson.dumps({"format": FILE_FORMAT, **state}, option=orjson.OPT_INDENT_2))


def load_state(path: Path) -> dict[str, Any] | None:
    """The evaluator's saved state, or None when there is none; a damaged file is an error naming it."""
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise FiveActorsError(f"{path}: cannot read the saved ratings: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FILE_FORMAT:
        raise FiveActorsError(f"{path}: not a ratings file of format {FILE_FORMAT}")
    return data
