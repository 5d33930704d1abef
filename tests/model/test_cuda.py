"""The CUDA paths where a GPU is present: the policy, a PPO step, a surgery and an NCCL group on the GPU do what they
do on the CPU. Skipped on a machine without CUDA (CI among them; its CPU path is every other test).

`FIVE_ACTORS_TEST_DEVICE` names the device under test (default `cuda`); `cpu` runs these checks' own code on a
machine without a GPU, against itself.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import socket

import pytest
import torch

from five_actors.actors.group import average_gradients, broadcast_buffers, broadcast_object, join_group, leave_group
from five_actors.game.config import GameConfig
from five_actors.game.spec import action_spec, obs_spec
from five_actors.model.config import ModelConfig, PPOConfig
from five_actors.model.policy import Policy
from five_actors.model.ppo import PPO, Chunks
from five_actors.model.spec import ModelSpec
from five_actors.surgery.ops import apply, parse_ops
from five_actors.surgery.state import ModelState
from five_actors.surgery.verify import Probes, record_probes

DEVICE = torch.device(os.environ.get("FIVE_ACTORS_TEST_DEVICE", "cuda"))
pytestmark = pytest.mark.skipif(DEVICE.type == "cuda" and not torch.cuda.is_available(), reason="no CUDA device")

SMALL = ModelConfig(entity_hidden=16, entity_embed=16, core_input=24, lstm_size=32, pointer_key=8)
CLOSE = 1e-3
"""Largest difference allowed between the GPU's and the CPU's float32 results (cuDNN and cuBLAS sum in other orders,
and may use TF32)."""


@pytest.fixture(scope="module")
def probes() -> Probes:
    return record_probes(GameConfig(version=1), steps=16, games=2, seed=1)


def policy_pair(config: ModelConfig = SMALL) -> tuple[Policy, Policy]:
    """The same freshly initialised policy on the CPU and on the device under test."""
    torch.manual_seed(0)
    cpu = Policy(ModelSpec.build(obs_spec(1), action_spec(1), config))
    return cpu, copy.deepcopy(cpu).to(DEVICE)


def chunks(policy: Policy, probes: Probes) -> Chunks:
    """The probes as one minibatch on `policy`'s device, with the actions the policy chooses deterministically."""
    device = policy.device
    obs = torch.as_tensor(probes.obs, device=device)
    masks = {k: torch.as_tensor(v, device=device) for k, v in probes.masks.items()}
    steps, rows = obs.shape[:2]
    state, actions, logp, values = policy.initial_state(rows), [], [], []
    for t in range(steps):
        out = policy.act(obs[t], {k: v[t] for k, v in masks.items()}, state, deterministic=True)
        actions.append(out.actions)
        logp.append(out.logp)
        values.append(out.value)
        state = out.state
    noise = torch.Generator().manual_seed(2)
    zeros = torch.zeros(steps, rows, device=device)
    return Chunks(
        obs=obs,
        masks=masks,
        actions=torch.stack(actions),
        logp=torch.stack(logp),
        values=torch.stack(values),
        rewards=zeros,
        dones=zeros.bool(),
        starts=torch.as_tensor(probes.starts, device=device),
        advantages=torch.randn(steps, rows, generator=noise).to(device),
        returns=torch.randn(steps, rows, generator=noise).to(device),
        state=policy.initial_state(rows),
    )


def moved(mb: Chunks) -> Chunks:
    """`mb` on the device under test."""
    tensors = {k: v.to(DEVICE) for k, v in vars(mb).items() if isinstance(v, torch.Tensor)}
    masks = {k: v.to(DEVICE) for k, v in mb.masks.items()}
    h, c = mb.state
    return dataclasses.replace(mb, **tensors, masks=masks, state=(h.to(DEVICE), c.to(DEVICE)))


def scores(policy: Policy, mb: Chunks) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probability, entropy and value of `mb`'s actions under `policy`, from its zero state."""
    return policy.evaluate(mb.obs, mb.masks, mb.actions, mb.starts, policy.initial_state(mb.obs.shape[1]))


def largest_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().float().cpu() - b.detach().float().cpu()).abs().max())


def test_the_policy_on_the_gpu_chooses_and_scores_as_on_the_cpu(probes: Probes) -> None:
    cpu, gpu = policy_pair()
    on_cpu, on_gpu = chunks(cpu, probes), chunks(gpu, probes)
    assert on_gpu.actions.device.type == DEVICE.type
    # A fresh policy's logits are nearly level, so a rare greedy choice may fall the other way in the last bit.
    assert (on_cpu.actions == on_gpu.actions.cpu()).float().mean() >= 0.99
    assert largest_difference(on_cpu.values, on_gpu.values) < CLOSE
    for a, b in zip(scores(cpu, on_cpu), scores(gpu, moved(on_cpu)), strict=True):
        assert largest_difference(a, b) < CLOSE


def test_a_ppo_step_on_the_gpu_takes_the_cpus_step(probes: Probes) -> None:
    cpu, gpu = policy_pair()
    mb = chunks(cpu, probes)
    config = PPOConfig()
    stats_cpu = PPO(cpu, config).step(mb)
    stats_gpu = PPO(gpu, config).step(moved(mb))
    for name in ("policy_loss", "value_loss", "entropy", "grad_norm"):
        assert abs(stats_cpu[name] - stats_gpu[name]) < CLOSE * max(1.0, abs(stats_cpu[name])), name
    assert all(bool(torch.isfinite(p).all()) for p in gpu.parameters())
    # After one Adam step (about learning_rate per weight) the two still score alike.
    for a, b in zip(scores(cpu, mb), scores(gpu, moved(mb)), strict=True):
        assert largest_difference(a, b) < 10 * CLOSE


def test_a_surgery_on_gpu_parameters_stays_on_the_gpu_and_keeps_what_the_policy_does(probes: Probes) -> None:
    cpu, gpu = policy_pair()
    mb = moved(chunks(cpu, probes))
    optimizer = torch.optim.Adam(gpu.parameters(), lr=1e-3)
    torch.stack([t.float().mean() for t in scores(gpu, mb)]).sum().backward()
    optimizer.step()  # Adam's moments exist, on the GPU
    old = ModelState.of(gpu, optimizer)
    new = apply(parse_ops(["widen-lstm", "48", "+", "widen-layer", "entity_embed", "24"]), old)
    assert {t.device.type for t in new.params.values()} == {DEVICE.type}
    widened = new.build_policy(DEVICE)
    assert widened.spec.lstm_size == 48
    for a, b in zip(scores(old.build_policy(DEVICE), mb), scores(widened, mb), strict=True):
        assert largest_difference(a, b) < 1e-5


def test_a_learner_group_of_one_rank_allreduces_and_broadcasts_on_the_gpu() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _, gpu = policy_pair()
    for p in gpu.parameters():
        p.grad = torch.full_like(p, 0.5)
    join_group("127.0.0.1", port, 0, 1, DEVICE, timeout_s=60)
    try:
        finite, kl = average_gradients(gpu, True, 0.25, world_size=1)
        assert finite and kl == pytest.approx(0.25)
        assert all(p.grad is not None and bool((p.grad == 0.5).all()) for p in gpu.parameters())
        broadcast_buffers(gpu)
        assert broadcast_object({"version": 7}, DEVICE) == {"version": 7}
    finally:
        leave_group()
