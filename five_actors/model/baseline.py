"""The synchronous baseline: one process steps a batch of games, acts, collects 16-step chunks,
updates with PPO, and repeats. It is the reference the asynchronous actor system must beat.

An episode cut by a time limit (`infos["truncated"]`) is not a terminal state: its last reward
gets gamma times the value of its last observation (`infos["final_obs"]`). Treating CartPole's
500-step limit as terminal taught the value that well-balanced states near step 500 are worth
0, and a solved policy lost what it had learned (seed 1 fell from 500 to 158 at 231k steps; with
the bootstrap seeds 0 and 1 stayed at 500 to 300k: README, "The policy, PPO and the baseline").

Rows the policy does not control (`opponent`) are played by another function, e.g. the lane
game's scripted bot; only the policy's rows are learned from.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from five_actors.game.layout import BatchEnv, Step
from five_actors.model.config import BaselineConfig, PPOConfig
from five_actors.model.policy import Policy, State
from five_actors.model.ppo import PPO, Chunks, chunk, gae

Opponent = Callable[[np.ndarray, dict[str, np.ndarray]], np.ndarray]
"""(all rows' obs, all rows' masks) -> actions `[rows, columns]`; only its rows' entries are used."""


@dataclass
class Progress:
    """Where a run stands after an update."""

    steps: int
    """Environment steps so far (policy rows x steps)."""
    wall_s: float
    updates: int
    episodes: int
    mean_return: float | None
    """Mean episode return of the policy's rows over the last `window` finished episodes."""
    win_rate: float | None
    """Share of the last `window` finished games won by the policy (None when the env reports no `win`)."""
    stats: dict[str, float] = field(default_factory=dict)


