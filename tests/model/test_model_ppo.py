"""PPO: GAE against a hand computation, chunking, gamma from a horizon, refusing bad updates."""

import numpy as np
import pytest
import torch

from five_actors.config import load_config
from five_actors.errors import ConfigError, ModelError
from five_actors.model.config import PPOConfig
from five_actors.model.policy import Policy
from five_actors.model.ppo import PPO, Chunks, chunk, gae
from five_actors.model.spec import ModelSpec
from tests.model.conftest import random_inputs


def test_gae_matches_a_hand_computed_example() -> None:
    gamma, lam = 0.5, 0.5
    rewards = torch.tensor([[1.0], [0.0], [2.0]])
    values = torch.tensor([[0.5], [1.0], [0.0]])
    dones = torch.tensor([[False], [True], [False]])
    last_value = torch.tensor([4.0])
    # t=2: delta = 2 + 0.5*4 - 0 = 4; adv = 4
    # t=1: episode ends here: delta = 0 - 1 = -1; adv = -1 (nothing after a done)
    # t=0: delta = 1 + 0.5*1.0 - 0.5 = 1; adv = 1 + 0.25 * (-1) = 0.75
    advantages, returns = gae(rewards, values, dones, last_value, gamma, lam)
    torch.testing.assert_close(advantages, torch.tensor([[0.75], [-1.0], [4.0]]))
    torch.testing.assert_close(returns, torch.tensor([[1.25], [0.0], [4.0]]))


def test_chunk_puts_chunk_k_of_row_n_at_column_k_times_rows_plus_n() -> None:
    steps, rows = 8, 3
    rollout = torch.arange(steps * rows).reshape(steps, rows)
    chunks = chunk(rollout, 4)
    assert chunks.shape == (4, 6)
    assert chunks[:, 1 * rows + 2].tolist() == rollout[4:8, 2].tolist()
    with pytest.raises(ModelError, match="does not split into chunks of 3"):
        chunk(rollout, 3)


def test_gamma_comes_from_the_horizon_in_seconds() -> None:
    config = PPOConfig(horizon_seconds=180.0)
    assert config.gamma(0.133) == pytest.approx(1 - 0.133 / 180)
    with pytest.raises(ValueError, match="seconds_per_step"):
        config.gamma(200.0)


def test_ppo_config_is_validated_by_the_loader(tmp_path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[ppo]\nclip = -0.1\n")
    with pytest.raises(ConfigError, match="ppo: clip must be positive"):
        load_config(path)
    path.write_text("[ppo]\nkl_stop = -0.01\n")
    with pytest.raises(ConfigError, match="ppo: kl_stop must not be negative"):
        load_config(path)
    path.write_text("[model]\nlstm_size = 4096\ndevice = 'cuda:1'\n")
    config = load_config(path)
    assert config.model.lstm_size == 4096 and config.baseline.epochs == 4
    path.write_text("[ppo]\nepochs = 2\n")  # the baseline's key, where it used to be: refused, not ignored
    with pytest.raises(ConfigError, match=r"ppo.epochs: unknown key"):
        load_config(path)


def _batch(spec: ModelSpec, policy: Policy, steps: int = 16, count: int = 6) -> Chunks:
    rng = np.random.default_rng(0)
    obs, masks = zip(*(random_inputs(spec, count, rng) for _ in range(steps)))
    obs_t = torch.as_tensor(np.stack(obs))
    masks_t = {k: torch.as_tensor(np.stack([m[k] for m in masks])) for k in masks[0]}
    out = policy.act(
        obs_t.reshape(steps * count, -1),
        {k: v.reshape(steps * count, *v.shape[2:]) for k, v in masks_t.items()},
        policy.initial_state(steps * count),
    )
    shape = lambda x: x.reshape(steps, count, *x.shape[1:])  # noqa: E731
    rewards = torch.as_tensor(rng.normal(size=(steps, count)), dtype=torch.float32)
    zeros = torch.zeros(steps, count, dtype=torch.bool)
    values = shape(out.value)
    advantages, returns = gae(rewards, values, zeros, torch.zeros(count), 0.99, 0.95)
    return Chunks(
        obs_t,
        masks_t,
        shape(out.actions),
        shape(out.logp),
        values,
        rewards,
        zeros,
        zeros,
        advantages,
        returns,
        policy.initial_state(count),
    )


def test_an_update_moves_the_policy_and_its_first_ratio_is_one(policy: Policy, spec: ModelSpec) -> None:
    ppo = PPO(policy, PPOConfig())
    batch = _batch(spec, policy)
    _, stats = ppo.loss(batch)
    assert stats["approx_kl"] == pytest.approx(0.0, abs=1e-6) and stats["clip_fraction"] == 0.0
    before = [p.detach().clone() for p in policy.parameters()]
    ppo.update(batch, epochs=1, minibatches=1)
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.parameters()))
    assert policy.norms["enemies"].count > 0 and ppo.updates == 1


