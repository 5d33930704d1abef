"""The policy: legal sampling, masked log-probs, BPTT equivalence, state resets, bad input."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from five_actors.actors.params import load_state
from five_actors.errors import ModelError
from five_actors.game.layout import decode_continuous
from five_actors.model.config import ModelConfig
from five_actors.model.normalizer import RunningNorm
from five_actors.model.policy import FewInputsLinear, Policy, bf16_native, blank_policy
from five_actors.model.spec import ModelSpec
from tests.model.conftest import make_spec, random_inputs


def test_sampling_never_picks_an_illegal_action(policy: Policy, spec: ModelSpec) -> None:
    rng = np.random.default_rng(1)
    obs, masks = random_inputs(spec, 3000, rng)
    out = policy.act(obs, masks, policy.initial_state(3000))
    actions = out.actions.numpy()
    rows = np.arange(3000)
    assert masks["type"][rows, actions[:, 0]].all()
    uses = spec.actions.uses_array()
    for j, head in enumerate(spec.actions.heads):
        used = uses[actions[:, 0], j]
        assert masks[head.name][rows, actions[:, 0], actions[:, 1 + j]][used].all()
        assert (actions[~used, 1 + j] == 0).all()
    assert len(np.unique(actions[:, 0])) == len(spec.actions.types)


def test_deterministic_act_takes_the_most_likely_legal_type(policy: Policy, spec: ModelSpec) -> None:
    obs, masks = random_inputs(spec, 64, np.random.default_rng(2))
    masks["type"][:] = False
    masks["type"][:, 2] = True
    out = policy.act(obs, masks, policy.initial_state(64), deterministic=True)
    assert (out.actions[:, 0] == 2).all()


def test_log_prob_and_entropy_ignore_heads_the_type_does_not_use(policy: Policy, spec: ModelSpec) -> None:
    obs, masks = random_inputs(spec, 32, np.random.default_rng(3))
    masks["type"][:] = False
    masks["type"][:, 1] = True  # "move": uses direction, not target
    out = policy.act(obs, masks, policy.initial_state(32))
    seq = lambda x: torch.as_tensor(x).unsqueeze(0)  # noqa: E731
    masks_t = {k: seq(v) for k, v in masks.items()}
    starts = torch.zeros(1, 32, dtype=torch.bool)
    logp, entropy, _ = policy.evaluate(seq(obs), masks_t, out.actions.unsqueeze(0), starts, policy.initial_state(32))
    (logp.sum() + entropy.sum()).backward()
    target = policy.heads["target"]
    assert all(p.grad is None or torch.count_nonzero(p.grad) == 0 for p in target.parameters())
    assert torch.count_nonzero(policy.heads["direction"].weight.grad) > 0
    changed = out.actions.clone()
    changed[:, 2] = (changed[:, 2] + 1) % 5
    again, _, _ = policy.evaluate(seq(obs), masks_t, changed.unsqueeze(0), starts, policy.initial_state(32))
    torch.testing.assert_close(again, logp, rtol=0, atol=0)


def test_log_prob_matches_the_product_of_the_used_heads(policy: Policy, spec: ModelSpec) -> None:
    obs, masks = random_inputs(spec, 16, np.random.default_rng(4))
    masks["type"][:] = False
    masks["type"][:, 3] = True  # "cast" uses both heads
    out = policy.act(obs, masks, policy.initial_state(16))
    masks_t = {k: torch.as_tensor(v).unsqueeze(0) for k, v in masks.items()}
    logp, entropy, _ = policy.evaluate(
        torch.as_tensor(obs).unsqueeze(0),
        masks_t,
        out.actions.unsqueeze(0),
        torch.zeros(1, 16, dtype=torch.bool),
        policy.initial_state(16),
    )
    torch.testing.assert_close(logp[0], out.logp)
    assert (entropy > 0).all()


def _sequence(spec: ModelSpec, steps: int, rows: int, seed: int):
    rng = np.random.default_rng(seed)
    obs, masks = zip(*(random_inputs(spec, rows, rng) for _ in range(steps)))
    obs_t = torch.as_tensor(np.stack(obs))
    masks_t = {k: torch.as_tensor(np.stack([m[k] for m in masks])) for k in masks[0]}
    return obs_t, masks_t


def test_bptt_from_a_stored_state_equals_running_the_whole_sequence(policy: Policy, spec: ModelSpec) -> None:
    obs, masks = _sequence(spec, 32, 4, seed=5)
    state = policy.initial_state(4)
    actions, states = [], []
    for t in range(32):
        states.append(state)
        out = policy.act(obs[t], {k: v[t] for k, v in masks.items()}, state)
        actions.append(out.actions)
        state = out.state
    actions_t = torch.stack(actions)
    starts = torch.zeros(32, 4, dtype=torch.bool)
    whole = policy.evaluate(obs, masks, actions_t, starts, policy.initial_state(4))
    part = lambda x, a, b: x[a:b]  # noqa: E731
    second = policy.evaluate(
        part(obs, 16, 32),
        {k: part(v, 16, 32) for k, v in masks.items()},
        part(actions_t, 16, 32),
        starts[16:],
        states[16],
    )
    for full, chunk in zip(whole, second):
        torch.testing.assert_close(full[16:], chunk, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("core", "precision"), [("lstm", "fp32"), ("mlp", "fp32"), ("lstm", "bf16"), ("mlp", "bf16")])
def test_the_update_sees_what_acting_saw_step_by_step(spec: ModelSpec, core: str, precision: str) -> None:
    """evaluate runs the core over a whole chunk at once (one input product, resets inside); its log-probs and values
    must be those that acting one step at a time gave, across a reset at step 7 (in bfloat16 to its precision)."""
    torch.manual_seed(3)
    policy = Policy(replace(spec, core=core), precision)
    obs, masks = _sequence(spec, 16, 5, seed=9)
    starts = torch.zeros(16, 5, dtype=torch.bool)
    starts[7, 1:3] = True
    h0 = (torch.randn(5, spec.lstm_size), torch.randn(5, spec.lstm_size))
    state, actions, logps, values = h0, [], [], []
    for t in range(16):
        keep = (~starts[t]).float().unsqueeze(-1)
        out = policy.act(obs[t], {k: v[t] for k, v in masks.items()}, (state[0] * keep, state[1] * keep))
        actions.append(out.actions)
        logps.append(out.logp)
        values.append(out.value)
        state = out.state
    logp, _, value = policy.evaluate(obs, masks, torch.stack(actions), starts, h0)
    tolerance = 1e-5 if precision == "fp32" else 2e-2
    assert logp.dtype == value.dtype == torch.float32
    torch.testing.assert_close(logp, torch.stack(logps), rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(
        policy.value_norm.denormalize(value), torch.stack(values), rtol=tolerance, atol=tolerance
    )


def test_bfloat16_acts_like_fp32_and_learns_into_fp32_weights(spec: ModelSpec) -> None:
    """model.precision = "bf16": the same weights choose the same actions with log-probs near fp32's, and a PPO step
    leaves fp32 weights and state with finite gradients."""
    torch.manual_seed(4)
    full = Policy(spec)
    low = Policy(spec, "bf16")
    low.load_state_dict(full.state_dict())
    obs, masks = random_inputs(spec, 64, np.random.default_rng(2))
    state = full.initial_state(64)
    a, b = full.act(obs, masks, state, deterministic=True), low.act(obs, masks, state, deterministic=True)
    assert (a.actions[:, 0] == b.actions[:, 0]).float().mean() > 0.9
    assert b.logp.dtype == b.state[0].dtype == b.state[1].dtype == torch.float32
    torch.testing.assert_close(b.logp, a.logp, rtol=0.05, atol=0.05)
    torch.testing.assert_close(b.value, a.value, rtol=0.05, atol=0.05)

    seq, seq_masks = _sequence(spec, 8, 6, seed=3)
    taken = torch.stack(
        [low.act(seq[t], {k: v[t] for k, v in seq_masks.items()}, low.initial_state(6)).actions for t in range(8)]
    )
    out = low.evaluate(seq, seq_masks, taken, torch.zeros(8, 6, dtype=torch.bool), low.initial_state(6))
    sum(x.sum() for x in out).backward()
    assert all(p.dtype == torch.float32 for p in low.parameters())
    assert all(torch.isfinite(p.grad).all() for p in low.parameters() if p.grad is not None)
    assert low.encoders["self"][0].weight.grad is not None


def test_auto_precision_is_bfloat16_where_the_device_multiplies_it_in_hardware(spec: ModelSpec) -> None:
    """model.precision = "auto": on this CPU it acts exactly as "bf16" does where the CPU has AVX-512 BF16 or AMX, and
    exactly as "fp32" does where it has neither."""
    torch.manual_seed(7)
    auto = Policy(spec, "auto")
    native = bf16_native(torch.device("cpu"))
    assert auto.arithmetic == ("bf16" if native else "fp32")
    same = Policy(spec, auto.arithmetic)
    same.load_state_dict(auto.state_dict())
    other = Policy(spec, "fp32" if native else "bf16")
    other.load_state_dict(auto.state_dict())
    obs, masks = random_inputs(spec, 16, np.random.default_rng(7))
    state = auto.initial_state(16)
    ours = auto.act(obs, masks, state, deterministic=True)
    torch.testing.assert_close(ours.logp, same.act(obs, masks, state, deterministic=True).logp, rtol=0, atol=0)
    assert not torch.equal(ours.logp, other.act(obs, masks, state, deterministic=True).logp)
    with pytest.raises(ValueError, match="precision must be 'fp32', 'bf16' or 'auto', got 'fp16'"):
        ModelConfig(precision="fp16")  # type: ignore[arg-type]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_acting_takes_the_weights_and_statistics_as_they_are_now(spec: ModelSpec, precision: str) -> None:
    """Acting keeps its layers' lowered weights and its norms' moments from call to call instead of casting them each
    time; an optimiser's in-place step, new observation statistics or a loaded state must still show in the next act
    exactly as in a policy built with them (the inference actor acts on one policy object, in inference mode)."""
    torch.manual_seed(8)
    policy = Policy(spec, precision)
    obs, masks = random_inputs(spec, 32, np.random.default_rng(8))
    state = policy.initial_state(32)

    def same_as_built(acting: Policy) -> None:
        built = Policy(spec, precision)
        built.load_state_dict(acting.state_dict())
        a, b = acting.act(obs, masks, state, deterministic=True), built.act(obs, masks, state, deterministic=True)
        assert torch.equal(a.actions, b.actions)
        for x, y in [(a.logp, b.logp), (a.value, b.value), (a.state[0], b.state[0]), (a.state[1], b.state[1])]:
            torch.testing.assert_close(x, y, rtol=0, atol=0)

    with torch.inference_mode():
        policy.act(obs, masks, state)
    same_as_built(policy)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    policy.update_normalizer(torch.as_tensor(obs) * 3 + 1)
    same_as_built(policy)
    policy.load_state_dict(Policy(spec, precision).state_dict())
    same_as_built(policy)


def test_a_blank_policy_loaded_with_a_state_acts_exactly_like_its_source(policy: Policy, spec: ModelSpec) -> None:
    """What the inference actor and the EvalActor build for every version: no weights drawn (the random stream is
    untouched, where a drawn policy moves it), and once loaded, the source's actions, log-probs, values and state."""
    before = torch.random.get_rng_state()
    blank = blank_policy(spec)
    assert torch.equal(torch.random.get_rng_state(), before)
    Policy(spec)
    assert not torch.equal(torch.random.get_rng_state(), before)
    load_state(blank, {name: tensor.numpy() for name, tensor in policy.state_dict().items()})
    obs, masks = random_inputs(spec, 32, np.random.default_rng(5))
    state = policy.initial_state(32)
    a, b = policy.act(obs, masks, state, deterministic=True), blank.act(obs, masks, state, deterministic=True)
    assert torch.equal(a.actions, b.actions)
    for x, y in [(a.logp, b.logp), (a.value, b.value), (a.state[0], b.state[0]), (a.state[1], b.state[1])]:
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_a_done_inside_a_chunk_resets_the_state(policy: Policy, spec: ModelSpec) -> None:
    obs, masks = _sequence(spec, 16, 3, seed=6)
    actions = policy.act(
        obs.reshape(48, -1), {k: v.reshape(48, *v.shape[2:]) for k, v in masks.items()}, policy.initial_state(48)
    ).actions
    actions = actions.reshape(16, 3, -1)
    starts = torch.zeros(16, 3, dtype=torch.bool)
    starts[10] = True
    h = torch.randn(3, spec.lstm_size)
    logp, _, value = policy.evaluate(obs, masks, actions, starts, (h, torch.randn(3, spec.lstm_size)))
    fresh_logp, _, fresh_value = policy.evaluate(
        obs[10:], {k: v[10:] for k, v in masks.items()}, actions[10:], starts[10:], policy.initial_state(3)
    )
    torch.testing.assert_close(logp[10:], fresh_logp, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(value[10:], fresh_value, rtol=1e-6, atol=1e-6)
    no_reset, _, _ = policy.evaluate(
        obs, masks, actions, torch.zeros(16, 3, dtype=torch.bool), (h, torch.randn(3, spec.lstm_size))
    )
    assert not torch.allclose(no_reset[10:], fresh_logp)


def test_a_gaussian_head_scores_its_samples_as_it_drew_them(spec: ModelSpec) -> None:
    """Real-valued actions ride in the int64 columns as float64 bits; the update must read back the values acting drew
    and give them the log-probability acting gave (a normal density per dimension, added to the discrete heads')."""
    torch.manual_seed(5)
    real = replace(spec, actions=replace(spec.actions, continuous=2))
    assert real.hash != spec.hash and ModelSpec.from_dict(real.to_dict()) == real
    policy = Policy(real)
    with torch.no_grad():
        policy.log_std.copy_(torch.tensor([-1.0, 0.5]))
    obs, masks = random_inputs(real, 64, np.random.default_rng(2))
    out = policy.act(obs, masks, policy.initial_state(64))
    assert out.actions.shape == (64, real.actions.columns) == (64, 1 + 2 + 2)
    values = decode_continuous(out.actions[:, 3:].numpy())
    assert np.isfinite(values).all() and values[:, 0].std() < values[:, 1].std()  # std e^-1 against e^0.5
    logp, entropy, _ = policy.evaluate(
        torch.as_tensor(obs)[None],
        {k: torch.as_tensor(v)[None] for k, v in masks.items()},
        out.actions[None],
        torch.zeros(1, 64, dtype=torch.bool),
        policy.initial_state(64),
    )
    torch.testing.assert_close(logp[0], out.logp)
    discrete = Policy(spec)
    discrete.load_state_dict({k: v for k, v in policy.state_dict().items() if k in discrete.state_dict()})
    _, discrete_entropy, _ = discrete.evaluate(
        torch.as_tensor(obs)[None],
        {k: torch.as_tensor(v)[None] for k, v in masks.items()},
        out.actions[None, :, :3],
        torch.zeros(1, 64, dtype=torch.bool),
        policy.initial_state(64),
    )
    gaussian_entropy = 2 * (0.5 + 0.5 * np.log(2 * np.pi)) + (-1.0 + 0.5)
    torch.testing.assert_close(entropy - discrete_entropy, torch.full_like(entropy, gaussian_entropy))
    deterministic = policy.act(obs, masks, policy.initial_state(64), deterministic=True).actions[:, 3:].numpy()
    with torch.no_grad():
        h, _ = policy.core_step(policy.encode(torch.as_tensor(obs))[1], policy.initial_state(64))
        mean = policy.mean_head(h)
    torch.testing.assert_close(torch.as_tensor(decode_continuous(deterministic)).float(), mean)


def test_absent_slots_do_not_change_the_output(policy: Policy, spec: ModelSpec) -> None:
    obs, masks = random_inputs(spec, 8, np.random.default_rng(7))
    start = spec.obs.offset("enemies")
    obs[:, start : start + 12] = 0.0
    obs[:, start] = 1.0  # only enemy slot 0 present
    noisy = obs.copy()
    noisy[:, start + 4 : start + 12] = np.random.default_rng(8).normal(size=(8, 8))
    noisy[:, start + 4] = 0.0
    noisy[:, start + 8] = 0.0
    a = policy.act(obs, masks, policy.initial_state(8), deterministic=True)
    b = policy.act(noisy, masks, policy.initial_state(8), deterministic=True)
    torch.testing.assert_close(a.value, b.value)


def test_pointer_logits_and_pooling_equal_their_textbook_forms(policy: Policy, spec: ModelSpec) -> None:
    """The pointer head never forms per-slot keys and pooling never fills absent slots; both must still equal the
    scaled dot product with every slot's key and the max over present slots (0 where none is)."""
    obs, masks = random_inputs(spec, 32, np.random.default_rng(11))
    start = spec.obs.offset("creeps")
    obs[:4, start : start + spec.obs.block("creeps").size] = 0.0  # rows 0-3 see no creep
    embeddings, core_in = policy.encode(torch.as_tensor(obs))
    pooled = []
    for name, x in spec.obs.split(torch.as_tensor(obs)).items():
        if x.shape[1] == 1:
            pooled.append(embeddings[name][:, 0])
            continue
        present = (x[..., 0] > 0.5).unsqueeze(-1)
        best = embeddings[name].masked_fill(~present, -1e9).amax(dim=1)
        pooled.append(torch.where(present.any(dim=1), best, torch.zeros_like(best)))
    torch.testing.assert_close(core_in, torch.relu(policy.combine(torch.cat(pooled, dim=-1))))
    core = torch.randn(32, spec.lstm_size)
    head = policy.heads["target"]
    keys = head.key(torch.cat([embeddings["enemies"], embeddings["creeps"]], dim=1))
    textbook = torch.einsum("rk,rsk->rs", head.query(core), keys) * head.scale
    torch.testing.assert_close(policy.head_logits(core, embeddings)["target"], textbook)


def test_the_fused_core_and_few_input_layers_train_as_their_textbook_forms(
    spec: ModelSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The update runs the LSTM fused over the stretches between episode starts and takes the encoders' first layers'
    weight gradients as (x^T g)^T; every parameter's gradient must be what torch's own linear layer and the LSTM cell
    stepped one step at a time give, across starts at steps 0, 7 and 12."""
    torch.manual_seed(5)
    policy = Policy(spec)
    obs, masks = _sequence(spec, 16, 5, seed=4)
    starts = torch.zeros(16, 5, dtype=torch.bool)
    starts[0, 4] = starts[7, 1:3] = starts[12, 0] = True
    state = (torch.randn(5, spec.lstm_size), torch.randn(5, spec.lstm_size))
    actions = torch.stack([policy.act(obs[t], {k: v[t] for k, v in masks.items()}, state).actions for t in range(16)])

    def gradients() -> dict[str, torch.Tensor]:
        policy.zero_grad()
        logp, entropy, value = policy.evaluate(obs, masks, actions, starts, state)
        (logp.sum() + entropy.sum() + value.square().sum()).backward()
        return {name: p.grad.clone() for name, p in policy.named_parameters() if p.grad is not None}

    ours = gradients()

    def stepwise(core_in: torch.Tensor, keep: torch.Tensor, state: tuple) -> torch.Tensor:
        h, c = state
        outputs = []
        for t in range(core_in.shape[0]):
            h, c = policy.lstm(core_in[t], (h * keep[t], c * keep[t]))
            outputs.append(h)
        return torch.stack(outputs)

    monkeypatch.setattr(FewInputsLinear, "forward", torch.nn.Linear.forward)
    monkeypatch.setattr(policy, "core_sequence", stepwise)
    textbook = gradients()
    assert set(ours) == set(textbook) and "lstm.weight_hh" in ours and "encoders.enemies.0.weight" in ours
    for name in ours:
        torch.testing.assert_close(ours[name], textbook[name], rtol=1e-4, atol=1e-6, msg=name)


def test_finite_observations_whose_sum_overflows_are_accepted(policy: Policy, spec: ModelSpec) -> None:
    """The finiteness check sums the batch first; a sum that overflows on finite values must not refuse them."""
    obs, masks = random_inputs(spec, 8, np.random.default_rng(2))
    obs[:, :] = 3e38
    out = policy.act(obs, masks, policy.initial_state(8))
    assert torch.isfinite(out.logp).all()


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda o, m: o.__setitem__((3, 4), np.nan), r"observation enemies\[0\].dx of row 3 is nan"),
        (lambda o, m: o.__setitem__((0, 0), np.inf), r"observation self\[0\].hp of row 0 is inf"),
        (lambda o, m: m["type"].__setitem__(2, False), "all-masked head 'type' at row 2"),
        (lambda o, m: m.pop("target"), r"masks have keys \['direction', 'type'\]"),
    ],
)
def test_bad_input_is_refused_naming_the_field(policy: Policy, spec: ModelSpec, corrupt, message: str) -> None:
    obs, masks = random_inputs(spec, 4, np.random.default_rng(9))
    corrupt(obs, masks)
    with pytest.raises(ModelError, match=message):
        policy.act(obs, masks, policy.initial_state(4))


def test_an_all_masked_secondary_head_needed_by_a_legal_type_is_refused(policy: Policy, spec: ModelSpec) -> None:
    obs, masks = random_inputs(spec, 4, np.random.default_rng(10))
    masks["type"][1] = [True, False, True, False]
    masks["target"][1, 2] = False
    with pytest.raises(ModelError, match="all-masked head 'target' at row 1: legal type 'attack'"):
        policy.act(obs, masks, policy.initial_state(4))
    masks["type"][1] = [True, False, False, False]  # attack no longer legal: fine
    policy.act(obs, masks, policy.initial_state(4))


def test_wrong_observation_width_is_refused(policy: Policy, spec: ModelSpec) -> None:
    obs, masks = random_inputs(spec, 4, np.random.default_rng(11))
    with pytest.raises(ModelError, match=rf"shape \(4, {spec.obs.size - 1}\), expected \[rows, {spec.obs.size}\]"):
        policy.act(obs[:, 1:], masks, policy.initial_state(4))


def test_running_norm_matches_the_batch_statistics_and_clips() -> None:
    norm = RunningNorm(3)
    data = np.random.default_rng(12).normal(loc=[1.0, -2.0, 10.0], scale=[0.5, 3.0, 0.01], size=(1000, 3))
    for part in np.array_split(data, 7):
        norm.update(torch.as_tensor(part))
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(0), rtol=1e-9)
    np.testing.assert_allclose(norm.var.numpy(), data.var(0), rtol=1e-9)
    out = norm(torch.tensor([[1.0, -2.0, 20.0]]))
    assert out[0, 2] == 5.0 and abs(out[0, 0]) < 0.1


def test_spec_hash_is_stable_and_names_the_architecture() -> None:
    a, b = make_spec(), make_spec()
    assert a.hash == b.hash and len(a.hash) == 16
    assert ModelSpec.from_dict(a.to_dict()) == a
    assert a.with_widths(lstm_size=32).hash != a.hash


def test_pointer_head_size_must_match_its_blocks() -> None:
    spec = make_spec()
    heads = (spec.actions.heads[0], type(spec.actions.heads[1])("target", 4, ("enemies", "creeps")))
    with pytest.raises(ModelError, match="pointer head 'target' has size 4 but its blocks hold 5 slots"):
        replace(spec, actions=type(spec.actions)(spec.actions.types, heads, spec.actions.uses))