class SyncTrainer:
    """Collect a rollout of `chunk_steps * loop.rollout_chunks` steps from every row, update, repeat."""

    def __init__(
        self,
        env: BatchEnv,
        policy: Policy,
        config: PPOConfig,
        loop: BaselineConfig,
        chunk_steps: int,
        gamma: float,
        policy_rows: np.ndarray | None = None,
        opponent: Opponent | None = None,
        window: int = 20,
        seed: int = 0,
    ) -> None:
        self.env, self.policy, self.config, self.gamma = env, policy, config, gamma
        self.loop, self.chunk_steps = loop, chunk_steps
        self.ppo = PPO(policy, config)
        rows = env.num_rows
        self.policy_rows = np.ones(rows, bool) if policy_rows is None else np.asarray(policy_rows, bool)
        self.opponent = opponent
        self.returns: deque[float] = deque(maxlen=window)
        self.wins: deque[float] = deque(maxlen=window)
        self.steps = 0
        self.episodes = 0
        obs, masks = env.reset(seed)
        self._obs, self._masks = obs, masks
        self._state = policy.initial_state(int(self.policy_rows.sum()))
        self._starts = torch.ones(int(self.policy_rows.sum()), dtype=torch.bool, device=policy.device)
        self._episode_return = np.zeros(rows, np.float64)

    def train(
        self,
        total_steps: int,
        report: Callable[[Progress], None] | None = None,
        max_seconds: float | None = None,
        stop_when: Callable[[Progress], bool] | None = None,
    ) -> Progress:
        """Run until `total_steps` environment steps, `max_seconds` of wall time, or `stop_when(progress)`.

        `report` is called after every update.
        """
        started = time.perf_counter()
        progress = Progress(0, 0.0, 0, 0, None, None)
        while self.steps < total_steps and (max_seconds is None or progress.wall_s < max_seconds):
            # The baseline's updates stand in for versions; annealing scales the schedule down to 0 at the end.
            scale = max(0.0, 1.0 - self.steps / total_steps) if self.loop.anneal_learning_rate else 1.0
            self.ppo.follow_version(self.ppo.updates, scale)
            stats = self.update()
            progress = Progress(
                self.steps,
                time.perf_counter() - started,
                self.ppo.updates,
                self.episodes,
                float(np.mean(self.returns)) if self.returns else None,
                float(np.mean(self.wins)) if self.wins else None,
                stats,
            )
            if report is not None:
                report(progress)
            if stop_when is not None and stop_when(progress):
                break
        return progress

    def update(self) -> dict[str, float]:
        """Collect one rollout and take the loop's epochs of minibatch steps on it."""
        return self.ppo.update(self.collect(), self.loop.epochs, self.loop.minibatches)

    def collect(self) -> Chunks:
        """Play one rollout and return it as chunks with advantages and value targets."""
        cfg, policy, rows, device = self.config, self.policy, self.policy_rows, self.policy.device
        n = self.chunk_steps
        length = n * self.loop.rollout_chunks
        record: dict[str, list[Tensor]] = {k: [] for k in ("actions", "logp", "values", "rewards", "dones", "starts")}
        observed: list[np.ndarray] = []
        masks: dict[str, list[np.ndarray]] = {k: [] for k in self._masks}
        states: list[State] = []
        for t in range(length):
            if t % n == 0:
                states.append(self._state)
            obs, step_masks = self._obs[rows], {k: v[rows] for k, v in self._masks.items()}
            out = policy.act(obs, step_masks, self._state)
            actions = np.zeros((self.env.num_rows, policy.spec.actions.columns), np.int64)
            if self.opponent is not None:
                actions[:] = self.opponent(self._obs, self._masks)
            actions[rows] = out.actions.cpu().numpy()
            step = self.env.step(actions)
            dones = torch.as_tensor(step.dones[rows], device=device)
            observed.append(obs)
            for k, v in step_masks.items():
                masks[k].append(v)
            for key, value in (("actions", out.actions), ("logp", out.logp), ("values", out.value)):
                record[key].append(value)
            record["rewards"].append(self._bootstrapped(step, out.state, step_masks))
            record["dones"].append(dones)
            record["starts"].append(self._starts)
            self._track_episodes(step.rewards, step.dones, step.infos)
            keep = (~dones).to(out.state[0].dtype).unsqueeze(-1)
            self._state = (out.state[0] * keep, out.state[1] * keep)
            self._starts = dones
            self._obs, self._masks = step.obs, step.masks
        self.steps += length * int(rows.sum())
        last_value = policy.act(self._obs[rows], {k: v[rows] for k, v in self._masks.items()}, self._state).value
        rollout = {k: torch.stack(v) for k, v in record.items()}
        advantages, returns = gae(
            rollout["rewards"], rollout["values"], rollout["dones"], last_value, self.gamma, cfg.gae_lambda
        )

        def as_chunks(arrays: list[np.ndarray]) -> torch.Tensor:
            return chunk(torch.as_tensor(np.stack(arrays), device=device), n)

        return Chunks(
            obs=as_chunks(observed).float(),
            masks={k: as_chunks(v) for k, v in masks.items()},
            actions=chunk(rollout["actions"], n),
            logp=chunk(rollout["logp"], n),
            values=chunk(rollout["values"], n),
            rewards=chunk(rollout["rewards"], n),
            dones=chunk(rollout["dones"], n),
            starts=chunk(rollout["starts"], n),
            advantages=chunk(advantages, n),
            returns=chunk(returns, n),
            state=(torch.cat([s[0] for s in states]), torch.cat([s[1] for s in states])),
        )

    def _bootstrapped(self, step: Step, state: State, masks: dict[str, np.ndarray]) -> Tensor:
        """The policy rows' rewards, plus gamma * V(last observation) on rows whose episode a time limit cut."""
        rows = self.policy_rows
        rewards = torch.as_tensor(step.rewards[rows], device=self.policy.device)
        truncated = step.infos.get("truncated")
        cut = np.flatnonzero(truncated[rows]) if truncated is not None else np.zeros(0, np.int64)
        if len(cut):
            final = step.infos["final_obs"][rows][cut]
            index = torch.as_tensor(cut, device=self.policy.device)
            value = self.policy.act(
                final, {k: v[cut] for k, v in masks.items()}, (state[0][index], state[1][index])
            ).value
            rewards = rewards.clone()
            rewards[index] += self.gamma * value.to(rewards.dtype)
        return rewards

    def _track_episodes(self, rewards: np.ndarray, dones: np.ndarray, infos: dict[str, np.ndarray]) -> None:
        """Episode returns and wins of the policy's rows, for progress reports."""
        self._episode_return += rewards
        finished = dones & self.policy_rows
        for row in np.flatnonzero(finished):
            self.returns.append(float(self._episode_return[row]))
            if "win" in infos:
                self.wins.append(float(infos["win"][row]))
            self.episodes += 1
        self._episode_return[dones] = 0.0
