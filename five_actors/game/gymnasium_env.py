"""Any gymnasium environment as a `layout.BatchEnv`, so the model and PPO run on it unchanged.

The observation is one `self` block with one slot: a Box flattened, a Discrete or
MultiDiscrete one-hot, a Dict or Tuple of those flattened in gymnasium's order
(`gymnasium.spaces.flatten`). An action space of Discrete, one-dimensional MultiDiscrete and
floating-point Box parts (one of them, or a Dict or Tuple of them, parts in the space's order) is a
row of columns, one per Discrete and one per MultiDiscrete dimension: the first column is the type
head, each further one a plain secondary head, used by every type; then one column per Box
element, a Gaussian head's real value (clipped to the Box's bounds on its way to the env). Every
mask is all True. Games reset automatically: on a done row `obs` is already the next
episode's first observation, `infos["final_obs"]` holds the finished episode's last one, and
`infos["episode_return"]` / `infos["episode_length"]` its totals (0 on other rows).
`infos["truncated"]` marks episodes cut by a time limit rather than ended by the environment:
a learner bootstraps those from the value of `final_obs` instead of treating them as terminal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from five_actors.errors import GameError
from five_actors.game.layout import ActionHead, ActionSpec, EntityBlock, ObsSpec, Step, decode_continuous

EnvFactory = Callable[[], gym.Env]


class GymBatchEnv:
    """`num_envs` copies of one gymnasium environment stepped as a batch of rows (one per copy)."""

    teams = 1
    agents_per_team = 1

    def __init__(self, env: str | EnvFactory, num_envs: int, seed: int = 0) -> None:
        if num_envs < 1:
            raise GameError(f"num_envs must be at least 1, got {num_envs}")
        factory: EnvFactory = (lambda: gym.make(env)) if isinstance(env, str) else env
        self.name = env if isinstance(env, str) else getattr(env, "__name__", "custom")
        self.envs = [factory() for _ in range(num_envs)]
        self.num_games = num_envs
        self.seed = seed
        self.spaces = Spaces(self.name, self.envs[0].observation_space, self.envs[0].action_space)
        self.obs_spec, self.action_spec = self.spaces.obs_spec, self.spaces.action_spec
        self.seconds_per_step = seconds_per_step(self.envs[0].metadata)
        """Game time per step, for a discount from a horizon in seconds (1 s when the env does not say)."""
        self.episodes = Episodes(num_envs, self.spaces.obs_size)

    @property
    def num_rows(self) -> int:
        """One row per environment copy."""
        return self.num_games

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Reset every copy (copy i seeded `seed + i`); returns the first observations and masks."""
        base = self.seed if seed is None else seed
        obs = np.stack([self.spaces.flat(e.reset(seed=base + i)[0]) for i, e in enumerate(self.envs)])
        self.episodes.reset()
        return obs, self.spaces.masks(self.num_rows)

    def step(self, actions: np.ndarray) -> Step:
        """Apply one action per row; rows whose episode ended are reset in the same call."""
        actions = self.spaces.check(actions, self.num_rows)
        obs = np.empty((self.num_rows, self.spaces.obs_size), np.float32)
        self.episodes.begin()
        for i, env in enumerate(self.envs):
            o, r, term, trunc, _ = env.step(self.spaces.env_action(actions[i]))
            self.episodes.add(i, float(r))
            if term or trunc:
                self.episodes.end(i, bool(trunc and not term), self.spaces.flat(o))
                o, _ = env.reset()
            obs[i] = self.spaces.flat(o)
        return self.episodes.step(obs, self.spaces.masks(self.num_rows))

    def close(self) -> None:
        """Close every copy."""
        for env in self.envs:
            env.close()


