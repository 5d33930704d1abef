"""Parameters and optimizer state as numpy arrays, checked against an architecture.

The ParamServer and the learners exchange a policy's state_dict as `{name: ndarray}` and
Adam's moments as `{"INDEX.KEY": ndarray}` (INDEX = the parameter's position in
`policy.parameters()`, KEY = `step`, `exp_avg` or `exp_avg_sq`). Every array that arrives is
checked against the receiver's own template before it touches a model: a wrong name, shape or
dtype is a TrainingError naming it, and nothing is loaded.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from five_actors.config import Config
from five_actors.envs import make_external
from five_actors.errors import TrainingError
from five_actors.game.spec import action_spec, obs_spec
from five_actors.model.policy import Policy
from five_actors.model.spec import ModelSpec

Arrays = dict[str, np.ndarray]
"""A state dict (or optimizer state) as numpy arrays by name."""


def model_spec(config: Config) -> ModelSpec:
    """The architecture a run's config describes: its environment's layouts with the [model] widths."""
    game = config.game
    if config.env.is_lane:
        return ModelSpec.build(obs_spec(game.version, game), action_spec(game.version, game), config.model)
    env = make_external(config.env, 1, config.training.seed)
    try:
        return ModelSpec.build(env.obs_spec, env.action_spec, config.model)
    finally:
        env.close()


def initial_policy(spec: ModelSpec, seed: int) -> Policy:
    """A fresh policy whose weights depend only on `spec` and `seed` (version 0 of a run)."""
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        return Policy(spec)
    finally:
        torch.random.set_rng_state(generator_state)


def state_arrays(policy: Policy) -> Arrays:
    """The policy's state_dict (normaliser buffers included) as numpy copies on the CPU."""
    return {name: tensor.detach().cpu().numpy().copy() for name, tensor in policy.state_dict().items()}


def template(policy: Policy) -> dict[str, tuple[tuple[int, ...], np.dtype[Any]]]:
    """Name -> (shape, dtype) of every entry of the policy's state_dict."""
    return {
        name: (tuple(t.shape), np.dtype(str(t.dtype).removeprefix("torch."))) for name, t in policy.state_dict().items()
    }


def check_state(state: Arrays, expected: dict[str, tuple[tuple[int, ...], np.dtype[Any]]], what: str) -> None:
    """Refuse a state dict whose names, shapes or dtypes differ from `expected`."""
    if not isinstance(state, dict):
        raise TrainingError(f"{what}: the state is a {type(state).__name__}, expected a dict of arrays")
    missing, extra = sorted(set(expected) - set(state)), sorted(set(state) - set(expected))
    if missing or extra:
        raise TrainingError(f"{what}: parameter names differ: missing {missing[:5]}, unexpected {extra[:5]}")
    for name, (shape, dtype) in expected.items():
        array = state[name]
        if not isinstance(array, np.ndarray) or array.shape != shape or array.dtype != dtype:
            found = f"{array.dtype} {array.shape}" if isinstance(array, np.ndarray) else type(array).__name__
            raise TrainingError(f"{what}: parameter {name!r} is {found}, expected {dtype} {shape}")


def load_state(policy: Policy, state: Arrays) -> None:
    """Copy checked numpy parameters into `policy` (on its device)."""
    check_state(state, template(policy), "parameters")
    policy.load_state_dict({name: torch.from_numpy(np.array(array)) for name, array in state.items()})


def optimizer_arrays(optimizer: torch.optim.Optimizer) -> Arrays:
    """Adam's per-parameter state as numpy arrays keyed `INDEX.KEY` (empty before the first step)."""
    out: Arrays = {}
    for index, entry in optimizer.state_dict()["state"].items():
        for key, value in entry.items():
            out[f"{index}.{key}"] = torch.as_tensor(value).detach().cpu().numpy().copy()
    return out


def load_optimizer(optimizer: torch.optim.Optimizer, arrays: Arrays) -> None:
    """Load `optimizer_arrays` output into an optimizer over the same parameters, checking every shape."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, array in arrays.items():
        index_text, _, key = name.partition(".")
        if not index_text.isdigit() or int(index_text) >= len(params) or key not in ("step", "exp_avg", "exp_avg_sq"):
            raise TrainingError(f"optimizer state: unexpected entry {name!r} for {len(params)} parameters")
        index = int(index_text)
        if key != "step" and tuple(array.shape) != tuple(params[index].shape):
            raise TrainingError(
                f"optimizer state: {name!r} has shape {array.shape}, parameter {index} has {tuple(params[index].shape)}"
            )
        state.setdefault(index, {})[key] = torch.from_numpy(np.array(array))
    for index, entry in state.items():
        if set(entry) != {"step", "exp_avg", "exp_avg_sq"}:
            raise TrainingError(
                f"optimizer state: parameter {index} has entries {sorted(entry)}, expected step, exp_avg, exp_avg_sq"
            )
    whole = optimizer.state_dict()
    whole["state"] = state
    optimizer.load_state_dict(whole)
