"""PettingZoo parallel environments for the tests: `[env] id = "pettingzoo:tests.actors.parallel_envs"` makes
`Signals` through this module's `parallel_env()`, as PettingZoo's own environment modules do."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

EPISODE_STEPS = 12
"""Signals' episodes are truncated after this many steps..."""
LEAVES_AT = 5
"""...but its last agent terminates after this many."""


class Signals(ParallelEnv):  # type: ignore[misc]
    """Three agents each see a colour (Discrete(3)) and a position (Box); agent i is rewarded 1 for answering
    (colour + i) % 3, so one shared policy must tell the agents apart. Agent a2 leaves (terminates) after LEAVES_AT
    steps, the others are truncated after EPISODE_STEPS: best returns 12, 12 and 5."""

    metadata = {"name": "signals_v0", "render_fps": 10}

    def __init__(self) -> None:
        self.possible_agents = ["a0", "a1", "a2"]
        self.agents: list[str] = []
        self._obs = gym.spaces.Dict(
            {"colour": gym.spaces.Discrete(3), "position": gym.spaces.Box(-1.0, 1.0, (2,), np.float32)}
        )
        self._actions = {a: gym.spaces.Discrete(self._choices(a)) for a in self.possible_agents}
        self._rng = np.random.default_rng()

    def observation_space(self, agent: str) -> gym.Space:  # type: ignore[type-arg]
        return self._obs

    def action_space(self, agent: str) -> gym.Space:  # type: ignore[type-arg]
        return self._actions[agent]

    def _choices(self, agent: str) -> int:
        return 3

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._steps = 0
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, int]) -> tuple[dict[str, Any], ...]:
        assert set(actions) == set(self.agents), (actions, self.agents)
        rewards = {
            a: float(int(actions[a]) == (self._colours[a] + self.possible_agents.index(a)) % 3) for a in self.agents
        }
        self._steps += 1
        terminated = {a: a == "a2" and self._steps >= LEAVES_AT for a in self.agents}
        truncated = {a: self._steps >= EPISODE_STEPS for a in self.agents}
        obs = self._observe()
        self.agents = [a for a in self.agents if not (terminated[a] or truncated[a])]
        return obs, rewards, terminated, truncated, {a: {} for a in obs}

    def _observe(self) -> dict[str, Any]:
        self._colours = {a: int(self._rng.integers(3)) for a in self.agents}
        return {
            a: {"colour": self._colours[a], "position": self._rng.uniform(-1, 1, 2).astype(np.float32)}
            for a in self.agents
        }


class MixedSpaces(Signals):
    """Agent a1 acts in a different space: no shared policy can play it."""

    def _choices(self, agent: str) -> int:
        return 4 if agent == "a1" else 3


DUEL_STEPS = 8
"""Duel's episodes last this many steps."""


class Duel(Signals):
    """Two teams of two (red_0, red_1 against blue_0, blue_1). Each agent sees a colour; an agent on red scores 1 for
    answering the colour, on blue for answering (colour + 1) % 3, so a shared policy must know its side. After
    DUEL_STEPS steps (truncated) the team with more points wins: a player that always answers right beats a uniformly
    random one (16 points to about 5.3) nearly every game."""

    metadata = {"name": "duel_v0", "render_fps": 10}

    def __init__(self) -> None:
        super().__init__()
        self.possible_agents = ["red_0", "red_1", "blue_0", "blue_1"]
        self._actions = {a: gym.spaces.Discrete(3) for a in self.possible_agents}

    def step(self, actions: dict[str, int]) -> tuple[dict[str, Any], ...]:
        rewards = {a: float(int(actions[a]) == (self._colours[a] + a.startswith("blue")) % 3) for a in self.agents}
        self._steps += 1
        done = self._steps >= DUEL_STEPS
        obs = self._observe()
        if done:
            self.agents = []
        return obs, rewards, dict.fromkeys(rewards, False), dict.fromkeys(rewards, done), {a: {} for a in obs}


def two_teams() -> Duel:
    """The two-team environment (`env.teams = 2`)."""
    return Duel()


def parallel_env() -> Signals:
    """PettingZoo's convention: an environment module's `parallel_env()` makes one copy."""
    return Signals()


def mixed_spaces() -> MixedSpaces:
    """The environment with one agent's action space unlike the others'."""
    return MixedSpaces()
