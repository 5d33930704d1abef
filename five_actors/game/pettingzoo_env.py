"""A PettingZoo parallel environment as a `layout.BatchEnv`: one shared policy plays every agent.

Each copy of the environment is a game of `agents` rows, one per agent of `possible_agents` in
that order (row = copy * agents + agent). Every agent must have the same observation and action
space (one policy reads and writes them all); a row's observation is the agent's, flattened as
for gymnasium (five_actors.game.gymnasium_env.Spaces), followed by a one-hot of the agent's index
when there is more than one, so a shared policy can still tell its roles apart.

An episode of a copy lasts until its last agent has left (terminated or truncated): then every row
of the copy is done in the same step, with `infos["episode_return"]` the agent's own total and
`infos["truncated"]` / `infos["final_obs"]` from the step it left, and the copy resets. An agent
that leaves before the others sits the rest of the episode out as a row of its last observation,
reward 0, its actions ignored.

With `teams=2` the agents form two teams, the first half of `possible_agents` against the second
(rows of a copy: team 0's agents, then team 1's, as in the lane game), and a copy's end is a game's:
`infos["win"]` gives every row of it 1 when its team's total return is the higher, 0.5 on a tie,
0 otherwise (0 on rows whose game goes on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from five_actors.errors import GameError
from five_actors.game.gymnasium_env import Episodes, Spaces, seconds_per_step
from five_actors.game.layout import Step

ParallelFactory = Callable[[], Any]
"""A function of no arguments returning a pettingzoo.ParallelEnv."""


def is_parallel_env(env: object) -> bool:
    """Whether `env` speaks PettingZoo's parallel API (possible_agents, per-agent spaces, dict steps)."""
    return hasattr(env, "possible_agents") and callable(getattr(env, "observation_space", None))


class ParallelBatchEnv:
    """`num_envs` copies of one PettingZoo parallel environment, every agent a row (module docstring)."""

    def __init__(self, factory: ParallelFactory, num_envs: int, seed: int = 0, name: str = "", teams: int = 1) -> None:
        if num_envs < 1:
            raise GameError(f"num_envs must be at least 1, got {num_envs}")
        self.teams = teams
        self.name = name or getattr(factory, "__name__", "custom")
        self.envs = [factory() for _ in range(num_envs)]
        self.num_games = num_envs
        self.seed = seed
        first = self.envs[0]
        self.agents: list[str] = list(first.possible_agents)
        self._row_of = {agent: i for i, agent in enumerate(self.agents)}
        """An agent's row within its copy's."""
        if not self.agents:
            raise GameError(f"{self.name}: the environment has no agents (possible_agents is empty)")
        if len(self.agents) % teams:
            raise GameError(
                f"{self.name}: {len(self.agents)} agents {self.agents} cannot form {teams} teams of equal size"
            )
        self.agents_per_team = len(self.agents) // teams
        obs_space, action_space = first.observation_space(self.agents[0]), first.action_space(self.agents[0])
        for agent in self.agents[1:]:
            if first.observation_space(agent) != obs_space or first.action_space(agent) != action_space:
                raise GameError(
                    f"{self.name}: agent {agent!r} has observation space {first.observation_space(agent)} and action "
                    f"space {first.action_space(agent)}, agent {self.agents[0]!r} {obs_space} and {action_space}: "
                    "one shared policy needs the same spaces for every agent"
                )
        index = tuple(f"agent{i}" for i in range(len(self.agents))) if len(self.agents) > 1 else ()
        self.spaces = Spaces(self.name, obs_space, action_space, extra=index)
        self.obs_spec, self.action_spec = self.spaces.obs_spec, self.spaces.action_spec
        self.seconds_per_step = seconds_per_step(getattr(first, "metadata", {}) or {})
        """Game time per step, for a discount from a horizon in seconds (1 s when the env does not say)."""
        rows = self.num_rows
        self._last = np.zeros((rows, self.obs_spec.size), np.float32)
        """Each row's latest observation (an agent that left keeps its last)."""
        self.episodes = Episodes(rows, self.obs_spec.size)
        self._left_truncated = np.zeros(rows, bool)
        self._left_obs = np.zeros((rows, self.obs_spec.size), np.float32)
        if len(self.agents) > 1:
            self._last[:, self.spaces.obs_size :] = np.tile(np.eye(len(self.agents), dtype=np.float32), (num_envs, 1))

    @property
    def num_rows(self) -> int:
        """One row per agent of every copy."""
        return self.num_games * len(self.agents)

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Reset every copy (copy i seeded `seed + i`); returns the first observations and masks."""
        base = self.seed if seed is None else seed
        for i in range(self.num_games):
            self._reset_copy(i, base + i)
        self.episodes.reset()
        return self._last.copy(), self.spaces.masks(self.num_rows)

    def step(self, actions: np.ndarray) -> Step:
        """Apply one action per row (rows of agents that left are ignored); copies whose last agent left reset."""
        actions = self.spaces.check(actions, self.num_rows)
        width = len(self.agents)
        self.episodes.begin()
        win = np.zeros(self.num_rows, np.float32)
        for i, env in enumerate(self.envs):
            first = i * width
            live = list(env.agents)
            obs, reward, terminated, truncations, _ = env.step(
                {agent: self.spaces.env_action(actions[first + self._row_of[agent]]) for agent in live}
            )
            for agent in live:
                row = first + self._row_of[agent]
                self.episodes.add(row, reward.get(agent, 0.0))
                if agent in obs:
                    self._last[row, : self.spaces.obs_size] = self.spaces.flat(obs[agent])
                if terminated.get(agent, False) or truncations.get(agent, False):
                    self._left_truncated[row] = bool(truncations.get(agent, False) and not terminated.get(agent, False))
                    self._left_obs[row] = self._last[row]
            if env.agents:
                continue
            span = slice(first, first + width)
            self.episodes.end(span, self._left_truncated[span], self._left_obs[span])
            if self.teams == 2:
                win[span] = self._outcome(self.episodes.episode_return[span])
            self._reset_copy(i, None)
        step = self.episodes.step(self._last.copy(), self.spaces.masks(self.num_rows))
        if self.teams == 2:
            step.infos["win"] = win
        return step

    def close(self) -> None:
        """Close every copy."""
        for env in self.envs:
            env.close()

    def _outcome(self, returns: np.ndarray) -> np.ndarray:
        """Each row's score of a finished copy of two teams from its agents' returns: 1 when its team's total is the
        higher, 0.5 on a tie, 0 otherwise."""
        totals = returns.reshape(2, self.agents_per_team).sum(1)
        mine = np.sign(totals - totals[::-1]) * 0.5 + 0.5  # per team: 1 ahead, 0.5 level, 0 behind
        return np.repeat(mine, self.agents_per_team).astype(np.float32)

    def _reset_copy(self, i: int, seed: int | None) -> None:
        obs, _ = self.envs[i].reset(seed=seed)
        first = i * len(self.agents)
        for j, agent in enumerate(self.agents):
            if agent not in obs:
                raise GameError(f"{self.name}: reset gave no observation for agent {agent!r}")
            self._last[first + j, : self.spaces.obs_size] = self.spaces.flat(obs[agent])
        self._left_truncated[first : first + len(self.agents)] = False
