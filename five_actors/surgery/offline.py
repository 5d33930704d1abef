"""Surgery on a checkpoint file: read, apply, verify on recorded games, write atomically.

This is the offline target of `five-actors surgery`; the live target (a Surgery message to a
running cluster's ParamServer) takes the same operations and report.

Anneal shares of added action types travel in the checkpoint's integer counters as
`anneal_ppm:NAME` (parts per million of games in which the type may be chosen).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from five_actors.envs import EnvConfig, make_external
from five_actors.errors import SurgeryRejected
from five_actors.game.config import GameConfig
from five_actors.model.checkpoint import Checkpoint, read_checkpoint, save_checkpoint
from five_actors.model.spec import ModelSpec
from five_actors.surgery.anneal import ANNEAL_COUNTER
from five_actors.surgery.ops import SurgeryOp, describe
from five_actors.surgery.state import ModelState
from five_actors.surgery.verify import Probes, operate, probe_config, record_env_probes, record_probes


def state_of(checkpoint: Checkpoint) -> ModelState:
    """The ModelState inside a checkpoint (the action types' anneal shares read back from its counters)."""
    types = checkpoint.spec.actions.types
    anneal = {
        name: v / 1e6
        for k, v in checkpoint.counters.items()
        if k.startswith(ANNEAL_COUNTER) and (name := k.removeprefix(ANNEAL_COUNTER)) in types
    }
    return ModelState(checkpoint.spec, checkpoint.params, checkpoint.optimizer, anneal)


def save_state(path: str | Path, state: ModelState, counters: dict[str, int]) -> None:
    """Write `state` as a checkpoint (atomically), loading it strictly into a Policy and Adam on the way."""
    policy = state.build_policy()
    optimizer = None
    if state.optimizer is not None:
        optimizer = torch.optim.Adam(policy.parameters())
        try:
            optimizer.load_state_dict(dict(state.optimizer))
        except (ValueError, KeyError) as exc:
            raise SurgeryRejected(f"the new optimizer state does not load: {exc}") from None
    kept = dict(counters)
    kept.update({f"{ANNEAL_COUNTER}{name}": round(share * 1e6) for name, share in state.anneal.items()})
    save_checkpoint(path, policy, optimizer, kept)


def checkpoint_surgery(
    ops: Sequence[SurgeryOp],
    checkpoint: str | Path,
    out: str | Path | None,
    game: GameConfig | None = None,
    probe_steps: int = 256,
    probe_games: int = 2,
    seed: int = 0,
    env: EnvConfig | None = None,
) -> dict[str, Any]:
    """Apply `ops` to the checkpoint at `checkpoint`, verify, and write the result to `out` (None: a dry run).

    Returns the report: operations, what changed, the verification figures, where it was written.
    A refused surgery raises SurgeryRejected (or CheckpointError for a bad file) and writes nothing.
    """
    ckpt = read_checkpoint(checkpoint)
    old = state_of(ckpt)
    probes = record_run_probes(ops, old.spec, game, env, probe_steps, probe_games, seed)
    new, verification = operate(list(ops), old, probes, seed)
    if out is not None:
        save_state(out, new, ckpt.counters)
    return {
        "checkpoint": str(checkpoint),
        "out": None if out is None else str(out),
        "dry_run": out is None,
        "operations": [str(op) for op in ops],
        "changes": describe(old, new),
        "verification": verification.to_dict(),
    }


def record_run_probes(
    ops: Sequence[SurgeryOp],
    spec: ModelSpec,
    game: GameConfig | None,
    env: EnvConfig | None,
    steps: int,
    games: int,
    seed: int = 0,
) -> Probes:
    """The games a surgery is verified on: `games` lane games (scripted against random) of the version `ops` lead to,
    or, for a run on an external environment `env`, `games` copies of it played at random (bots.UniformBot)."""
    if env is not None and not env.is_lane:
        external = make_external(env, games, seed)
        try:
            return record_env_probes(external, steps, seed)
        finally:
            external.close()
    version = max(spec.obs.version, *(target_version(op) for op in ops))
    return record_probes(probe_config(spec, game, version), steps, games, seed)


def target_version(op: SurgeryOp) -> int:
    """The game version an operation moves to (probes are recorded there, so new features carry real values)."""
    if op.name == "game-version" and len(op.args) == 1 and op.args[0].isdigit():
        return int(op.args[0])
    return 0


def format_report(report: dict[str, Any], outcome: str | None = None) -> str:
    """The report as lines a person reads, ending with `outcome` (default: where it was written, or a dry run)."""
    changes, check = report["changes"], report["verification"]
    lines = [
        f"surgery: {' + '.join(report['operations'])}",
        f"architecture {changes['architecture']['from']} -> {changes['architecture']['to']}, "
        f"game version {changes['game_version']['from']} -> {changes['game_version']['to']}",
        f"parameters {changes['parameters']['from']} -> {changes['parameters']['to']}",
    ]
    for name, (a, b) in changes["widths"].items():
        lines.append(f"  width {name}: {a} -> {b}")
    for block, features in changes["features_added"].items():
        lines.append(f"  features added to {block}: {', '.join(features)}")
    for name in changes["action_types_added"]:
        lines.append(f"  action type added: {name} (masked; anneal share {changes['anneal'].get(name, 0.0):g})")
    for name, shapes in changes["shapes_changed"].items():
        lines.append(f"  {name}: {tuple(shapes['from'])} -> {tuple(shapes['to'])}")
    lines.append(
        f"verified on {check['steps']} steps x {check['rows']} rows of recorded games: max probability difference "
        f"{check['max_prob_diff']:.3g}, max value difference {check['max_value_diff']:.3g} (tolerance "
        f"{check['tolerance']:g})"
    )
    if outcome is None:
        outcome = f"written to {report['out']}" if report["out"] else "dry run: nothing written"
    lines.append(outcome)
    return "\n".join(lines) + "\n"