class Episodes:
    """The running return and length of every row's episode, and one batch step's per-row outputs: the rewards, and
    on rows whose episode ended, `dones`, `truncated`, the episode's totals and its final observation."""

    def __init__(self, rows: int, obs_size: int) -> None:
        self.rows, self.obs_size = rows, obs_size
        self.returns = np.zeros(rows, np.float64)
        self.lengths = np.zeros(rows, np.int64)
        self.begin()

    def reset(self) -> None:
        """Every row starts a new episode."""
        self.returns[:] = 0.0
        self.lengths[:] = 0

    def begin(self) -> None:
        """A new batch step: every output 0 until rows fill it in."""
        self.rewards = np.zeros(self.rows, np.float32)
        self.dones = np.zeros(self.rows, bool)
        self.truncated = np.zeros(self.rows, bool)
        self.episode_return = np.zeros(self.rows, np.float32)
        self.episode_length = np.zeros(self.rows, np.int64)
        self.final_obs = np.zeros((self.rows, self.obs_size), np.float32)

    def add(self, row: int, reward: float) -> None:
        """Row `row` took a step worth `reward`."""
        self.rewards[row] = reward
        self.returns[row] += reward
        self.lengths[row] += 1

    def end(self, rows: int | slice, truncated: bool | np.ndarray, final_obs: np.ndarray) -> None:
        """The episodes of `rows` ended with this step (`truncated`: cut by a time limit)."""
        self.dones[rows], self.truncated[rows] = True, truncated
        self.episode_return[rows], self.episode_length[rows] = self.returns[rows], self.lengths[rows]
        self.final_obs[rows] = final_obs
        self.returns[rows], self.lengths[rows] = 0.0, 0

    def step(self, obs: np.ndarray, masks: dict[str, np.ndarray]) -> Step:
        """The batch step's Step, with `obs` (reset rows already showing their next episode's first)."""
        infos: dict[str, np.ndarray] = {
            "episode_return": self.episode_return,
            "episode_length": self.episode_length,
            "truncated": self.truncated,
            "final_obs": self.final_obs,
        }
        return Step(obs, masks, self.rewards, self.dones, infos)


def seconds_per_step(metadata: dict[str, Any]) -> float:
    """Game time per step from an environment's `render_fps` (1 s when it has none)."""
    fps = metadata.get("render_fps")
    return 1.0 / float(fps) if fps else 1.0


class Spaces:
    """One agent's observation and action spaces as the model's layout: a flat `self` block, and a row of action
    columns: the first the type head, the others plain secondary heads (every mask all True), then the real values of
    the Box parts (a Gaussian head). An action space of Box parts only gets a type head of one choice in front."""

    def __init__(self, name: str, obs_space: gym.Space, action_space: gym.Space, extra: tuple[str, ...] = ()) -> None:
        """`extra` names features the caller appends after the flattened observation (e.g. an agent's index)."""
        self.name = name
        self.obs_space, self.action_space = obs_space, action_space
        if not _flattenable(obs_space):
            raise GameError(
                f"{name}: observation space {obs_space} is not supported "
                "(only Box, Discrete, MultiDiscrete, and Dict or Tuple of those are)"
            )
        self.obs_size = int(gym.spaces.flatdim(obs_space))
        features = tuple(f"obs{i}" for i in range(self.obs_size)) + extra
        self.obs_spec = ObsSpec((EntityBlock("self", 1, features),))
        nvec, start, continuous = _action_dims(action_space, name)
        self.choices = np.array(nvec or [1], np.int64)
        """Choices per discrete column (a stand-in type column of one choice when the space has no discrete part)."""
        self.start = np.array(start or [0], np.int64)
        types = tuple(f"a{i}" for i in range(self.choices[0]))
        heads = tuple(ActionHead(f"head{d}", int(n)) for d, n in enumerate(self.choices[1:], start=1))
        self.action_spec = ActionSpec(types, heads, continuous=continuous)

    def flat(self, obs: object) -> np.ndarray:
        """One observation of the space as float32 `[obs_size]`."""
        return np.asarray(gym.spaces.flatten(self.obs_space, obs), np.float32).reshape(self.obs_size)

    def env_action(self, columns: np.ndarray) -> Any:
        """One row of action columns as the space's action (real values clipped to their Box's bounds)."""
        discrete = len(self.choices)
        return _env_action(self.action_space, columns[:discrete] + self.start, decode_continuous(columns[discrete:]))

    def masks(self, rows: int) -> dict[str, np.ndarray]:
        """All-True masks for `rows` rows."""
        return {name: np.ones(shape, bool) for name, shape in self.action_spec.mask_shapes(rows).items()}

    def check(self, actions: np.ndarray, rows: int) -> np.ndarray:
        """`actions` as int64 `[rows, columns]`; GameError naming the row and column of a choice out of range or a
        real value that is not finite."""
        actions = np.asarray(actions)
        expected = (rows, self.action_spec.columns)
        if actions.shape != expected:
            raise GameError(f"{self.name}: actions have shape {actions.shape}, expected {expected}")
        if not np.issubdtype(actions.dtype, np.integer):
            raise GameError(f"{self.name}: actions must be integers, got dtype {actions.dtype}")
        discrete = len(self.choices)
        bad = (actions[:, :discrete] < 0) | (actions[:, :discrete] >= self.choices)
        if bad.any():
            row, col = map(int, np.argwhere(bad)[0])
            raise GameError(
                f"{self.name}: action column {col} of row {row} is {int(actions[row, col])}, outside "
                f"0..{int(self.choices[col]) - 1}"
            )
        real = decode_continuous(actions[:, discrete:])
        if not np.isfinite(real).all():
            row, col = map(int, np.argwhere(~np.isfinite(real))[0])
            raise GameError(f"{self.name}: real action value {col} of row {row} is {real[row, col]}")
        return actions.astype(np.int64)


