"""Shared pieces of the model tests: a small spec with entity blocks and a pointer head."""

import numpy as np
import pytest
import torch

from five_actors.game.layout import ActionHead, ActionSpec, EntityBlock, ObsSpec
from five_actors.model.policy import Policy
from five_actors.model.spec import ModelSpec

TYPES = ("noop", "move", "attack", "cast")
USES = ((False, False), (True, False), (False, True), (True, True))
"""noop uses no head, move the direction head, attack the pointer, cast both."""


def make_spec(lstm_size: int = 16) -> ModelSpec:
    """Self features, 3 enemy slots, 2 creep slots; a direction head and a pointer over enemies+creeps."""
    obs = ObsSpec(
        (
            EntityBlock("self", 1, ("hp", "x", "y")),
            EntityBlock("enemies", 3, ("present", "dx", "dy", "hp")),
            EntityBlock("creeps", 2, ("present", "dx", "hp")),
        )
    )
    actions = ActionSpec(TYPES, (ActionHead("direction", 8), ActionHead("target", 5, ("enemies", "creeps"))), USES)
    return ModelSpec(obs, actions, entity_hidden=16, entity_embed=8, core_input=16, lstm_size=lstm_size, pointer_key=8)


def random_inputs(spec: ModelSpec, rows: int, rng: np.random.Generator) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Observations with random presence, and random masks that leave every needed head a legal choice."""
    obs = rng.normal(size=(rows, spec.obs.size)).astype(np.float32)
    for name in ("enemies", "creeps"):
        block = spec.obs.block(name)
        start = spec.obs.offset(name)
        view = obs[:, start : start + block.size].reshape(rows, block.slots, block.width)
        present = rng.random((rows, block.slots)) < 0.6
        view[..., 0] = present
        view[~present] = 0.0
    n_types = len(spec.actions.types)
    masks = {"type": rng.random((rows, n_types)) < 0.5}
    masks["type"][np.arange(rows), rng.integers(0, n_types, rows)] = True
    for head in spec.actions.heads:
        m = rng.random((rows, n_types, head.size)) < 0.3
        m[np.arange(rows)[:, None], np.arange(n_types)[None, :], rng.integers(0, head.size, (rows, n_types))] = True
        masks[head.name] = m
    return obs, masks


@pytest.fixture
def spec() -> ModelSpec:
    return make_spec()


@pytest.fixture
def policy(spec: ModelSpec) -> Policy:
    torch.manual_seed(0)
    return Policy(spec)
