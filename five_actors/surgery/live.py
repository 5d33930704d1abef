"""Surgery on a running cluster's parameters: the ParamServer's arrays in, operated arrays out.

The ParamServer holds each version as `{name: ndarray}` and Adam's moments as `INDEX.KEY`
arrays (five_actors.actors.params). This module turns them into ModelStates, runs the same
operations on the latest version and on every opponent-pool version (verify.operate_all, one
seed so new units start alike everywhere), verifies each on probes recorded from real lane
games, and turns the results back into arrays. It never touches the caller's arrays: a refused
surgery raises SurgeryRejected and the caller keeps what it had.

In three steps, so that training pauses only for the second: `prepare` (parse, record probes)
while the learners go on, and `live_surgery` on a snapshot of the latest version, verified on all the
probes; then, in the pause, `live_surgery` on the version that is latest by then (with Adam's moments),
verified on the probes' first PAUSE_PROBE_STEPS steps (none when the snapshot is still the latest);
then `operate_past` on each of the pool's past versions, which never change, after the hand-over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from five_actors.envs import EnvConfig
from five_actors.errors import SurgeryRejected
from five_actors.game.config import GameConfig
from five_actors.model.spec import ModelSpec
from five_actors.surgery.offline import record_run_probes
from five_actors.surgery.ops import SurgeryOp, describe, parse_ops
from five_actors.surgery.state import ModelState, parameter_names
from five_actors.surgery.verify import (
    Probes,
    Verification,
    operate_all,
)

Operated = dict[int, tuple[ModelState, Verification]]
"""Versions operated and verified: the new state and its figures."""

Arrays = dict[str, np.ndarray]


@dataclass
class LiveResult:
    """What a live surgery produced: the new spec, every version's new arrays, the mapped moments, the report."""

    spec: ModelSpec
    versions: dict[int, Arrays]
    optimizer: Arrays | None
    report: dict[str, Any]


def to_model_state(
    spec: ModelSpec, state: Mapping[str, np.ndarray], optimizer: Mapping[str, np.ndarray] | None = None
) -> ModelState:
    """A ModelState from ParamServer arrays (optimizer: `INDEX.KEY` arrays, or None)."""
    params = {k: torch.from_numpy(np.array(v)) for k, v in state.items()}
    if optimizer is None:
        return ModelState(spec, params)
    entries: dict[int, dict[str, torch.Tensor]] = {}
    for name, array in optimizer.items():
        index, _, key = name.partition(".")
        if not index.isdigit() or not key:
            raise SurgeryRejected(f"the optimizer state has an entry {name!r}, expected INDEX.KEY")
        entries.setdefault(int(index), {})[key] = torch.from_numpy(np.array(array))
    groups = [{"params": list(range(len(parameter_names(spec))))}]
    return ModelState(spec, params, {"state": entries, "param_groups": groups})


def state_to_arrays(state: ModelState) -> tuple[Arrays, Arrays | None]:
    """The parameters and the `INDEX.KEY` optimizer arrays of a ModelState."""
    params = {k: v.detach().cpu().numpy().copy() for k, v in state.params.items()}
    if state.optimizer is None:
        return params, None
    moments = {
        f"{index}.{key}": torch.as_tensor(value).detach().cpu().numpy().copy()
        for index, entry in state.optimizer["state"].items()
        for key, value in entry.items()
    }
    return params, moments


PAUSE_PROBE_STEPS = 16
"""Probe steps a live surgery verifies the latest version on inside the pause: the full probes were verified on a
snapshot of a version moments older just before it, so the pause need not grow with `probe_steps`."""

MAX_PROBE_STEPS = 4096
"""Most lane-game steps a surgery records its probes over (the surgery holds its lock meanwhile; 10**9 held it for
good)."""


def prepare(
    words: Sequence[str],
    spec: ModelSpec,
    game: GameConfig,
    probe_steps: int = 128,
    seed: int = 0,
    env: EnvConfig | None = None,
) -> tuple[list[SurgeryOp], Probes]:
    """The operations (SurgeryRejected when malformed) and the probes: recorded from lane games of the version they
    lead to, or from two copies of the run's external environment `env` played at random.

    Blocking: call it in a thread."""
    if not 1 <= probe_steps <= MAX_PROBE_STEPS:
        raise SurgeryRejected(f"probe_steps must be within 1..{MAX_PROBE_STEPS}, got {probe_steps}")
    ops = parse_ops(list(words))
    return ops, record_run_probes(ops, spec, game, env, probe_steps, 1 if env is None or env.is_lane else 2, seed)


def operate_past(
    ops: list[SurgeryOp], probes: Probes, spec: ModelSpec, versions: Mapping[int, Arrays], seed: int = 0
) -> Operated:
    """Past versions (no optimizer state) operated and verified, all or none; blocking: call it in a thread."""
    return operate_all(ops, {v: to_model_state(spec, arrays) for v, arrays in versions.items()}, probes, seed)


def live_surgery(
    ops: list[SurgeryOp],
    probes: Probes,
    spec: ModelSpec,
    versions: Mapping[int, Arrays],
    latest: int,
    optimizer: Arrays | None,
    seed: int = 0,
) -> LiveResult:
    """Operate on every version in `versions` (`latest` carries `optimizer`), all or none: SurgeryRejected when any
    is refused.

    Blocking and CPU-heavy: call it in a thread.
    """
    if latest not in versions:
        raise SurgeryRejected(f"the latest version {latest} is not among the versions given")
    states = {v: to_model_state(spec, arrays, optimizer if v == latest else None) for v, arrays in versions.items()}
    results = operate_all(ops, states, probes, seed)
    new_versions: dict[int, Arrays] = {}
    new_optimizer: Arrays | None = None
    for v, (new, _check) in results.items():
        params, moments = state_to_arrays(new)
        new_versions[v] = params
        if v == latest:
            new_optimizer = moments
    new_spec = results[latest][0].spec
    report = {
        "operations": [str(op) for op in ops],
        "changes": describe(states[latest], results[latest][0]),
        "verification": {str(v): check.to_dict() for v, (_new, check) in sorted(results.items())},
        "versions_operated": sorted(results),
    }
    return LiveResult(new_spec, new_versions, new_optimizer, report)
