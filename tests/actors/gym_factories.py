"""Environments for `[env] factory = ...` in tests: a user's own gymnasium.Env factories."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class TextObservations(gym.Env):  # type: ignore[type-arg]
    """An environment whose observations are strings: a space five_actors does not support."""

    observation_space = gym.spaces.Text(8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        return "start", {}

    def step(self, action: int) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "step", 0.0, True, False, {}


class DictObservations(gym.Env):  # type: ignore[type-arg]
    """Dict observations (a Box and a Discrete) and Tuple actions (a Discrete(3, start=1) and a MultiDiscrete):
    rewarded for repeating the Discrete part of the observation as the first action."""

    observation_space = gym.spaces.Dict(
        {"position": gym.spaces.Box(-1.0, 1.0, (2,), np.float32), "colour": gym.spaces.Discrete(3)}
    )
    action_space = gym.spaces.Tuple((gym.spaces.Discrete(3, start=1), gym.spaces.MultiDiscrete([2, 4])))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self._steps = 0
        return self._observe(), {}

    def step(self, action: tuple[int, np.ndarray]) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        assert self.action_space.contains(action), action
        reward = float(action[0] - 1 == self._colour)
        self._steps += 1
        return self._observe(), reward, False, self._steps >= 20, {}

    def _observe(self) -> dict[str, Any]:
        self._colour = int(self.np_random.integers(3))
        return {"position": self.np_random.uniform(-1, 1, 2).astype(np.float32), "colour": self._colour}


def text_observations() -> gym.Env:  # type: ignore[type-arg]
    """The unsupported environment."""
    return TextObservations()


def dict_observations() -> gym.Env:  # type: ignore[type-arg]
    """The Dict-observation environment."""
    return DictObservations()


class Target(gym.Env):  # type: ignore[type-arg]
    """A real-valued action: each step shows a target in [-1, 1] and pays -(action - target)^2; 16 steps an
    episode (truncated). Random play (std 1 around 0) scores about -21 an episode, the best 0."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self._steps = 0
        return self._observe(), {}

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        assert self.action_space.contains(action), action
        reward = -float((action[0] - self._target) ** 2)
        self._steps += 1
        return self._observe(), reward, False, self._steps >= 16, {}

    def _observe(self) -> np.ndarray:
        self._target = float(self.np_random.uniform(-1, 1))
        return np.array([self._target], np.float32)


def target() -> gym.Env:  # type: ignore[type-arg]
    """The real-valued-action environment."""
    return Target()


def cartpole_grown() -> gym.Env:  # type: ignore[type-arg]
    """CartPole-v1 whose observation grew at its end: a fifth feature, the pole's angle squared (a user's environment
    after an update; `add-observation self.obs4` carries a CartPole model over to it)."""
    env = gym.make("CartPole-v1")
    low, high = env.observation_space.low, env.observation_space.high  # type: ignore[attr-defined]
    space = gym.spaces.Box(np.append(low, 0.0).astype(np.float32), np.append(high, np.inf).astype(np.float32))
    return gym.wrappers.TransformObservation(env, lambda o: np.append(o, o[2] ** 2).astype(np.float32), space)
