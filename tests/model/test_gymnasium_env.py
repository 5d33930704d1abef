"""The gymnasium adapter: layouts, auto-reset with episode returns, unsupported spaces, bad actions."""

import gymnasium as gym
import numpy as np
import pytest

from five_actors.errors import GameError
from five_actors.game.gymnasium_env import GymBatchEnv
from five_actors.game.layout import encode_continuous


def test_cartpole_is_one_self_block_and_a_type_head() -> None:
    env = GymBatchEnv("CartPole-v1", 3, seed=1)
    assert [(b.name, b.slots, b.width) for b in env.obs_spec.blocks] == [("self", 1, 4)]
    assert env.action_spec.types == ("a0", "a1") and env.action_spec.heads == ()
    assert env.seconds_per_step == pytest.approx(0.02)
    obs, masks = env.reset()
    assert obs.shape == (3, 4) and obs.dtype == np.float32
    assert masks["type"].all() and masks["type"].shape == (3, 2)


def test_episodes_reset_automatically_and_report_their_return() -> None:
    env = GymBatchEnv("CartPole-v1", 2, seed=0)
    env.reset()
    totals, finished = np.zeros(2), []
    for _ in range(300):
        step = env.step(np.ones((2, 1), np.int64))  # always push right: episodes end fast
        totals += step.rewards
        for row in np.flatnonzero(step.dones):
            assert step.infos["episode_return"][row] == totals[row] == step.infos["episode_length"][row]
            assert abs(step.obs[row, 2]) < 0.06  # the next episode's first observation: upright
            finished.append(totals[row])
            totals[row] = 0
    assert len(finished) > 10 and all(r < 50 for r in finished)


class _Grid(gym.Env):
    """A toy env with a MultiDiscrete action space (dims 3, 2, 4) starting at 1."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32)
    action_space = gym.spaces.MultiDiscrete([3, 2, 4], start=[1, 1, 1])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.last = None
        return np.zeros((2, 2), np.float32), {}

    def step(self, action):
        self.last = action
        return np.ones((2, 2), np.float32), float(sum(action)), True, False, {}


def test_multidiscrete_becomes_a_type_head_and_secondary_heads() -> None:
    env = GymBatchEnv(_Grid, 2)
    assert env.action_spec.types == ("a0", "a1", "a2")
    assert [(h.name, h.size) for h in env.action_spec.heads] == [("head1", 2), ("head2", 4)]
    assert np.array(env.action_spec.uses).all()
    env.reset()
    assert env.envs[0].metadata.get("render_fps") is None and env.seconds_per_step == 1.0
    masks = env.reset()[1]
    assert masks["head2"].shape == (2, 3, 4) and masks["head2"].all()
    step = env.step(np.array([[2, 1, 3], [0, 0, 0]]))
    assert step.rewards.tolist() == [9.0, 3.0]  # start offsets added back
    assert step.dones.all() and step.infos["episode_return"].tolist() == [9.0, 3.0]


class _Steer(gym.Env):
    """A Tuple action: a Discrete(2) and a Box of two reals in [-1, 1]; the reward is what reached the env."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        assert self.action_space.contains(action), action
        choice, steer = action
        return np.zeros(2, np.float32), float(10 * choice + steer[0] + 100 * steer[1]), False, False, {}


def test_box_actions_are_real_columns_after_the_discrete_ones() -> None:
    pendulum = GymBatchEnv("Pendulum-v1", 1)
    assert pendulum.action_spec.types == ("a0",) and pendulum.action_spec.continuous == 1  # a stand-in type column
    assert pendulum.action_spec.columns == 2
    env = GymBatchEnv(_Steer, 2)
    assert env.action_spec.types == ("a0", "a1") and env.action_spec.continuous == 2
    env.reset()
    real = encode_continuous(np.array([[0.25, -0.5], [3.0, -7.0]]))  # row 1 beyond the Box: clipped to [-1, 1]
    step = env.step(np.concatenate([np.array([[1], [0]]), real], axis=1))
    assert step.rewards.tolist() == [10 + 0.25 - 50, 1 - 100]
    nan = np.concatenate([np.zeros((2, 1), np.int64), encode_continuous(np.array([[0.0, 0.0], [0.0, np.nan]]))], 1)
    with pytest.raises(GameError, match="real action value 1 of row 1 is nan"):
        env.step(nan)


def test_unsupported_spaces_are_refused_by_name() -> None:
    class _Counts(_Grid):
        action_space = gym.spaces.Box(0, 5, (2,), np.int64)

    with pytest.raises(GameError, match="action space Box.*int64.* is not supported"):
        GymBatchEnv(_Counts, 1)

    class _Text(_Grid):
        observation_space = gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.Text(4)})

    with pytest.raises(GameError, match="observation space Dict.*Text.* is not supported"):
        GymBatchEnv(_Text, 1)


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        (np.zeros((2, 2), np.int64), r"shape \(2, 2\), expected \(2, 1\)"),
        (np.zeros((2, 1), np.float32), "must be integers"),
        (np.array([[0], [2]]), "action column 0 of row 1 is 2, outside 0..1"),
    ],
)
def test_bad_actions_are_refused(actions: np.ndarray, message: str) -> None:
    env = GymBatchEnv("CartPole-v1", 2)
    env.reset()
    with pytest.raises(GameError, match=message):
        env.step(actions)
