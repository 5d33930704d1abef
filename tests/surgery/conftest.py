"""Fixtures for surgery tests: a small trained model and probes recorded from real lane games."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from five_actors.game.config import GameConfig
from five_actors.game.spec import action_spec, obs_spec
from five_actors.model.config import ModelConfig
from five_actors.model.policy import Policy
from five_actors.model.spec import ModelSpec
from five_actors.surgery.state import ModelState
from five_actors.surgery.verify import Probes, record_probes

SMALL = ModelConfig(entity_hidden=16, entity_embed=16, core_input=24, lstm_size=32, pointer_key=8)
PROBE_STEPS = 40


@pytest.fixture(scope="session", autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def probes_v1() -> Probes:
    return record_probes(GameConfig(version=1), steps=PROBE_STEPS, games=1, seed=1)


@pytest.fixture(scope="session")
def probes_v2() -> Probes:
    return record_probes(GameConfig(version=2), steps=PROBE_STEPS, games=1, seed=2)


def train_briefly(policy: Policy, optimizer: torch.optim.Optimizer, probes: Probes, steps: int = 2) -> None:
    """A few Adam steps on a loss over the probes, so parameters, moments and normaliser stats are not at their init."""
    obs = torch.as_tensor(probes.obs[:8])
    masks = {k: torch.as_tensor(v[:8]) for k, v in probes.masks.items()}
    policy.update_normalizer(obs)
    for _ in range(steps):
        loss = chunk_loss(policy, obs, masks, torch.as_tensor(probes.starts[:8]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def chunk_loss(policy: Policy, obs: torch.Tensor, masks: dict[str, torch.Tensor], starts: torch.Tensor) -> torch.Tensor:
    """Log-likelihood of the most likely legal actions plus entropy and value terms over a [T, B] chunk."""
    steps, rows = obs.shape[:2]
    with torch.no_grad():
        state = policy.initial_state(rows)
        actions = []
        for t in range(steps):
            out = policy.act(obs[t], {k: v[t] for k, v in masks.items()}, state, deterministic=True)
            actions.append(out.actions)
            state = out.state
    logp, entropy, value = policy.evaluate(obs, masks, torch.stack(actions), starts, policy.initial_state(rows))
    return -logp.mean() - 0.01 * entropy.mean() + (value - 1.0).square().mean()


@pytest.fixture(scope="session")
def loss_of_chunk() -> Callable[[Policy, torch.Tensor, dict[str, torch.Tensor], torch.Tensor], torch.Tensor]:
    """`chunk_loss`, for tests that take one optimiser step by hand."""
    return chunk_loss


@pytest.fixture(scope="session")
def trained(probes_v1: Probes) -> ModelState:
    """A v1 model and its Adam state after a few steps."""
    torch.manual_seed(0)
    policy = Policy(ModelSpec.build(obs_spec(1), action_spec(1), SMALL))
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    train_briefly(policy, optimizer, probes_v1)
    return ModelState.of(policy, optimizer)
