"""Each surgery keeps the model's behaviour on real games, maps Adam's state, and refuses what it cannot do."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from five_actors.errors import SurgeryRejected
from five_actors.game.layout import project_masks, project_obs
from five_actors.game.spec import action_spec, obs_spec
from five_actors.surgery.ops import SurgeryOp, apply, grow_lstm_state, parse_ops
from five_actors.surgery.state import ModelState
from five_actors.surgery.verify import Probes, verify

PRESERVING = [
    "add-observation self.kills enemies.items",
    "add-observation all",
    "widen-lstm 48",
    "widen-layer entity_hidden 24",
    "widen-layer entity_embed 20",
    "widen-layer core_input 40",
    "add-action blink move",
    "add-hero zed",
    "add-unit-type creeps siege",
    "game-version 2",
    "game-version 2 + widen-lstm 64 + widen-layer entity_embed 24 + add-hero zed",
]


def ops(text: str) -> list[SurgeryOp]:
    return parse_ops(text.split())


@pytest.mark.parametrize("surgery", PRESERVING)
def test_operation_preserves_outputs_on_recorded_games(
    surgery: str, trained: ModelState, probes_v1: Probes, probes_v2: Probes
) -> None:
    new = apply(ops(surgery), trained)
    assert new.spec.hash != trained.spec.hash
    new.build_policy()  # loads strictly
    for probes in (probes_v1, probes_v2):
        result = verify(trained, new, probes)
        assert result.max_prob_diff <= 1e-6 and result.max_value_diff <= 1e-6
        assert set(result.head_diffs) == {"type", "move", "target"}


def test_verification_catches_a_change_of_behaviour(trained: ModelState, probes_v1: Probes) -> None:
    new = apply(ops("widen-lstm 48"), trained)
    params = dict(new.params)
    weight = params["type_head.weight"].clone()
    weight[1, 40] = 5.0  # a new unit now drives the move logit (legal for every living hero)
    params["type_head.weight"] = weight
    broken = ModelState(new.spec, params, new.optimizer, new.anneal)
    with pytest.raises(SurgeryRejected, match=r"max probability difference .*head 'type'"):
        verify(trained, broken, probes_v1)


def test_verification_refuses_a_model_that_outputs_nan(trained: ModelState, probes_v1: Probes) -> None:
    new = apply(ops("widen-lstm 48"), trained)
    params = dict(new.params)
    params["value_head.bias"] = torch.full_like(params["value_head.bias"], float("nan"))
    with pytest.raises(SurgeryRejected, match="max value difference nan"):
        verify(trained, ModelState(new.spec, params, new.optimizer, new.anneal), probes_v1)


def test_new_units_get_small_random_inputs_and_zero_outputs(trained: ModelState) -> None:
    new = apply(ops("widen-lstm 48"), trained)
    hh = new.params["lstm.weight_hh"]
    new_rows = torch.cat([torch.arange(g * 48 + 32, g * 48 + 48) for g in range(4)])
    old_rows = torch.cat([torch.arange(g * 48, g * 48 + 32) for g in range(4)])
    assert 0 < hh[new_rows].abs().max() < 0.1
    assert hh[old_rows][:, 32:].abs().max() == 0
    assert new.params["value_head.weight"][:, 32:].abs().max() == 0
    h, c = grow_lstm_state((torch.ones(3, 32), torch.ones(3, 32)), 48)
    assert h.shape == (3, 48) and h[:, 32:].abs().max() == 0 and c[:, :32].min() == 1


def test_add_observation_extends_the_normaliser_neutrally(trained: ModelState) -> None:
    new = apply(ops("add-observation self.kills"), trained)
    at = new.spec.obs.block("self").features.index("kills")
    old_mean, new_mean = trained.params["norms.self.mean"], new.params["norms.self.mean"]
    assert new_mean[at] == 0 and new.params["norms.self.var"][at] == 1
    assert torch.equal(torch.cat([new_mean[:at], new_mean[at + 1 :]]), old_mean)
    assert new.params["norms.self.count"] == trained.params["norms.self.count"] > 0
    assert new.params["encoders.self.0.weight"][:, at].abs().max() == 0


def test_adam_moments_carried_for_old_entries_and_zero_for_new(trained: ModelState) -> None:
    new = apply(ops("game-version 2 + widen-lstm 48"), trained)
    assert trained.optimizer is not None and new.optimizer is not None
    old_state, new_state = trained.optimizer["state"], new.optimizer["state"]
    index = {name: i for i, name in enumerate(n for n, _ in new.build_policy().named_parameters())}
    hh_old, hh_new = old_state[index["lstm.weight_hh"]], new_state[index["lstm.weight_hh"]]
    old_rows = torch.cat([torch.arange(g * 48, g * 48 + 32) for g in range(4)])
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(hh_new[key][old_rows][:, :32], hh_old[key])
        rest = hh_new[key].clone()
        rest[old_rows.unsqueeze(1), torch.arange(32)] = 0.0
        assert rest.abs().max() == 0
    assert torch.equal(hh_new["step"], hh_old["step"])
    types_old, types_new = old_state[index["type_head.weight"]], new_state[index["type_head.weight"]]
    assert torch.equal(types_new["exp_avg"][:6, :32], types_old["exp_avg"])
    assert types_new["exp_avg"][6].abs().max() == 0 and types_new["exp_avg"][:, 32:].abs().max() == 0
    assert new.optimizer["param_groups"][0]["lr"] == trained.optimizer["param_groups"][0]["lr"]


def test_one_adam_step_after_surgery_moves_old_weights_as_before(
    trained: ModelState, probes_v1: Probes, loss_of_chunk: Callable[..., torch.Tensor]
) -> None:
    new = apply(ops("widen-lstm 48 + add-observation self.kills + add-action blink"), trained)
    after = {}
    for state in (trained, new):
        policy = state.build_policy()
        optimizer = torch.optim.Adam(policy.parameters())
        optimizer.load_state_dict(dict(state.optimizer or {}))
        obs = torch.as_tensor(project_obs(probes_v1.obs[8:16], probes_v1.obs_spec, state.spec.obs))
        masks = project_masks(probes_v1.masks, probes_v1.action_spec, state.spec.actions)
        loss = loss_of_chunk(
            policy,
            obs,
            {k: torch.as_tensor(v[8:16]) for k, v in masks.items()},
            torch.as_tensor(probes_v1.starts[8:16]),
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        after[state.spec.hash] = dict(policy.named_parameters())
    old, grown = after[trained.spec.hash], after[new.spec.hash]
    for name, p in old.items():
        q = grown[name]
        region = q[tuple(slice(0, s) for s in p.shape)]
        if name.startswith("lstm."):
            continue  # gate blocks are interleaved; checked below
        if name == "encoders.self.0.weight":
            at = new.spec.obs.block("self").features.index("kills")
            region = torch.cat([q[:, :at], q[:, at + 1 :]], dim=1)
        torch.testing.assert_close(region, p, atol=1e-6, rtol=0, msg=name)
    old_rows = torch.cat([torch.arange(g * 48, g * 48 + 32) for g in range(4)])
    torch.testing.assert_close(grown["lstm.weight_hh"][old_rows][:, :32], old["lstm.weight_hh"], atol=1e-6, rtol=0)
    torch.testing.assert_close(grown["lstm.bias_ih"][old_rows], old["lstm.bias_ih"], atol=1e-6, rtol=0)


def test_v1_model_carried_to_v2_plays_v2_observations_like_before(trained: ModelState, probes_v2: Probes) -> None:
    new = apply(ops("game-version 2"), trained)
    assert new.spec.obs == obs_spec(2) and new.spec.actions == action_spec(2)
    assert new.anneal == {"recall": 0.0}
    old_policy, new_policy = trained.build_policy(), new.build_policy()
    old_obs = torch.as_tensor(project_obs(probes_v2.obs, probes_v2.obs_spec, trained.spec.obs))
    old_masks = project_masks(probes_v2.masks, probes_v2.action_spec, trained.spec.actions)
    # The game side masks recall while its anneal share is 0.
    new_masks = project_masks(old_masks, trained.spec.actions, new.spec.actions)
    new_obs = torch.as_tensor(probes_v2.obs)
    states = [old_policy.initial_state(probes_v2.rows), new_policy.initial_state(probes_v2.rows)]
    for t in range(probes_v2.steps):
        a = old_policy.act(
            old_obs[t], {k: torch.as_tensor(v[t]) for k, v in old_masks.items()}, states[0], deterministic=True
        )
        b = new_policy.act(
            new_obs[t], {k: torch.as_tensor(v[t]) for k, v in new_masks.items()}, states[1], deterministic=True
        )
        assert torch.equal(a.actions, b.actions)
        torch.testing.assert_close(a.value, b.value, atol=1e-5, rtol=1e-6)
        states = [a.state, b.state]


@pytest.mark.parametrize(
    ("surgery", "reason"),
    [
        ("widen-lstm 16", "removal is not supported"),
        ("widen-lstm 40", "already 40"),
        ("widen-layer entity_hidden 8", "removal is not supported"),
        ("widen-layer pointer_key 16", "attention scale"),
        ("widen-layer trunk 64", "unknown layer 'trunk'"),
        ("remove-observation self.gold", "removal is not supported"),
        ("transplant 3", "unknown operation 'transplant'"),
        ("add-observation self.mana_regen", "game version 2 has no feature 'mana_regen' in block 'self'"),
        ("add-observation self.gold", "already has feature 'gold'"),
        ("add-action attack", "already exists"),
        ("add-action blink teleport", "unknown action head 'teleport'"),
        ("game-version 1", "already at game version 1"),
        ("game-version 3", "unknown game version 3"),
        ("game-version 2 + game-version 1", "removal is not supported"),
        ("widen-lstm lots", "size must be an integer"),
        ("game-size 3 3", "plays 5 heroes a side on 3 lane.*removal is not supported"),
        ("game-size 5 3", "already plays 5 heroes a side on 3 lane"),
        ("game-size 6 4", "game.lanes must be 1, 2 or 3, got 4"),
        ("game-size 6", "expected HEROES LANES"),
    ],
)
def test_refused_surgery_says_why_and_changes_nothing(surgery: str, reason: str, trained: ModelState) -> None:
    before = {k: v.clone() for k, v in trained.params.items()}
    moments = {i: {k: v.clone() for k, v in e.items()} for i, e in (trained.optimizer or {})["state"].items()}
    with pytest.raises(SurgeryRejected, match=reason):
        apply(ops(f"widen-lstm 40 + {surgery}"), trained)
    assert all(torch.equal(before[k], v) for k, v in trained.params.items())
    assert all(
        torch.equal(moments[i][k], v) for i, e in (trained.optimizer or {})["state"].items() for k, v in e.items()
    )
    assert trained.spec.lstm_size == 32


def test_empty_and_malformed_operation_lists_are_refused(trained: ModelState) -> None:
    with pytest.raises(SurgeryRejected, match="no operations"):
        apply([], trained)
    with pytest.raises(SurgeryRejected, match="empty operation"):
        parse_ops(["widen-lstm", "48", "+"])


def test_widen_lstm_keeps_a_gaussian_heads_actions() -> None:
    """A real-valued action head reads the LSTM too: its mean must not move when new units appear."""
    import dataclasses

    import numpy as np

    from five_actors.model.policy import Policy
    from tests.model.conftest import make_spec, random_inputs

    spec = make_spec()
    spec = dataclasses.replace(spec, actions=dataclasses.replace(spec.actions, continuous=2))
    torch.manual_seed(1)
    policy = Policy(spec)
    wider = apply(ops("widen-lstm 24"), ModelState.of(policy)).build_policy()
    assert wider.mean_head.weight.shape == (2, 24)
    obs, masks = random_inputs(spec, 16, np.random.default_rng(3))
    before = policy.act(obs, masks, policy.initial_state(16), deterministic=True)
    after = wider.act(obs, masks, wider.initial_state(16), deterministic=True)
    assert torch.equal(before.actions[:, :3], after.actions[:, :3])
    real = [torch.as_tensor(out.actions[:, 3:].numpy().view(np.float64)) for out in (before, after)]
    torch.testing.assert_close(real[0], real[1])
    torch.testing.assert_close(before.logp, after.logp)
    # The verification looks at the Gaussian head too: a mean moved by 0.01 is refused.
    from five_actors.game.gymnasium_env import GymBatchEnv
    from five_actors.surgery.verify import record_env_probes
    from tests.actors.gym_factories import target

    env = GymBatchEnv(target, 2)
    small = dataclasses.replace(spec, obs=env.obs_spec, actions=env.action_spec)
    torch.manual_seed(2)
    old = ModelState.of(Policy(small))
    moved = apply(ops("widen-lstm 24"), old)
    probes = record_env_probes(env, 8)
    assert verify(old, moved, probes).preserved
    moved.params["mean_head.bias"].add_(0.01)
    with pytest.raises(SurgeryRejected, match="does not behave like the old one"):
        verify(old, moved, probes)
