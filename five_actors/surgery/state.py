"""The whole state a surgery changes, and how a tensor grows without disturbing its old entries.

A `ModelState` is everything that is shaped by a ModelSpec: the policy's state dict (the
observation and value normalisers are buffers in it), Adam's state dict, and the anneal
shares of action types that a surgery added. Operations never modify a ModelState; they
return a new one, so a failed list of operations leaves the caller's state as it was.

Growing a tensor: every dimension that grows says where the old entries land (`positions`);
the new tensor starts from a fill the operation chooses (zeros, small random values) and the
old entries are copied to their positions. Adam's moments grow the same way from zeros, so
old weights keep their moments and new weights start with none.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from five_actors.errors import SurgeryRejected
from five_actors.model.policy import Policy, blank_policy
from five_actors.model.spec import ModelSpec

Positions = Sequence[Tensor | None]
"""Per dimension of a grown tensor: the new indices of the old entries, or None where the dimension keeps its size."""

MOMENTS = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
"""Adam's per-entry state (max_exp_avg_sq only with amsgrad); `step` is per tensor and is carried."""


@dataclass(frozen=True)
class ModelState:
    """A model's spec, parameters (normalisers included), optimizer state and action anneal shares."""

    spec: ModelSpec
    params: Mapping[str, Tensor]
    """The policy's state dict, as `Policy.state_dict()` returns it."""
    optimizer: Mapping[str, Any] | None = None
    """Adam's `state_dict()` for this policy's parameters, or None when there is none."""
    anneal: Mapping[str, float] = field(default_factory=dict)
    """Action type -> share of games in which it may be chosen (0 when added, raised by the game side to 1)."""

    @classmethod
    def of(
        cls, policy: Policy, optimizer: torch.optim.Optimizer | None = None, anneal: Mapping[str, float] | None = None
    ) -> ModelState:
        """A detached copy of a live policy (and optimizer)."""
        params = {k: v.detach().clone() for k, v in policy.state_dict().items()}
        # state_dict() shares Adam's live tensors, which later steps change in place.
        moments = None if optimizer is None else copy.deepcopy(optimizer.state_dict())
        return cls(policy.spec, params, moments, dict(anneal or {}))

    def build_policy(self, device: str | torch.device = "cpu") -> Policy:
        """A Policy of this spec holding these parameters (loaded strictly)."""
        policy = blank_policy(self.spec).to(device)
        policy.load_state_dict(dict(self.params), strict=True)
        return policy

    def parameter_count(self) -> int:
        """Trainable parameters (normaliser statistics excluded)."""
        names = set(parameter_names(self.spec))
        return sum(int(t.numel()) for k, t in self.params.items() if k in names)


def parameter_names(spec: ModelSpec) -> list[str]:
    """The policy's parameter names in `parameters()` order, the order Adam numbers them in."""
    # Built on the meta device: no memory and no initialisation cost, even for a 4096-unit LSTM.
    with torch.device("meta"):
        return [name for name, _ in Policy(spec).named_parameters()]


def grow(old: Tensor, shape: Sequence[int], positions: Positions, fill: Tensor | None = None) -> Tensor:
    """`old` placed at `positions` inside `fill` (zeros when None) of `shape`."""
    if len(shape) != old.ndim or len(positions) != old.ndim:
        raise SurgeryRejected(f"cannot grow a tensor of shape {tuple(old.shape)} to {tuple(shape)}")
    out = (
        torch.zeros(tuple(shape), dtype=old.dtype, device=old.device)
        if fill is None
        else fill.to(old.device, old.dtype, copy=True)
    )
    index = []
    for dim, where in enumerate(positions):
        size = old.shape[dim]
        where = torch.arange(size, device=old.device) if where is None else where.to(old.device)
        if len(where) != size or (size and int(where.max()) >= shape[dim]):
            raise SurgeryRejected(f"cannot grow dimension {dim} of {tuple(old.shape)} to {tuple(shape)}")
        index.append(where)
    out[torch.meshgrid(*index, indexing="ij")] = old
    return out


@dataclass
class Edit:
    """A ModelState being rewritten by one operation: parameters by name, Adam moments by name."""

    spec: ModelSpec
    params: dict[str, Tensor]
    moments: dict[str, dict[str, Tensor]]
    """Parameter name -> its Adam state (step and moments); absent for parameters Adam has not stepped."""
    groups: list[dict[str, Any]]
    """Adam's param groups (hyperparameters and the numbers of their parameters)."""
    names: list[str]
    """Parameter names in Adam's numbering; operations grow parameters but never add or remove one."""
    has_optimizer: bool
    anneal: dict[str, float]

    @classmethod
    def start(cls, state: ModelState) -> Edit:
        """Unpack a state; Adam's numbered entries are named by the spec's parameter order."""
        params = {k: v.clone() for k, v in state.params.items()}
        if state.optimizer is None:
            return cls(state.spec, params, {}, [], [], False, dict(state.anneal))
        names = parameter_names(state.spec)
        try:
            groups = [dict(g) for g in state.optimizer["param_groups"]]
            numbers = sorted(int(i) for g in groups for i in g["params"])
            entries = state.optimizer["state"]
        except (KeyError, TypeError) as exc:
            raise SurgeryRejected(f"the optimizer state is malformed ({type(exc).__name__}: {exc})") from None
        if len(numbers) != len(names):
            raise SurgeryRejected(f"the optimizer state covers {len(numbers)} parameters, the model has {len(names)}")
        if numbers != list(range(len(names))):
            raise SurgeryRejected(
                f"the optimizer numbers its parameters {numbers[:5]}..., expected 0..{len(names) - 1}"
            )
        by_number = dict(enumerate(names))
        moments = {
            by_number[int(i)]: {k: v.clone() if isinstance(v, Tensor) else v for k, v in entry.items()}
            for i, entry in entries.items()
        }
        for name, entry in moments.items():
            for key in MOMENTS:
                if key in entry and tuple(entry[key].shape) != tuple(params[name].shape):
                    raise SurgeryRejected(
                        f"optimizer moment {key} of {name!r} has shape {tuple(entry[key].shape)}, the parameter "
                        f"{tuple(params[name].shape)}"
                    )
        return cls(state.spec, params, moments, groups, names, True, dict(state.anneal))

    def grow(self, name: str, shape: Sequence[int], positions: Positions, fill: Tensor | None = None) -> None:
        """Grow parameter or buffer `name`; its Adam moments grow with zeros in the new entries."""
        if name not in self.params:
            raise SurgeryRejected(f"the model has no parameter {name!r}")
        self.params[name] = grow(self.params[name], shape, positions, fill)
        entry = self.moments.get(name)
        if entry is not None:
            for key in MOMENTS:
                if key in entry:
                    entry[key] = grow(entry[key], shape, positions)

    def finish(self) -> ModelState:
        """Pack the result, numbering Adam's entries by the new spec's parameter order."""
        optimizer = None
        if self.has_optimizer:
            if parameter_names(self.spec) != self.names:
                raise SurgeryRejected(
                    "the operation changed which parameters the model has; Adam's state cannot follow"
                )
            state = {i: self.moments[name] for i, name in enumerate(self.names) if name in self.moments}
            optimizer = {"state": state, "param_groups": [dict(g) for g in self.groups]}
        return ModelState(self.spec, self.params, optimizer, dict(self.anneal))
