"""The synchronous baseline learns: a short CartPole run improves the return a lot."""

import torch

from five_actors.game.gymnasium_env import GymBatchEnv
from five_actors.model.baseline import Progress, SyncTrainer
from five_actors.model.config import BaselineConfig, ModelConfig, PPOConfig
from five_actors.model.policy import Policy
from five_actors.model.spec import ModelSpec


def test_a_short_cartpole_run_improves_the_return() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a small model on a shared machine: more threads only contend
    env = GymBatchEnv("CartPole-v1", 8, seed=0)
    policy = Policy(ModelSpec.build(env.obs_spec, env.action_spec, ModelConfig(lstm_size=32)))
    config = PPOConfig(learning_rate=1e-3, horizon_seconds=2.0)  # gamma 0.99 at 50 steps/s
    loop = BaselineConfig()
    trainer = SyncTrainer(env, policy, config, loop, 16, config.gamma(env.seconds_per_step))
    reports: list[Progress] = []
    trainer.train(16_000, reports.append)
    first, last = reports[0], reports[-1]
    assert last.steps >= 16_000 and last.updates == len(reports) * loop.epochs * loop.minibatches
    assert first.mean_return is not None and first.mean_return < 40  # random play
    assert last.mean_return is not None and last.mean_return > 120, [r.mean_return for r in reports]


def test_an_episode_cut_by_a_time_limit_is_bootstrapped_from_its_last_observation() -> None:
    import gymnasium as gym
    import numpy as np

    env = GymBatchEnv(lambda: gym.make("CartPole-v1", max_episode_steps=5), 2, seed=3)
    spec = ModelSpec.build(
        env.obs_spec, env.action_spec, ModelConfig(lstm_size=8, core_input=8, entity_hidden=8, entity_embed=8)
    )
    torch.manual_seed(0)
    policy = Policy(spec)
    with torch.no_grad():
        policy.value_head.bias.fill_(10.0)  # a clearly non-zero value everywhere
    trainer = SyncTrainer(env, policy, PPOConfig(), BaselineConfig(rollout_chunks=1), chunk_steps=5, gamma=0.9)
    chunks = trainer.collect()
    rewards = chunks.rewards.reshape(-1, 2)  # the 5 steps of each copy: the 5th is cut by the time limit
    assert bool(chunks.dones.reshape(-1, 2)[4].all())
    assert np.allclose(rewards[:4].numpy(), 1.0)
    # CartPole's reward 1, plus gamma times the value of the last observation (about 10 from the head's bias).
    assert ((rewards[4] - 1.0) / 0.9 > 5.0).all(), rewards[4]


def test_a_gaussian_head_learns_a_real_valued_action() -> None:
    """The policy must answer the observed target with a real value: random play scores about -21 an episode."""
    from tests.actors.gym_factories import target

    torch.manual_seed(0)
    torch.set_num_threads(1)
    env = GymBatchEnv(target, 8, seed=0)
    assert env.action_spec.continuous == 1
    policy = Policy(ModelSpec.build(env.obs_spec, env.action_spec, ModelConfig(core="mlp", lstm_size=32)))
    config = PPOConfig(learning_rate=3e-3, horizon_seconds=2.0, entropy_coef=0.0)
    trainer = SyncTrainer(env, policy, config, BaselineConfig(), 16, 0.5)
    reports: list[Progress] = []
    trainer.train(24_000, reports.append)
    first, last = reports[0].mean_return, reports[-1].mean_return
    assert first is not None and first < -12, first
    assert last is not None and last > -6, [round(r.mean_return or 0, 1) for r in reports]
    assert policy.log_std.exp().item() < 0.7  # it grew surer of its answers
