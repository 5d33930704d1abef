"""Which environment a run trains on: the `[env]` config section and the one place that builds it.

`id = "lane"` is the built-in lane game (two teams, self-play); `id = "gymnasium:ENV_ID"` is a
registered gymnasium environment, `id = "pettingzoo:package.module"` a PettingZoo environment module
whose `parallel_env()` makes one copy, and `factory = "package.module:function"` a user's own (a
function of no arguments returning a gymnasium.Env or a PettingZoo ParallelEnv). All but the lane
game are external environments. With `teams = 1` (the default) one team: the latest policy plays
every agent, no opponent pool, evaluated by mean episode return. A PettingZoo environment with
`teams = 2` is a two-team game: its agents split into halves in `possible_agents` order, a game is
won by the team with the higher total return, and it keeps self-play as the lane game does (past
opponents, win rates and TrueSkill against a uniformly random player and past versions).
(five_actors.game.gymnasium_env, five_actors.game.pettingzoo_env.)
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
    from five_actors.game.pettingzoo_env import ParallelBatchEnv

LANE = "lane"
GYMNASIUM = "gymnasium:"
PETTINGZOO = "pettingzoo:"


@dataclass(frozen=True)
class EnvConfig:
    """The environment of a run: the lane game, a gymnasium id, or a user's factory."""

    id: str = LANE
    """"lane" (the built-in game, self-play), "gymnasium:ENV_ID" (e.g. "gymnasium:CartPole-v1") or
    "pettingzoo:package.module" (a module with `parallel_env()`, e.g. "pettingzoo:mpe2.simple_spread_v3")."""
    factory: str = ""
    """"package.module:function" returning a gymnasium.Env or a PettingZoo ParallelEnv; used instead of `id`."""
    teams: int = 1
    """Sides of an external environment: 1, or 2 for a PettingZoo game of two teams (the first half of
    `possible_agents` against the second), which keeps self-play. The lane game always has two."""

    def __post_init__(self) -> None:
        if self.teams not in (1, 2):
            raise ValueError(f"env.teams must be 1 or 2, got {self.teams}")
        if self.factory:
            module, sep, name = self.factory.partition(":")
            if not sep or not module or not name.isidentifier():
                raise ValueError(f"env.factory must be 'package.module:function', got {self.factory!r}")
            if self.id != LANE:
                raise ValueError(
                    f"env.factory and env.id name two environments ({self.factory!r}, {self.id!r}): set one"
                )
        elif self.id != LANE and not any(
            self.id.startswith(prefix) and len(self.id) > len(prefix) for prefix in (GYMNASIUM, PETTINGZOO)
        ):
            raise ValueError(
                f"env.id must be 'lane', 'gymnasium:ENV_ID' or 'pettingzoo:package.module', got {self.id!r}"
            )

    @property
    def is_lane(self) -> bool:
        """True for the built-in lane game (two teams, self-play)."""
        return not self.factory and self.id == LANE

    @property
    def self_play(self) -> bool:
        """Two teams: past opponents in training, win rates and TrueSkill in evaluation."""
        return self.is_lane or self.teams == 2

    @property
    def eval_reference(self) -> str | None:
        """The EvalActor's headline opponent: the scripted bot in the lane game, the uniformly random player in a
        two-team external environment, none (mean returns) with one team."""
        return "scripted" if self.is_lane else "random" if self.self_play else None

    @property
    def name(self) -> str:
        """What the environment is called in logs and reports."""
        return self.factory or self.id


def make_env(env: EnvConfig, game: GameConfig, copies: int, seed: int) -> BatchEnv:
    """`copies` games of the run's environment as one BatchEnv (the lane game: `copies` lane games).

    An environment that cannot be made, or whose spaces are not supported, is a GameError
    (ConfigError for an id or factory that names nothing) naming the environment and the space.
    """
    if env.is_lane:
        from five_actors.game.env import LaneGame

        return LaneGame(dataclasses.replace(game, games_per_batch=copies, seed=seed))
    return make_external(env, copies, seed)


def make_external(env: EnvConfig, copies: int, seed: int) -> GymBatchEnv | ParallelBatchEnv:
    """`copies` copies of an external (gymnasium or PettingZoo) environment; the lane game is refused."""
    from five_actors.game.gymnasium_env import GymBatchEnv
    from five_actors.game.pettingzoo_env import ParallelBatchEnv, is_parallel_env

    if env.is_lane:
        raise ConfigError("env.id: the lane game is not an external environment")
    factory = _factory(env)
    first = factory()
    if not is_parallel_env(first):
        if env.teams != 1:
            first.close()
            raise ConfigError(
                f"env.teams = {env.teams}: {env.name} is a gymnasium environment, with one agent; leave env.teams at "
                "1, or name a PettingZoo environment of two teams"
            )
        return GymBatchEnv(_reusing(first, factory), copies, seed=seed)
    return ParallelBatchEnv(_reusing(first, factory), copies, seed=seed, name=env.name, teams=env.teams)


def check_env(env: EnvConfig) -> None:
    """Make one copy of the environment and close it: refuses an unknown id or unsupported space before a run starts."""
    if not env.is_lane:
        make_external(env, 1, 0).close()


def _reusing(first: Any, factory: Callable[[], Any]) -> Callable[[], Any]:
    """`factory`, whose first call hands back `first` (already made to see which API it speaks)."""
    made = [first]

    def make() -> Any:
        return made.pop() if made else factory()

    make.__name__ = getattr(factory, "__name__", "custom")
    return make


def _factory(env: EnvConfig) -> Callable[[], Any]:
    """A function of no arguments that makes one copy of the environment."""
    if env.factory:
        module_name, _, name = env.factory.partition(":")
        module = _import(module_name, f"env.factory {env.factory!r}")
        function = getattr(module, name, None)
        if not callable(function):
            raise ConfigError(f"env.factory {env.factory!r}: {module_name} has no function {name!r}")
        return _named(function, env.factory)
    if env.id.startswith(PETTINGZOO):
        module_name = env.id.removeprefix(PETTINGZOO)
        module = _import(module_name, f"env.id {env.id!r}")
        parallel_env = getattr(module, "parallel_env", None)
        if not callable(parallel_env):
            raise ConfigError(f"env.id {env.id!r}: {module_name} has no parallel_env() (PettingZoo's parallel API)")
        return _named(parallel_env, env.id)
    import gymnasium as gym

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


def _import(module_name: str, what: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{what}: cannot import {module_name!r}: {exc}") from None


def _named(function: Callable[[], Any], name: str) -> Callable[[], Any]:
    def make() -> Any:
        return function()

    make.__name__ = name
    return make
