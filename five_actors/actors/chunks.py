"""Rollout chunks as a GameActor makes them: the steps it buffers, and one chunk of them as a Rollout."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import torch

from five_actors.actors.messages import Rollout
from five_actors.model.ppo import gae


@dataclasses.dataclass
class StepRecord:
    """One batch step, every row: what the chunk and GAE need."""

    obs: np.ndarray
    masks: dict[str, np.ndarray]
    state: tuple[np.ndarray, np.ndarray] | None
    """The rows' LSTM state (h, c) before this step, where the step begins a chunk (else None: the inference actor
    held it)."""
    actions: np.ndarray
    logp: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    starts: np.ndarray
    versions: np.ndarray
    latest: np.ndarray
    """bool [rows]: the row played the latest policy at this step."""
    components: dict[str, np.ndarray]
    """Each reward component (the game's `reward/NAME` infos) per row."""


def build_rollout(
    chunk: list[StepRecord],
    span: list[StepRecord],
    bootstrap: StepRecord,
    rows: np.ndarray,
    gamma: float,
    lam: float,
    source: str,
    arch: str,
) -> Rollout:
    """Rows `rows` of the steps `chunk` as a Rollout, with GAE over `span` (the chunk and its window)
    from the value at `bootstrap` (the step after the span)."""
    steps = len(chunk)

    def pick(name: str, records: list[StepRecord] = chunk) -> np.ndarray:
        return np.stack([getattr(s, name)[rows] for s in records])

    rewards = torch.from_numpy(pick("rewards", span))
    values = torch.from_numpy(pick("values", span))
    dones = torch.from_numpy(pick("dones", span))
    last_value = torch.from_numpy(np.asarray(bootstrap.values[rows]))
    advantages, returns = gae(rewards, values, dones, last_value, gamma, lam)
    first = chunk[0]
    assert first.state is not None, "a chunk's first step records the rows' LSTM state"
    return Rollout(
        source=source,
        arch=arch,
        versions=first.versions[rows].astype(np.int64),
        obs=pick("obs"),
        masks={k: np.stack([s.masks[k][rows] for s in chunk]) for k in first.masks},
        actions=pick("actions"),
        logp=pick("logp").astype(np.float32),
        values=pick("values").astype(np.float32),
        rewards=pick("rewards").astype(np.float32),
        dones=pick("dones"),
        starts=pick("starts"),
        advantages=advantages[:steps].numpy().astype(np.float32),
        returns=returns[:steps].numpy().astype(np.float32),
        h=first.state[0][rows].astype(np.float32),
        c=first.state[1][rows].astype(np.float32),
        made_at=time.time(),
    )


def chunk_rewards(chunk: list[StepRecord], rows: np.ndarray) -> dict[str, float]:
    """The chunk's shaped reward (`reward`) and each component (`reward_NAME`), summed over its rows and steps."""
    totals = {"reward": round(float(sum(s.rewards[rows].sum() for s in chunk)), 6)}
    for name in chunk[0].components:
        totals[f"reward_{name}"] = round(float(sum(s.components[name][rows].sum() for s in chunk)), 6)
    return totals
