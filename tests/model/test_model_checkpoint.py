"""Checkpoints: exact round trip; truncated, corrupt and mismatched files refused."""

from pathlib import Path

import numpy as np
import pytest
import torch

from five_actors.errors import CheckpointError
from five_actors.model.checkpoint import load_into, read_checkpoint, save_checkpoint
from five_actors.model.config import PPOConfig
from five_actors.model.policy import Policy
from five_actors.model.ppo import PPO
from tests.model.conftest import make_spec, random_inputs
from tests.model.test_model_ppo import _batch


@pytest.fixture
def trained(policy: Policy, spec) -> PPO:
    ppo = PPO(policy, PPOConfig())
    ppo.update(_batch(spec, policy), epochs=1, minibatches=2)
    return ppo


def test_round_trip_is_exact(tmp_path: Path, trained: PPO, spec) -> None:
    path = tmp_path / "ckpt" / "latest.ckpt"
    save_checkpoint(path, trained.policy, trained.optimizer, {"version": 7, "updates": trained.updates})
    assert [p.name for p in path.parent.iterdir()] == ["latest.ckpt"]
    checkpoint = read_checkpoint(path, expect=spec)
    fresh = Policy(checkpoint.spec)
    fresh_ppo = PPO(fresh, PPOConfig())
    load_into(checkpoint, fresh, fresh_ppo.optimizer)
    assert checkpoint.counters == {"version": 7, "updates": 2}
    for (name, a), (_, b) in zip(trained.policy.state_dict().items(), fresh.state_dict().items()):
        assert torch.equal(a, b), name
    assert fresh.norms["enemies"].count == trained.policy.norms["enemies"].count > 0
    opt_a, opt_b = trained.optimizer.state_dict(), fresh_ppo.optimizer.state_dict()
    for key in opt_a["state"]:
        assert torch.equal(opt_a["state"][key]["exp_avg_sq"], opt_b["state"][key]["exp_avg_sq"])
    obs, masks = random_inputs(spec, 8, np.random.default_rng(0))
    torch.manual_seed(3)
    a = trained.policy.act(obs, masks, trained.policy.initial_state(8))
    torch.manual_seed(3)
    b = fresh.act(obs, masks, fresh.initial_state(8))
    assert torch.equal(a.actions, b.actions) and torch.equal(a.logp, b.logp)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: d[: len(d) // 2], "truncated or padded"),
        (lambda d: d[:20], "truncated"),
        (lambda d: d + b"\0", "truncated or padded"),
        (lambda d: d[:-100] + bytes([d[-100] ^ 1]) + d[-99:], "corrupt: the sha256 checksum does not match"),
        (lambda d: b"X" + d[1:], "not a five-actors checkpoint"),
        (lambda d: b"", "not a five-actors checkpoint"),
    ],
)
def test_damaged_files_are_refused_and_nothing_is_loaded(
    tmp_path: Path, trained: PPO, spec, damage, message: str
) -> None:
    path = tmp_path / "a.ckpt"
    save_checkpoint(path, trained.policy, trained.optimizer)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CheckpointError, match=message):
        read_checkpoint(path)


def test_a_checkpoint_for_another_architecture_is_refused(tmp_path: Path, trained: PPO) -> None:
    path = tmp_path / "a.ckpt"
    save_checkpoint(path, trained.policy)
    wider = make_spec(lstm_size=32)
    with pytest.raises(CheckpointError, match="lstm_size 16 != 32"):
        read_checkpoint(path, expect=wider)
    other = Policy(wider)
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(CheckpointError, match="does not match the policy's"):
        load_into(read_checkpoint(path), other)
    assert all(torch.equal(before[k], v) for k, v in other.state_dict().items())
    with pytest.raises(CheckpointError, match="holds no optimizer state"):
        load_into(read_checkpoint(path), Policy(trained.policy.spec), trained.optimizer)


def test_a_missing_file_is_a_checkpoint_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="cannot read"):
        read_checkpoint(tmp_path / "none.ckpt")
