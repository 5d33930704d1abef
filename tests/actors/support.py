"""Test actors: a context reporter, and a stand-in ParamServer serving fresh policies; a chunk evaluated as the learner
does."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch

from five_actors.actors.messages import GetParams, Params, Rollout
from five_actors.errors import FiveActorsError
from five_actors.game.env import LaneGame
from five_actors.model.policy import Policy
from five_actors.model.spec import ModelSpec
from five_actors.runtime.actor import Actor

TINY_GAME = [
    "game.heroes_per_side=2",
    "game.lanes=1",
    "game.time_limit_steps=40",
    "model.entity_hidden=8",
    "model.entity_embed=8",
    "model.core_input=16",
    "model.lstm_size=16",
    "model.pointer_key=8",
]
"""--set overrides for a tiny 2v2 lane game and model (the eval tests play it)."""


class ContextReporter(Actor):
    """Records, in on_start, the run config and run dir its supervisor gave it; reports them in status()."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    async def on_start(self) -> None:
        config = self.context.config
        self.seen = {
            "pid": os.getpid(),
            "name": None if config is None else config.name,
            "games_per_actor": None if config is None else config.training.games_per_actor,
            "rendezvous_port": None if config is None else config.training.rendezvous_port,
            "run_dir": None if self.context.run_dir is None else str(self.context.run_dir),
        }

    def status(self) -> dict[str, Any]:
        return dict(self.seen)


class ParamsStub(Actor):
    """Serves GetParams like a ParamServer whose latest version advances by one on every ask for the latest;
    with `keep_past=False` it serves no version but the latest, like a ParamServer whose checkpoints rotated."""

    def __init__(self, keep_past: bool = True) -> None:
        self.latest = -1
        self.keep_past = keep_past
        self.versions: dict[int, Params] = {}

    async def on_get_params(self, msg: GetParams) -> Params:
        config = self.context.config
        if msg.version == -1:
            self.latest += 1
            env = LaneGame(dataclasses.replace(config.game, games_per_batch=1))
            spec = ModelSpec.build(env.obs_spec, env.action_spec, config.model)
            torch.manual_seed(self.latest)
            state = {k: v.numpy() for k, v in Policy(spec).state_dict().items()}
            self.versions[self.latest] = Params(self.latest, spec.hash, spec.to_dict(), state)
            return self.versions[self.latest]
        if msg.version not in self.versions or (not self.keep_past and msg.version != self.latest):
            raise FiveActorsError(f"unknown version {msg.version}")
        return self.versions[msg.version]


def evaluate_chunk(policy: Policy, rollout: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunk's log-probabilities and (normalised) values under `policy`, from its stored LSTM state, as the
    learner's loss computes them."""
    with torch.no_grad():
        logp, _, value = policy.evaluate(
            torch.as_tensor(rollout.obs),
            {k: torch.as_tensor(v) for k, v in rollout.masks.items()},
            torch.as_tensor(rollout.actions),
            torch.as_tensor(rollout.starts),
            (torch.as_tensor(rollout.h), torch.as_tensor(rollout.c)),
        )
    return logp, value
