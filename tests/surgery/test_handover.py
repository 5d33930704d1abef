"""The live hand-over's parts: old-arch chunks converted for the learner, and the anneal shares with their revert
rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from five_actors.actors.buffer import ExperienceBuffer, check_rollout, convert_rollout
from five_actors.actors.messages import Rollout
from five_actors.errors import TrainingError
from five_actors.game.spec import action_spec, obs_spec
from five_actors.surgery.anneal import ANNEAL_COUNTER, GAME_VERSION, Annealing, apply_game_version
from five_actors.surgery.ops import apply, parse_ops
from five_actors.surgery.state import ModelState
from five_actors.surgery.verify import Probes
from tests.actors.support import evaluate_chunk

STEPS = 8


def rollout_of(state: ModelState, probes: Probes) -> Rollout:
    """A Rollout of `state`'s architecture: the probes' steps 8..15, acted on by its policy from the state after steps
    0..7."""
    policy = state.build_policy()
    obs, masks = torch.as_tensor(probes.obs), {k: torch.as_tensor(v) for k, v in probes.masks.items()}
    rows = probes.rows
    hidden = policy.initial_state(rows)
    actions, logp, values = [], [], []
    with torch.no_grad():
        for t in range(2 * STEPS):
            if t == STEPS:
                h, c = (x.numpy().copy() for x in hidden)
            out = policy.act(obs[t], {k: v[t] for k, v in masks.items()}, hidden)
            hidden = out.state
            if t >= STEPS:
                actions.append(out.actions.numpy())
                logp.append(out.logp.numpy())
                values.append(out.value.numpy())
    chunk = slice(STEPS, 2 * STEPS)
    zeros = np.zeros((STEPS, rows), np.float32)
    return Rollout(
        source="test",
        arch=state.spec.hash,
        versions=np.zeros(rows, np.int64),
        obs=probes.obs[chunk],
        masks={k: v[chunk] for k, v in probes.masks.items()},
        actions=np.stack(actions).astype(np.int64),
        logp=np.stack(logp).astype(np.float32),
        values=np.stack(values).astype(np.float32),
        rewards=zeros,
        dones=np.zeros((STEPS, rows), bool),
        starts=probes.starts[chunk].copy(),
        advantages=zeros,
        returns=zeros,
        h=h,
        c=c,
        made_at=0.0,
    )


def evaluate(state: ModelState, msg: Rollout) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunk's log-probabilities and values under `state`'s policy, as the learner's loss computes them."""
    return evaluate_chunk(state.build_policy(), msg)


@pytest.mark.parametrize(
    "surgery", ["widen-lstm 48", "add-observation all + widen-layer core_input 40", "game-version 2 + widen-lstm 40"]
)
def test_a_converted_chunk_is_what_the_new_model_would_have_played(
    surgery: str, trained: ModelState, probes_v1: Probes
) -> None:
    new = apply(parse_ops(surgery.split()), trained)
    old_chunk = rollout_of(trained, probes_v1)
    assert check_rollout(old_chunk, trained.spec, STEPS) == probes_v1.rows
    with pytest.raises(TrainingError, match="architecture"):
        check_rollout(old_chunk, new.spec, STEPS)
    converted = convert_rollout(old_chunk, trained.spec, new.spec)
    assert check_rollout(converted, new.spec, STEPS) == probes_v1.rows
    old_logp, old_value = evaluate(trained, old_chunk)
    new_logp, new_value = evaluate(new, converted)
    assert torch.allclose(
        old_logp, torch.as_tensor(old_chunk.logp), atol=1e-5
    )  # the chunk is on-policy for the old model
    assert (new_logp - old_logp).abs().max() <= 1e-6 and (new_value - old_value).abs().max() <= 1e-6


