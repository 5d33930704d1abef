"""The preservation check: old and new model play the same recorded games and must agree.

Probes are a few hundred steps of real lane games played by the bots (observations, masks,
episode starts). Each model runs over them with its own LSTM state, as it would in a game,
so a widened LSTM's new units really do evolve and must still not leak into old outputs.
Each model reads the probes in its own layout, projected by feature and action-type name:
the old model reads the v1 features of a v2 observation, a new feature the probes lack is 0,
and an action type the old model does not know is masked off for the new one (the
"preserving while masked" promise of add-action). After game-size the probes come from the
smaller game: the new slots read as absent and are masked off, and a pointer head's choices are
compared slot by slot where each now lies.

Compared at every step: every head's masked action probabilities (the type head, and each
secondary head under every action type's mask) and the value head's output. A preserving
surgery must keep the largest absolute difference within 1e-6 (float32).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import structlog
import torch
from torch import Tensor

from five_actors.errors import GameError, SurgeryRejected
from five_actors.game.config import HERO_TYPE_NAMES, GameConfig
from five_actors.game.layout import ActionSpec, BatchEnv, ObsSpec, project_masks, project_obs, slot_positions
from five_actors.game.spec import sized_config
from five_actors.model.policy import MASKED_LOGIT, Policy, State
from five_actors.model.spec import ModelSpec
from five_actors.surgery.ops import SurgeryOp, apply
from five_actors.surgery.state import ModelState

log = structlog.get_logger("five_actors.surgery")

TOLERANCE = 1e-6
"""Largest absolute difference of a probability or value a preserving surgery may cause (float32)."""


@dataclass
class Probes:
    """Recorded steps of real games, time-major: `obs` [T, rows, size], masks [T, rows, ...], starts [T, rows]."""

    obs_spec: ObsSpec
    action_spec: ActionSpec
    obs: np.ndarray
    masks: dict[str, np.ndarray]
    starts: np.ndarray
    """True where a row's step begins an episode (its LSTM state is reset before it)."""

    @property
    def steps(self) -> int:
        return int(self.obs.shape[0])

    @property
    def rows(self) -> int:
        return int(self.obs.shape[1])

    def head(self, steps: int) -> Probes:
        """The first `steps` steps (all of them when there are fewer)."""
        return dataclasses.replace(
            self,
            obs=self.obs[:steps],
            masks={k: v[:steps] for k, v in self.masks.items()},
            starts=self.starts[:steps],
        )


