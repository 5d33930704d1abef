"""game-size: a model of a small lane game carried to a larger one (the curriculum's surgery) keeps every weight and
acts as before wherever the small game's situations come up; its chunks are converted, not lost."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from five_actors.actors.buffer import convert_arrays
from five_actors.errors import GameError
from five_actors.game.config import GameConfig
from five_actors.game.layout import ObsSpec, project_masks, project_obs
from five_actors.game.spec import POINTER_BLOCKS, action_spec, obs_spec, sized_config
from five_actors.model.policy import Policy
from five_actors.model.spec import ModelSpec
from five_actors.surgery.ops import apply, describe, parse_ops
from five_actors.surgery.state import ModelState
from five_actors.surgery.verify import Probes, record_probes, verify
from tests.surgery.conftest import SMALL, train_briefly

TWO_ON_ONE_LANE = GameConfig(heroes_per_side=2, lanes=1)


@pytest.fixture(scope="module")
def probes_small() -> Probes:
    return record_probes(TWO_ON_ONE_LANE, steps=96, games=2, seed=3)  # from step 65 heroes can attack


@pytest.fixture(scope="module")
def small(probes_small: Probes) -> ModelState:
    """A model of the 2v2 one-lane game after a few Adam steps on it."""
    torch.manual_seed(0)
    policy = Policy(ModelSpec.build(obs_spec(1, TWO_ON_ONE_LANE), action_spec(1, TWO_ON_ONE_LANE), SMALL))
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    train_briefly(policy, optimizer, probes_small)
    return ModelState.of(policy, optimizer)


def test_game_size_keeps_every_weight_and_acts_as_before_on_the_small_game(
    small: ModelState, probes_small: Probes
) -> None:
    grown = apply(parse_ops("game-size 5 3".split()), small)
    assert grown.spec.obs == obs_spec(1, GameConfig()) and grown.spec.actions == action_spec(1, GameConfig())
    assert sized_config(grown.spec.obs, TWO_ON_ONE_LANE) == dataclasses.replace(
        TWO_ON_ONE_LANE, heroes_per_side=5, lanes=3
    )
    assert grown.params.keys() == small.params.keys()
    assert all(torch.equal(grown.params[k], v) for k, v in small.params.items())
    result = verify(small, grown, probes_small)  # the new slots read as absent: every head and the value as before
    assert result.preserved and result.rows == 8 and set(result.head_diffs) == {"type", "move", "target"}
    changes = describe(small, grown)
    assert changes["slots"] == {"allies": [1, 4], "enemies": [2, 5], "structures": [6, 14]}
    assert changes["parameters"]["from"] == changes["parameters"]["to"]


def test_game_size_grows_one_side_at_a_time_and_refuses_to_shrink(small: ModelState) -> None:
    wider = apply(parse_ops("game-size 2 3".split()), small)  # more lanes, the same heroes
    assert sized_config(wider.spec.obs, GameConfig()).lanes == 3
    assert wider.spec.obs.block("allies").slots == 1
    with pytest.raises(Exception, match="removal is not supported"):
        apply(parse_ops("game-size 5 1".split()), wider)


def test_a_pointer_choice_still_means_the_same_entity_after_the_slots_move(
    small: ModelState, probes_small: Probes
) -> None:
    """A chunk played on the small game, converted to the grown layout: every target chosen names the same entity
    (its features), and the grown model gives every action taken the log-probability the small one gave it."""
    grown = apply(parse_ops("game-size 5 3".split()), small)
    old_policy, new_policy = small.build_policy(), grown.build_policy()
    window = slice(64, 96)
    obs = torch.as_tensor(probes_small.obs[window])
    masks = {k: torch.as_tensor(v[window]) for k, v in probes_small.masks.items()}
    steps, rows = obs.shape[:2]
    starts = torch.ones(steps, rows, dtype=torch.bool) & (torch.arange(steps) == 0).unsqueeze(-1)
    # Attack the last legal target of each row (structures come last), or move where none is legal.
    attack = small.spec.actions.types.index("attack")
    legal = masks["target"][:, :, attack]
    last = legal.shape[-1] - 1 - legal.flip(-1).int().argmax(-1)
    can = legal.any(-1) & masks["type"][:, :, attack]
    actions = torch.zeros((steps, rows, 3), dtype=torch.int64)
    actions[..., 0] = torch.where(can, attack, small.spec.actions.types.index("move"))
    actions[..., 1] = torch.arange(rows) % 8
    actions[..., 2] = torch.where(can, last, 0)
    assert (actions[..., 2] > 1).sum() > 10, "hardly a creep, hero or structure attacked: the test would see no move"
    zeros = np.zeros((rows, small.spec.lstm_size), np.float32)
    new_obs, new_masks, new_actions, h, c = convert_arrays(
        obs.numpy(), {k: v.numpy() for k, v in masks.items()}, actions.numpy(), zeros, zeros, small.spec, grown.spec
    )
    for t, row in zip(*np.nonzero(can.numpy()), strict=True):
        before = entity(small.spec.obs, obs[t, row].numpy(), int(actions[t, row, 2]))
        after = entity(grown.spec.obs, new_obs[t, row], int(new_actions[t, row, 2]))
        assert before[0] == 1.0 and np.array_equal(before, after), (t, row)
    with torch.no_grad():
        was = old_policy.evaluate(obs, masks, actions, starts, old_policy.initial_state(rows))
        now = new_policy.evaluate(
            torch.as_tensor(new_obs),
            {k: torch.as_tensor(v) for k, v in new_masks.items()},
            torch.as_tensor(new_actions),
            starts,
            (torch.as_tensor(h), torch.as_tensor(c)),
        )
    for old_out, new_out in zip(was, now, strict=True):  # log-probabilities, entropies, values
        torch.testing.assert_close(new_out, old_out, atol=1e-5, rtol=0)


def entity(spec: ObsSpec, row: np.ndarray, choice: int) -> np.ndarray:
    """The features of the entity a `target` choice names in an observation row of layout `spec`."""
    blocks = spec.split(row)
    for block in POINTER_BLOCKS:
        slots = spec.block(block).slots
        if choice < slots:
            return np.asarray(blocks[block][choice])
        choice -= slots
    raise AssertionError("the choice is past the last slot")


def test_layouts_refuse_what_would_lose_entities() -> None:
    big, small_obs = obs_spec(1, GameConfig()), obs_spec(1, TWO_ON_ONE_LANE)
    with pytest.raises(GameError, match="only 1 in the target"):
        project_obs(np.zeros((1, big.size), np.float32), big, small_obs)
    big_actions, small_actions = action_spec(1, GameConfig()), action_spec(1, TWO_ON_ONE_LANE)
    masks = {k: np.ones(v, bool) for k, v in small_actions.mask_shapes(1).items()}
    with pytest.raises(GameError, match="action heads differ"):  # without the layouts a choice would point elsewhere
        project_masks(masks, small_actions, big_actions)
    with pytest.raises(GameError, match="no lane game with 2 towers a lane"):
        sized_config(
            dataclasses.replace(
                small_obs, blocks=small_obs.blocks[:-1] + (dataclasses.replace(small_obs.blocks[-1], slots=7),)
            ),
            GameConfig(),
        )