def test_adam_runs_fused_also_when_resumed_from_a_state_saved_unfused(policy: Policy, spec: ModelSpec) -> None:
    """The learner's Adam is fused (one kernel over every parameter, 4x faster a step here); a state saved unfused (a
    checkpoint from before, the parameter store's optimiser) resumes its moments and step count, and stays fused."""
    batch = _batch(spec, policy)
    ppo = PPO(policy, PPOConfig())
    assert all(group["fused"] for group in ppo.optimizer.param_groups)
    ppo.step(batch)
    saved = ppo.optimizer.state_dict()
    for group in saved["param_groups"]:
        group["fused"] = None
    resumed = PPO(policy, PPOConfig())
    resumed.optimizer.load_state_dict(saved)
    assert all(group["fused"] and not group["foreach"] for group in resumed.optimizer.param_groups)
    resumed.step(batch)
    steps = {float(state["step"]) for state in resumed.optimizer.state.values()}
    assert steps == {2.0}


def test_a_policy_acting_between_its_updates_acts_on_the_updated_weights(spec: ModelSpec) -> None:
    """The synchronous baseline acts and trains one policy. In bf16 acting keeps lowered copies of the weights until
    they change; the fused Adam's step must count as a change (it writes the weights without telling autograd)."""
    torch.manual_seed(3)
    policy = Policy(spec, "bf16")
    batch = _batch(spec, policy)  # acting keeps the lowered copies here
    PPO(policy, PPOConfig(learning_rate=1e-2)).step(batch)
    built = Policy(spec, "bf16")
    built.load_state_dict(policy.state_dict())
    obs, masks = random_inputs(spec, 16, np.random.default_rng(4))
    state = policy.initial_state(16)
    a, b = policy.act(obs, masks, state, deterministic=True), built.act(obs, masks, state, deterministic=True)
    torch.testing.assert_close(a.logp, b.logp, rtol=0, atol=0)
    torch.testing.assert_close(a.value, b.value, rtol=0, atol=0)


def test_kl_stop_skips_the_steps_once_the_policy_has_moved_that_far_from_the_acting_one(
    policy: Policy, spec: ModelSpec
) -> None:
    batch = _batch(spec, policy)
    ppo = PPO(policy, PPOConfig(kl_stop=1e-5, learning_rate=1e-2))
    first = ppo.step(batch)  # the acting policy is this one: KL 0, the step is taken
    assert first["kl_stopped"] == 0.0 and ppo.updates == 1
    moved = [p.detach().clone() for p in policy.parameters()]
    second = ppo.step(batch)
    assert second["approx_kl"] > 1e-5 and second["kl_stopped"] == 1.0 and ppo.updates == 1
    assert all(torch.equal(a, b) for a, b in zip(moved, policy.parameters()))
    ppo = PPO(policy, PPOConfig(learning_rate=1e-2))  # kl_stop 0: never stops
    assert ppo.step(batch)["kl_stopped"] == 0.0 and ppo.updates == 1


def test_nan_in_a_loss_term_skips_the_update_and_names_the_term(policy: Policy, spec: ModelSpec) -> None:
    ppo = PPO(policy, PPOConfig())
    batch = _batch(spec, policy)
    with torch.no_grad():
        policy.value_head.bias.fill_(float("nan"))
    before = [p.detach().clone() for p in policy.parameters()]
    with pytest.raises(ModelError, match="loss term 'value' is nan: update skipped"):
        ppo.update(batch, epochs=1, minibatches=1)
    assert all(torch.equal(a, b) or torch.isnan(a).any() for a, b in zip(before, policy.parameters()))
    assert ppo.updates == 0


def test_a_batch_with_nan_rewards_is_refused(policy: Policy, spec: ModelSpec) -> None:
    ppo = PPO(policy, PPOConfig())
    batch = _batch(spec, policy)
    batch.advantages[3, 2] = float("inf")
    with pytest.raises(ModelError, match="advantages of the batch hold NaN or inf"):
        ppo.update(batch, epochs=4, minibatches=4)
    assert ppo.updates == 0