def test_the_buffer_converts_waiting_chunks_and_accounts_for_every_chunk(
    trained: ModelState, probes_v1: Probes
) -> None:
    new = apply(parse_ops(["widen-lstm", "48"]), trained)
    buffer = ExperienceBuffer(capacity=100, chunk_steps=STEPS, window_s=10.0)
    chunk = rollout_of(trained, probes_v1)
    rows = check_rollout(chunk, trained.spec, STEPS)
    buffer.add(chunk, rows)  # one chunk per row
    buffer.take(2, 0, np.random.default_rng(0))
    buffer.add(chunk, rows)
    waiting = 2 * rows - 2
    assert buffer.convert(trained.spec, new.spec) == (waiting, 0)  # used chunks leave; waiting ones are converted
    counts = buffer.accounting()
    assert counts["chunks_waiting"] == counts["chunks_converted"] == len(buffer) == waiting
    assert all(
        c.arrays["h"].shape == (48,) and c.arrays["obs"].shape == (STEPS, new.spec.obs.size) for c in buffer.chunks
    )
    fates = ("chunks_trained", "chunks_dropped_stale", "chunks_dropped_arch", "chunks_evicted_unused", "chunks_waiting")
    assert counts["chunks_received"] == sum(counts[name] for name in fates) == 2 * rows
    back = apply(parse_ops(["game-version", "2"]), trained)  # no way from 48 LSTM units back to 32: dropped, counted
    assert buffer.convert(new.spec, back.spec) == (0, waiting)
    assert buffer.accounting()["chunks_dropped_arch"] == waiting and len(buffer) == 0


def test_changes_anneal_in_over_versions_and_revert_when_trueskill_falls() -> None:
    annealing = Annealing(versions=4, revert_bound=5.0)
    annealing.rating(9, 12.0)  # the latest rating before the surgery is the baseline
    annealing.start(["recall", GAME_VERSION], 10)
    assert [annealing.shares(v)["recall"] for v in (10, 11, 12, 14, 20)] == [0.0, 0.25, 0.5, 1.0, 1.0]
    assert annealing.rating(11, 7.5) == []  # within the bound
    reverted = annealing.rating(12, 6.9)
    assert sorted(a.name for a in reverted) == [GAME_VERSION, "recall"]
    assert "6.90, more than 5 below 12.00 at the surgery (version 10)" in reverted[0].reverted
    assert annealing.shares(13) == {"recall": 0.0, GAME_VERSION: 0.0}
    assert annealing.rating(13, -50.0) == []  # reverted once, for good


def test_a_finished_anneal_is_not_reverted_and_a_missing_baseline_is_the_first_rating() -> None:
    annealing = Annealing(versions=2, revert_bound=1.0)
    annealing.start(["recall"], 5)
    assert annealing.rating(5, 3.0) == []  # no rating before the surgery: this one is the baseline
    assert [a.name for a in annealing.rating(6, 1.5)] == ["recall"]
    annealing.start(["blink"], 6)
    assert annealing.rating(8, -30.0) == []  # blink reached share 1 at version 8: done, no longer watched
    counters = annealing.to_counters(8)
    assert counters[f"{ANNEAL_COUNTER}blink"] == 1_000_000 and counters[f"{ANNEAL_COUNTER}recall"] == 0
    resumed = Annealing(versions=2, revert_bound=1.0)
    resumed.restore(counters)
    assert resumed.shares(7) == {"recall": 0.0, "blink": 0.5}
    with pytest.raises(Exception, match="at least 1 version"):
        Annealing(versions=0, revert_bound=1.0)


def test_games_outside_the_game_version_share_see_the_version_before() -> None:
    new, old = (obs_spec(2), action_spec(2)), (obs_spec(1), action_spec(1))
    rows = 4
    obs = np.ones((rows, new[0].size), np.float32)
    masks = {
        "type": np.ones((rows, len(new[1].types)), bool),
        **{h.name: np.ones((rows, len(new[1].types), h.size), bool) for h in new[1].heads},
    }
    seen, seen_masks = apply_game_version(obs, masks, np.array([2, 3]), new, old)
    recall = new[1].types.index("recall")
    assert seen_masks["type"][:2, recall].all() and not seen_masks["type"][2:, recall].any()
    kills = new[0].offset("self") + new[0].block("self").features.index("kills")
    assert (seen[:2, kills] == 1).all() and (seen[2:, kills] == 0).all()
    assert seen[2:].sum() == rows // 2 * obs_spec(1).size  # every v1 feature kept
    assert obs.all() and masks["type"].all()  # the inputs are not changed in place
