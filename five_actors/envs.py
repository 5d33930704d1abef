"""Which environment a run trains on: the `[env]` config section and the one place that builds it.

`id = "lane"` is the built-in lane game (two teams, self-play); `id = "gymnasium:ENV_ID"` is a
registered gymnasium environment, and `factory = "package.module:function"` a user's own (a
function of no arguments returning a gymnasium.Env). Both of the latter are single-agent: one
team, no opponent pool, evaluated by mean episode return (five_actors.game.gymnasium_env).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from five_actors.errors import ConfigError, GameError

if TYPE_CHECKING:
    from five_actors.game.config import GameConfig
    from five_actors.game.gymnasium_env import GymBatchEnv
    from five_actors.game.layout import BatchEnv

LANE = "lane"
GYMNASIUM = "gymnasium:"


@dataclass(frozen=True)
class EnvConfig:
    """The environment of a run: the lane game, a gymnasium id, or a user's factory."""

    id: str = LANE
    """"lane" (the built-in game, self-play) or "gymnasium:ENV_ID" (e.g. "gymnasium:CartPole-v1")."""
    factory: str = ""
    """"package.module:function" returning a gymnasium.Env; used instead of `id` when set."""

    def __post_init__(self) -> None:
        if self.factory:
            module, sep, name = self.factory.partition(":")
            if not sep or not module or not name.isidentifier():
                raise ValueError(f"env.factory must be 'package.module:function', got {self.factory!r}")
            if self.id != LANE:
                raise ValueError(
                    f"env.factory and env.id name two environments ({self.factory!r}, {self.id!r}): set one"
                )
        elif self.id != LANE and not (self.id.startswith(GYMNASIUM) and len(self.id) > len(GYMNASIUM)):
            raise ValueError(f"env.id must be 'lane' or 'gymnasium:ENV_ID', got {self.id!r}")

    @property
    def is_lane(self) -> bool:
        """True for the built-in lane game (two teams, self-play)."""
        return not self.factory and self.id == LANE

    @property
    def name(self) -> str:
        """What the environment is called in logs and reports."""
        return self.factory or self.id


def make_env(env: EnvConfig, game: GameConfig, copies: int, seed: int) -> BatchEnv:
    """`copies` games of the run's environment as one BatchEnv (the lane game: `copies` lane games).

    A gymnasium environment that cannot be made, or whose spaces are not supported, is a
    GameError naming the environment and the space.
    """
    if env.is_lane:
        from five_actors.game.env import LaneGame

        return LaneGame(dataclasses.replace(game, games_per_batch=copies, seed=seed))
    return make_single_agent(env, copies, seed)


def make_single_agent(env: EnvConfig, copies: int, seed: int) -> GymBatchEnv:
    """`copies` copies of a single-agent (gymnasium) environment; the lane game is refused."""
    from five_actors.game.gymnasium_env import GymBatchEnv

    if env.is_lane:
        raise ConfigError("env.id: the lane game is not a single-agent environment")
    return GymBatchEnv(_factory(env), copies, seed=seed)


def check_env(env: EnvConfig) -> None:
    """Make one copy of the environment and close it: refuses an unknown id or unsupported space before a run starts."""
    if not env.is_lane:
        make_single_agent(env, 1, 0).close()


def _factory(env: EnvConfig) -> Callable[[], Any]:
    """A function of no arguments that makes one gymnasium.Env."""
    import gymnasium as gym

    if env.factory:
        module_name, _, name = env.factory.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(f"env.factory {env.factory!r}: cannot import {module_name!r}: {exc}") from None
        function = getattr(module, name, None)
        if not callable(function):
            raise ConfigError(f"env.factory {env.factory!r}: {module_name} has no function {name!r}")
        return _named(function, env.factory)
    env_id = env.id.removeprefix(GYMNASIUM)
    try:
        gym.spec(env_id)
    except gym.error.Error as exc:
        raise ConfigError(f"env.id {env.id!r}: {exc}") from None

    def make() -> Any:
        try:
            return gym.make(env_id)
        except (gym.error.Error, ImportError) as exc:
            raise GameError(f"env.id {env.id!r}: cannot make it: {exc}") from None

    return _named(make, env.id)


def _named(function: Callable[[], Any], name: str) -> Callable[[], Any]:
    def make() -> Any:
        return function()

    make.__name__ = name
    return make