@dataclass
class Verification:
    """How far the new model's outputs are from the old one's on the probes."""

    max_prob_diff: float
    """Largest absolute difference of any action probability, over every head, row and step."""
    head_diffs: dict[str, float]
    """The same per head (`type` and each secondary head)."""
    max_value_diff: float
    """Largest absolute difference of the value head's output (in its normalised units)."""
    steps: int
    rows: int
    tolerance: float = TOLERANCE

    @property
    def preserved(self) -> bool:
        return self.max_prob_diff <= self.tolerance and self.max_value_diff <= self.tolerance

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready figures."""
        return {**dataclasses.asdict(self), "preserved": self.preserved}


def probe_config(spec: ModelSpec, base: GameConfig | None = None, version: int | None = None) -> GameConfig:
    """A lane game whose observations carry the blocks and slots of `spec`, at `version` (default: the spec's)."""
    base = base or GameConfig()
    try:
        heroes = [f.removeprefix("type_") for f in spec.obs.block("self").features if f.startswith("type_")]
        config = dataclasses.replace(
            sized_config(spec.obs, base),
            version=spec.obs.version if version is None else version,
            hero_types=tuple(h for h in heroes if h in HERO_TYPE_NAMES) or base.hero_types,
        )
    except (KeyError, ValueError, GameError) as exc:
        raise SurgeryRejected(
            f"cannot record probes: the model's layout is not the lane game's ({exc}); pass the run's config "
            "(towers_per_lane)"
        ) from None
    return config


def record_probes(config: GameConfig, steps: int = 256, games: int = 2, seed: int = 0) -> Probes:
    """Play `steps` steps of `games` lane games, scripted bot against random bot, and record what the heroes saw."""
    from five_actors.game.bots import RandomBot, ScriptedBot
    from five_actors.game.env import LaneGame
    from five_actors.game.match import Bot, team_rows

    if games < 1:
        raise SurgeryRejected(f"probes need at least one game, got {games}")
    env = LaneGame(dataclasses.replace(config, games_per_batch=games, seed=seed))
    bots: tuple[Bot, Bot] = (ScriptedBot(env.config), RandomBot(seed))

    def act(obs: np.ndarray, masks: dict[str, np.ndarray]) -> np.ndarray:
        actions = np.zeros((env.num_rows, env.action_spec.columns), dtype=np.int64)
        for team, bot in enumerate(bots):
            rows = team_rows(env, team)
            actions[rows] = bot.act(obs[rows], {k: v[rows] for k, v in masks.items()})
        return actions

    return _record(env, steps, seed, act)


def record_env_probes(env: BatchEnv, steps: int = 256, seed: int = 0) -> Probes:
    """Play `steps` steps of an external environment's copies with random actions (bots.UniformBot) and record what
    its rows saw: the probes of a run on an environment other than the lane game."""
    from five_actors.game.bots import UniformBot

    return _record(env, steps, seed, UniformBot(env.action_spec, seed).act)


def _record(
    env: BatchEnv, steps: int, seed: int, act: Callable[[np.ndarray, dict[str, np.ndarray]], np.ndarray]
) -> Probes:
    """Step `env` `steps` times with the actions `act` chooses, recording observations, masks and episode starts."""
    if steps < 1:
        raise SurgeryRejected(f"probes need at least one step, got {steps}")
    obs, masks = env.reset(seed)
    starts = np.ones(env.num_rows, dtype=bool)
    record: dict[str, list[np.ndarray]] = {"obs": [], "starts": [], **{f"mask:{k}": [] for k in masks}}
    for _ in range(steps):
        record["obs"].append(obs)
        record["starts"].append(starts)
        for k, v in masks.items():
            record[f"mask:{k}"].append(v)
        step = env.step(act(obs, masks))
        obs, masks, starts = step.obs, step.masks, step.dones.copy()
    stacked = {k: np.stack(v) for k, v in record.items()}
    return Probes(
        env.obs_spec,
        env.action_spec,
        stacked["obs"],
        {k.removeprefix("mask:"): v for k, v in stacked.items() if k.startswith("mask:")},
        stacked["starts"],
    )


@torch.no_grad()
def distributions(
    policy: Policy, obs: Tensor, masks: Mapping[str, Tensor], state: State
) -> tuple[dict[str, Tensor], Tensor, State]:
    """Every head's masked probabilities (`type` [rows, types]; a secondary head [rows, types, size] under
    each type's mask; a Gaussian head's mean and standard deviation as `GAUSSIAN` [rows, 2, dims]), the value
    head's output [rows] and the next LSTM state."""
    embeddings, core_in = policy.encode(obs)
    h, c = policy.core_step(core_in, state)
    logits = policy.head_logits(h, embeddings)
    probs = {"type": _softmax(logits["type"].masked_fill(~masks["type"], MASKED_LOGIT))}
    for head in policy.spec.actions.heads:
        probs[head.name] = _softmax(logits[head.name].unsqueeze(1).masked_fill(~masks[head.name], MASKED_LOGIT))
    if policy.spec.actions.continuous:
        mean = policy.mean_head(h)
        probs[GAUSSIAN] = torch.stack([mean, policy.log_std.exp().expand_as(mean)], dim=1)
    return probs, policy.value_head(h).squeeze(-1), (h, c)


GAUSSIAN = "gaussian"
"""The Gaussian head's entry in `distributions` and in a Verification's head_diffs (its mean and std)."""


def _softmax(logits: Tensor) -> Tensor:
    """Masked softmax over the last axis: masked choices get exactly 0, and exp never sees a -1e9 logit."""
    legal = logits > MASKED_LOGIT / 2
    shifted = (logits - logits.amax(-1, keepdim=True)).clamp(min=-80.0).exp() * legal
    return shifted / shifted.sum(-1, keepdim=True).clamp(min=1e-30)


def compare(old: ModelState, new: ModelState, probes: Probes) -> Verification:
    """Run both models over the probes and measure how far apart their outputs are."""
    try:
        return _compare(old, new, probes)
    except GameError as exc:
        raise SurgeryRejected(f"the probes do not fit the model: {exc}") from None


def _compare(old: ModelState, new: ModelState, probes: Probes) -> Verification:
    models = []
    for state in (old, new):
        policy = state.build_policy()
        obs = torch.as_tensor(project_obs(probes.obs, probes.obs_spec, state.spec.obs))
        models.append((policy, obs))
    # Both read the masks in the old layout: types the old model lacks are masked off for the new one, and so are
    # the slots it lacks (game-size).
    old_masks = project_masks(probes.masks, probes.action_spec, old.spec.actions)
    layouts = (old.spec.obs, new.spec.obs)
    masks = [
        {k: torch.as_tensor(v) for k, v in old_masks.items()},
        {
            k: torch.as_tensor(v)
            for k, v in project_masks(old_masks, old.spec.actions, new.spec.actions, layouts).items()
        },
    ]
    old_types = torch.tensor([new.spec.actions.types.index(t) for t in old.spec.actions.types])
    # Where each old choice of a pointer head lies among the new one's (the same place unless slots were added).
    choices = {
        h.name: torch.as_tensor(slot_positions(*layouts, h.pointer_blocks))
        for h in old.spec.actions.heads
        if h.pointer_blocks
    }
    states = [p.initial_state(probes.rows) for p, _ in models]
    diffs: dict[str, float] = {}
    value_diff = 0.0
    starts = torch.as_tensor(probes.starts)
    for t in range(probes.steps):
        keep = (~starts[t]).float().unsqueeze(-1)
        outputs = []
        for i, (policy, obs) in enumerate(models):
            h, c = states[i]
            probs, value, states[i] = distributions(
                policy, obs[t], {k: v[t] for k, v in masks[i].items()}, (h * keep, c * keep)
            )
            outputs.append((probs, value))
        (old_probs, old_value), (new_probs, new_value) = outputs
        for name, p in old_probs.items():
            q = new_probs[name]
            kept = q if name == GAUSSIAN else q[:, old_types]
            if name in choices:
                kept = kept[..., choices[name]]
            gap = (kept - p).abs().flatten()
            # Types and slots the old model lacks are masked off for the new one: their probability must be 0.
            if name == "type":
                gap = torch.cat([gap, _others(q, old_types).abs().flatten()])
            elif name in choices:
                gap = torch.cat([gap, _others(q[:, old_types], choices[name]).abs().flatten()])
            diffs[name] = _worse(diffs.get(name, 0.0), gap)
        value_diff = _worse(value_diff, (new_value - old_value).abs())
    return Verification(_worse(0.0, torch.tensor(list(diffs.values()))), diffs, value_diff, probes.steps, probes.rows)


def _others(probs: Tensor, kept: Tensor) -> Tensor:
    """The probabilities of the choices (last axis) not among `kept`."""
    added = torch.ones(probs.shape[-1], dtype=torch.bool)
    added[kept] = False
    return probs[..., added]


def _worse(so_far: float, gaps: Tensor) -> float:
    """The larger of `so_far` and the largest of `gaps`; NaN anywhere wins, so a broken model never passes."""
    largest = float(gaps.max()) if gaps.numel() else 0.0
    return math.nan if math.isnan(so_far) or math.isnan(largest) else max(so_far, largest)


def verify(old: ModelState, new: ModelState, probes: Probes, tolerance: float = TOLERANCE) -> Verification:
    """`compare`, refusing the surgery (SurgeryRejected with the figures) when outputs moved more than `tolerance`."""
    result = compare(old, new, probes)
    result.tolerance = tolerance
    if not result.preserved:
        worst = max(result.head_diffs, key=result.head_diffs.__getitem__)
        raise SurgeryRejected(
            f"the new model does not behave like the old one: max probability difference {result.max_prob_diff:.3g} "
            f"(head {worst!r}), max value difference {result.max_value_diff:.3g}, tolerance {tolerance:g}, "
            f"over {result.steps} steps x {result.rows} rows"
        )
    return result


def operate(ops: list[SurgeryOp], state: ModelState, probes: Probes, seed: int = 0) -> tuple[ModelState, Verification]:
    """Apply `ops` and verify the result on `probes`; either both succeed or SurgeryRejected is raised.

    Logs `surgery` (operations, architecture before and after, the figures) or `surgery_rejected` (reason).
    """
    names = [str(op) for op in ops]
    try:
        new = apply(ops, state, seed)
        result = verify(state, new, probes)
    except SurgeryRejected as exc:
        log.warning("surgery_rejected", operations=names, architecture=state.spec.hash, reason=str(exc))
        raise
    log.info(
        "surgery",
        operations=names,
        architecture_from=state.spec.hash,
        architecture_to=new.spec.hash,
        **result.to_dict(),
    )
    return new, result


def operate_all(
    ops: list[SurgeryOp], states: Mapping[Any, ModelState], probes: Probes, seed: int = 0
) -> dict[Any, tuple[ModelState, Verification]]:
    """The same surgery on several versions (the latest and every past one in the opponent pool): all or none.

    New units get the same initial weights in every version (one seed). A version that is
    refused refuses the whole surgery, naming the version; nothing is returned changed.
    """
    results = {}
    for key, state in states.items():
        try:
            results[key] = operate(ops, state, probes, seed)
        except SurgeryRejected as exc:
            raise SurgeryRejected(f"version {key}: {exc}") from None
    return results
