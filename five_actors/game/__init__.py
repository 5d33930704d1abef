"""The lane game: a vectorised Dota-like 5v5 environment, its bots and replays."""

from five_actors.game.config import GameConfig
from five_actors.game.env import LaneGame
from five_actors.game.spec import action_spec, obs_spec

__all__ = ["GameConfig", "LaneGame", "action_spec", "obs_spec"]