def _flattenable(space: gym.Space) -> bool:
    """Whether `space` is a Box, Discrete or MultiDiscrete, or a Dict or Tuple of flattenable spaces."""
    if isinstance(space, (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return True
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        parts = space.spaces.values() if isinstance(space, gym.spaces.Dict) else space.spaces
        return all(_flattenable(s) for s in parts)
    return False


def _parts(space: gym.Space) -> list[gym.Space]:
    """The parts of a Dict or Tuple space in order (the space itself otherwise)."""
    if isinstance(space, gym.spaces.Dict):
        return list(space.spaces.values())
    if isinstance(space, gym.spaces.Tuple):
        return list(space.spaces)
    return [space]


def _action_dims(space: gym.Space, name: str) -> tuple[list[int], list[int], int]:
    """(choices per discrete column, offset added to each, real-valued dimensions) of a supported action space."""
    nvec: list[int] = []
    start: list[int] = []
    continuous = 0
    for part in _parts(space):
        if isinstance(part, gym.spaces.Discrete):
            nvec.append(int(part.n))
            start.append(int(part.start))
        elif isinstance(part, gym.spaces.MultiDiscrete) and part.nvec.ndim == 1:
            nvec += part.nvec.astype(np.int64).tolist()
            start += part.start.astype(np.int64).tolist()
        elif isinstance(part, gym.spaces.Box) and np.issubdtype(part.dtype, np.floating):
            continuous += int(np.prod(part.shape))
        else:
            raise GameError(
                f"{name}: action space {space} is not supported "
                "(only Discrete, one-dimensional MultiDiscrete, floating-point Box, and Dict or Tuple of those are)"
            )
    return nvec, start, continuous


def _env_action(space: gym.Space, discrete: np.ndarray, real: np.ndarray) -> Any:
    """The env's action: its discrete parts read from the front of `discrete`, its Box parts from the front of `real`
    (both consumed in the space's order)."""
    at = [0, 0]

    def read(part: gym.Space) -> Any:
        if isinstance(part, gym.spaces.Discrete):
            at[0] += 1
            return int(discrete[at[0] - 1])
        if isinstance(part, gym.spaces.MultiDiscrete):
            at[0] += len(part.nvec)
            return discrete[at[0] - len(part.nvec) : at[0]].copy()
        assert isinstance(part, gym.spaces.Box)
        size = int(np.prod(part.shape))
        at[1] += size
        value = real[at[1] - size : at[1]].reshape(part.shape)
        return np.clip(value, part.low, part.high).astype(part.dtype)

    if isinstance(space, gym.spaces.Dict):
        return {key: read(part) for key, part in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(read(part) for part in space.spaces)
    return read(space)
