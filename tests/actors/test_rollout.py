"""GameActor + InferenceActor: real actors in one process with a tiny model and a few short games."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from five_actors.actors.game import GameActor, row_versions
from five_actors.actors.inference import LATEST, InferenceActor
from five_actors.actors.messages import ChunkFates, GetStats, InferRequest, PublishParams, Rollout
from five_actors.actors.param_server import ParamServerActor
from five_actors.actors.params import initial_policy, model_spec, state_arrays
from five_actors.config import Config, from_mapping, load_config
from five_actors.errors import ArchMismatch, RemoteError, StateUnavailable, VersionUnavailable
from five_actors.model.policy import Policy
from five_actors.model.ppo import gae
from five_actors.model.spec import ModelSpec
from five_actors.runtime.actor import Actor, ActorSystem
from tests.actors.support import evaluate_chunk

CHUNK = 8
WINDOW = 8
GAMES = 2


def tiny_config(**training: Any) -> Config:
    """A tiny model, two short games per actor, 8-step chunks."""
    return from_mapping(
        Config,
        {
            "game": {"time_limit_steps": 40, "heroes_per_side": 2, "lanes": 1},
            "model": {"entity_hidden": 8, "entity_embed": 8, "core_input": 16, "lstm_size": 16, "pointer_key": 4},
            "training": {
                "games_per_actor": GAMES,
                "rollout_chunk_steps": CHUNK,
                "gae_window": WINDOW,
                "past_opponent_share": 0.0,
                "inference_deadline_ms": 1.0,
                "infer_timeout_s": 2.0,
                **training,
            },
        },
    )


def publish(policy: Policy, version: int) -> PublishParams:
    """What learner rank 0 tells the ParamServer for a new version."""
    return PublishParams(version, policy.spec.hash, policy.spec.to_dict(), state_arrays(policy), version * 10)


class LearnerStandIn(Actor):
    """Keeps every Rollout it is told."""

    def __init__(self) -> None:
        self.rollouts: list[Rollout] = []

    async def on_rollout(self, msg: Rollout) -> None:
        self.rollouts.append(msg)


async def until(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    """Wait until `predicate()` holds; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


def start(
    system: ActorSystem,
    config: Config,
    games: int = 1,
    learners: int = 1,
) -> tuple[ParamServerActor, InferenceActor, list[GameActor], list[LearnerStandIn]]:
    """A ParamServer (version 0, no run dir), one InferenceActor, `games` GameActors, `learners` learner stand-ins."""
    server = ParamServerActor(config=config)
    system.spawn(server, "/params")
    inference = InferenceActor("test/params", config=config)
    system.spawn(inference, "/inference")
    learner_actors = [LearnerStandIn() for _ in range(learners)]
    for i, learner in enumerate(learner_actors):
        system.spawn(learner, f"/learner-{i}")
    game_actors = []
    for i in range(games):
        game = GameActor(
            "test/inference", [f"test/learner-{j}" for j in range(learners)], "test/params", config=config, seed=i
        )
        system.spawn(game, f"/game-{i}")
        game_actors.append(game)
    return server, inference, game_actors, learner_actors


def request(spec: ModelSpec, obs: np.ndarray, h: np.ndarray, c: np.ndarray, **fields: Any) -> InferRequest:
    """An InferRequest of `obs`'s rows with every action legal, all on the latest version."""
    rows, types, heads = len(obs), len(spec.actions.types), spec.actions.heads
    masks = {"type": np.ones((rows, types), bool), **{h.name: np.ones((rows, types, h.size), bool) for h in heads}}
    return InferRequest(obs, masks, h, c, np.full(rows, -1, np.int64), spec.hash, **fields)


def assert_matches_a_local_forward(policy: Policy, rollout: Rollout) -> None:
    """The parameters, run locally over the chunk from its stored LSTM state, give the log-probabilities and values
    the inference actor produced."""
    logp, value = evaluate_chunk(policy, rollout)
    np.testing.assert_allclose(logp.numpy(), rollout.logp, atol=1e-4)
    np.testing.assert_allclose(policy.value_norm.denormalize(value).numpy(), rollout.values, atol=1e-4)


async def test_rollout_chunks_have_the_contract_shapes_and_match_a_local_forward(system: ActorSystem) -> None:
    config = tiny_config()
    server, inference, (game,), (learner,) = start(system, config)
    policy = initial_policy(model_spec(config), config.training.seed)
    await system.wait_started(server.ref)
    await server.ref.tell(publish(policy, 3))
    # Chunks begun before version 3 reached the inference actor carry version 0; the rest are consecutive.
    played_by_3 = lambda: [r for r in learner.rollouts if r.versions[0] == 3]  # noqa: E731
    await until(lambda: len(played_by_3()) >= 3)
    rollouts = played_by_3()
    rollout = rollouts[0]
    spec = policy.spec
    rows = GAMES * 2 * config.game.heroes_per_side
    T, B, D, H = CHUNK, rows, spec.obs.size, spec.lstm_size
    assert rollout.arch == spec.hash and rollout.source == "test/game-0"
    assert rollout.versions.dtype == np.int64 and rollout.versions.tolist() == [3] * B
    assert rollout.obs.shape == (T, B, D) and rollout.obs.dtype == np.float32
    assert rollout.actions.shape == (T, B, spec.actions.columns) and rollout.actions.dtype == np.int64
    for name in ("logp", "values", "rewards", "advantages", "returns"):
        assert getattr(rollout, name).shape == (T, B) and getattr(rollout, name).dtype == np.float32, name
    for name in ("dones", "starts"):
        assert getattr(rollout, name).shape == (T, B) and getattr(rollout, name).dtype == np.bool_, name
    assert rollout.h.shape == (B, H) and rollout.c.shape == (B, H)
    assert set(rollout.masks) == {"type", *(h.name for h in spec.actions.heads)}
    assert rollout.masks["type"].shape == (T, B, len(spec.actions.types))
    np.testing.assert_allclose(rollout.returns, rollout.advantages + rollout.values, rtol=1e-5, atol=1e-5)
    assert learner.rollouts[0].starts[0].all(), "the first chunk starts every game"

    # The LSTM state held by the inference actor between steps is the one each chunk stored.
    for rollout in rollouts[:3]:
        assert_matches_a_local_forward(policy, rollout)
    # Consecutive chunks continue each other, and a chunk's GAE looked WINDOW (= CHUNK) steps
    # past it, bootstrapping from the value after the window.
    first, second, third = rollouts[:3]
    np.testing.assert_array_equal(second.starts[0], first.dones[-1])
    span = {
        k: torch.from_numpy(np.concatenate([getattr(first, k), getattr(second, k)]))
        for k in ("rewards", "values", "dones")
    }
    gamma = config.ppo.gamma(1.0 / config.game.steps_per_second)
    advantages, _ = gae(
        span["rewards"], span["values"], span["dones"], torch.from_numpy(third.values[0]), gamma, config.ppo.gae_lambda
    )
    np.testing.assert_allclose(first.advantages, advantages[:CHUNK].numpy(), rtol=1e-5, atol=1e-5)

    stats = await system.ref("/game-0").ask(GetStats())
    assert stats["chunks_sent"] >= 3 * B and stats["chunks_lost"] == 0 and stats["env_steps"] > 0
    assert set(stats["rewards"]) >= {"win", "xp", "gold", "last_hit"}
    istats = await system.ref("/inference").ask(GetStats())
    assert istats["forwards"] > 0 and istats["latency_p99_ms"] >= istats["latency_p50_ms"] > 0
    assert istats["version"] == 3


async def test_one_inference_actor_merges_two_game_actors_requests_into_one_forward(system: ActorSystem) -> None:
    rows = GAMES * 2 * 2
    # Room for both actors' rows and a deadline far beyond a step: a forward waits for both.
    config = tiny_config(inference_batch_rows=2 * rows, inference_deadline_ms=2000.0)
    _, inference, games, (learner,) = start(system, config, games=2)
    await until(lambda: inference.forwards >= 20)
    assert inference.stats()["mean_batch_rows"] > 1.5 * rows
    await until(lambda: {r.source for r in learner.rollouts} == {"test/game-0", "test/game-1"})


async def test_a_request_that_no_other_could_join_is_answered_without_waiting_out_the_deadline(
    system: ActorSystem,
) -> None:
    rows = GAMES * 2 * 2
    # A second request would not fit the batch: each runs alone, at once, not after the 2 s deadline.
    config = tiny_config(inference_batch_rows=rows + rows // 2, inference_deadline_ms=2000.0)
    _, inference, _, _ = start(system, config)
    await until(lambda: inference.forwards >= 1)
    began = time.monotonic()
    await until(lambda: inference.forwards >= 21, timeout=20.0)
    assert time.monotonic() - began < 10.0, "20 forwards took a deadline each"
    assert inference.stats()["mean_batch_rows"] == rows


async def test_after_an_inference_restart_mid_chunk_rows_go_on_from_a_zero_state_that_the_chunk_records(
    system: ActorSystem,
) -> None:
    config = tiny_config()
    server, _, (game,), (learner,) = start(system, config)
    policy = initial_policy(model_spec(config), config.training.seed)
    await system.wait_started(server.ref)
    await server.ref.tell(publish(policy, 3))
    await until(lambda: any(r.versions[0] == 3 for r in learner.rollouts))
    # A restart lands inside a chunk 7 times in 8 (8-step chunks): the state held there is lost.
    for _ in range(20):
        await system.stop("/inference")
        system.spawn(InferenceActor("test/params", config=config), "/inference")
        resets, sent = game.state_resets, len(learner.rollouts)
        await until(lambda: len(learner.rollouts) >= sent + 2)
        if game.state_resets > resets:
            break
    assert game.state_resets >= 1 and game.stats()["state_resets"] == game.state_resets
    reset = [r for r in learner.rollouts[sent:] if r.starts[1:].all(axis=1).any()]
    assert reset, "a chunk marks the step every row went on from a zero state as an episode start"
    for rollout in learner.rollouts[sent:]:
        assert_matches_a_local_forward(policy, rollout)


async def test_games_survive_an_inference_restart_and_count_the_lost_steps(system: ActorSystem) -> None:
    config = tiny_config()
    _, inference, (game,), (learner,) = start(system, config)
    await until(lambda: len(learner.rollouts) >= 1)
    assert await system.stop("/inference") == "shutdown"
    steps = game.batch_steps
    await until(lambda: game.lost_steps >= 2)
    assert game.batch_steps <= steps + 1, "no step is taken without inference"
    system.spawn(InferenceActor("test/params", config=config), "/inference")
    sent = len(learner.rollouts)
    await until(lambda: len(learner.rollouts) >= sent + 3)
    assert system.is_alive("/game-0")
    stats = await system.ref("/game-0").ask(GetStats())
    assert stats["lost_steps"] >= 2 and stats["batch_steps"] > steps


async def test_the_inference_actor_holds_each_game_actors_lstm_state_between_its_steps(system: ActorSystem) -> None:
    config = tiny_config()
    start(system, config, games=0)
    spec = model_spec(config)
    ref = system.ref("/inference")
    rows, H = 3, spec.lstm_size
    rng = np.random.default_rng(0)
    obs = [rng.standard_normal((rows, spec.obs.size)).astype(np.float32) for _ in range(3)]
    zero, held = np.zeros((rows, H), np.float32), np.zeros((0, H), np.float32)

    async def ask(step: int, state: tuple[np.ndarray, np.ndarray], stream: str = "a", **fields: Any) -> Any:
        return await ref.ask(request(spec, obs[step], *state, stream=stream, seq=step, **fields), timeout=30)

    first = await ask(0, (zero, zero), want_state=True)
    second = await ask(1, (held, held), want_state=True)  # from the state step 0 left, held by the actor
    given = await ask(1, (first.h, first.c), stream="b", want_state=True)  # the same step, the state sent
    assert second.h.shape == (rows, H) and np.abs(second.h).sum() > 0
    np.testing.assert_allclose(second.value, given.value, atol=1e-6)
    np.testing.assert_allclose(second.h, given.h, atol=1e-6)
    retried = await ask(1, (held, held))  # asked again (a retry): from the state the first answer started from
    np.testing.assert_allclose(retried.value, second.value, atol=1e-6)
    assert retried.h.shape == (0, H), "the state comes back only when asked for"
    # The value of rows 0 and 2 from the state step 1 left, without moving the stream on.
    picked = np.array([0, 2])
    peek = await ref.ask(
        request(spec, obs[2][picked], held[:0], held[:0], stream="a", seq=1, rows=picked, advance=False), timeout=30
    )
    sent = await ref.ask(request(spec, obs[2][picked], second.h[picked], second.c[picked], stream="c"), timeout=30)
    np.testing.assert_allclose(peek.value, sent.value, atol=1e-6)
    # Step 2 with row 0's episode begun: its state starts from zero.
    starts = np.array([True, False, False])
    third = await ask(2, (held, held), starts=starts, want_state=True)
    fresh = second.h * ~starts[:, None], second.c * ~starts[:, None]
    np.testing.assert_allclose(third.h, (await ask(2, fresh, stream="d", want_state=True)).h, atol=1e-6)

    with pytest.raises(RemoteError, match="no LSTM state is held for 'nobody'") as refused:
        await ask(1, (held, held), stream="nobody")
    assert refused.value.is_a(StateUnavailable)  # game actors act on the type: they go on from a zero state
    with pytest.raises(RemoteError, match="step 7 of 'a' does not follow its held step 2"):
        await ref.ask(request(spec, obs[0], held, held, stream="a", seq=7), timeout=30)
    with pytest.raises(RemoteError, match="names no stream"):
        await ref.ask(request(spec, obs[0], held, held), timeout=30)
    with pytest.raises(RemoteError, match=rf"h must be float32 \[{rows}, {H}\] \(or \[0, {H}\]"):
        await ref.ask(request(spec, obs[0], zero[:1], zero[:1], stream="a", seq=3), timeout=30)
    assert (await ask(2, (zero, zero), stream="e")).arch == spec.hash, "the actor goes on after refusing"


async def test_a_request_of_another_arch_or_shape_is_refused_with_a_clear_error(system: ActorSystem) -> None:
    config = tiny_config()
    policy = initial_policy(model_spec(config), config.training.seed)
    start(system, config, games=0)
    spec = policy.spec
    rows, D, H = 3, spec.obs.size, spec.lstm_size
    zero = np.zeros((rows, H), np.float32)
    good = request(spec, np.zeros((rows, D), np.float32), zero, zero)
    masks = good.masks
    ref = system.ref("/inference")
    reply = await ref.ask(good, timeout=30)
    assert reply.actions.shape == (rows, spec.actions.columns) and reply.versions.tolist() == [0] * rows
    with pytest.raises(RemoteError, match="arch 'deadbeef'") as refused:
        await ref.ask(InferRequest(good.obs, masks, good.h, good.c, good.versions, "deadbeef"))
    assert refused.value.is_a(ArchMismatch)  # the type crosses the wire: game actors act on it, not on the text
    with pytest.raises(RemoteError, match=rf"obs must be float32 \[rows, {D}\]"):
        await ref.ask(
            InferRequest(np.zeros((rows, D + 1), np.float32), masks, good.h, good.c, good.versions, spec.hash)
        )
    with pytest.raises(RemoteError, match=r"h must be float32"):
        await ref.ask(
            InferRequest(good.obs, masks, np.zeros((rows, H + 1), np.float32), good.c, good.versions, spec.hash)
        )
    with pytest.raises(
        RemoteError, match="policy version 7 is not available: .*unknown parameter version 7"
    ) as refused:
        await ref.ask(InferRequest(good.obs, masks, good.h, good.c, np.full(rows, 7, np.int64), spec.hash))
    assert refused.value.is_a(VersionUnavailable) and not refused.value.is_a(ArchMismatch)
    assert (await ref.ask(good)).arch == spec.hash, "the actor goes on after refusing"


def test_the_default_inference_cache_holds_every_opponent_pool_version() -> None:
    """A smaller cache than the versions the games play makes every batch fetch past versions again."""
    for name in ("default", "cluster"):
        training = load_config(name).training
        assert training.inference_cache_versions >= training.pool_max_versions, name


def test_row_versions_put_each_games_past_opponent_on_its_side() -> None:
    versions = row_versions(np.array([LATEST, 5, 9]), np.array([1, 1, 0]), heroes=2)
    assert versions.tolist() == [LATEST] * 4 + [LATEST, LATEST, 5, 5] + [9, 9, LATEST, LATEST]


async def test_past_opponents_meet_the_latest_policy_on_both_sides_and_only_latest_rows_are_shipped(
    system: ActorSystem,
) -> None:
    config = tiny_config(past_opponent_share=1.0, pool_add_every=1, opponent_draw_games=1)
    spec = model_spec(config)
    server = ParamServerActor(config=config)
    system.spawn(server, "/params")
    await system.wait_started(server.ref)
    for version in (1, 2):  # both join the opponent pool; 2 is the latest
        await server.ref.tell(publish(initial_policy(spec, version), version))
    inference = InferenceActor("test/params", config=config)
    system.spawn(inference, "/inference")
    learner = LearnerStandIn()
    system.spawn(learner, "/learner-0")
    game = GameActor("test/inference", ["test/learner-0"], "test/params", config=config, seed=0)
    system.spawn(game, "/game-0")
    # The games last 40 steps; each ends with a MatchResult against a pool member.
    await until(lambda: server.counts["wins"] + server.counts["draws"] + server.counts["losses"] >= 2 * GAMES)
    await until(lambda: 1 in inference.past)
    heroes = config.game.heroes_per_side
    # Every game had one team on a pool member: only the other team's rows are learned from.
    assert all(r.versions.tolist() == [2] * (GAMES * heroes) for r in learner.rollouts)
    stats = game.stats()  # the latest policy met past opponents as team 0 in some games and as team 1 in others
    assert stats["past_opponent_games_as_team0"] >= 1 and stats["past_opponent_games_as_team1"] >= 1
    # A new version is announced, fetched, and plays the latest rows.
    await server.ref.tell(publish(initial_policy(spec, 3), 3))
    await until(lambda: any(3 in r.versions.tolist() for r in learner.rollouts))


@pytest.mark.parametrize(("draw_games", "per_draw"), [(0, 4), (1, 1)])
async def test_one_draw_from_the_pool_serves_as_many_past_opponent_games_as_the_actor_plays_at_once(
    system: ActorSystem, draw_games: int, per_draw: int
) -> None:
    # 8 games, half against past versions: by default a drawn version serves 4 games, so a batch holds few
    # past versions (a forward pass each on the inference actor); opponent_draw_games = 1 draws per game.
    config = tiny_config(games_per_actor=8, past_opponent_share=0.5, pool_add_every=1, opponent_draw_games=draw_games)
    spec = model_spec(config)
    server, _, (game,), _ = start(system, config)
    for version in (1, 2, 3, 4):
        await server.ref.tell(publish(initial_policy(spec, version), version))
    await until(lambda: game.past_games >= 12)
    stats = game.stats()
    assert stats["past_opponent_draws"] == math.ceil(stats["past_opponent_games"] / per_draw)


async def test_chunks_for_a_learner_that_is_down_are_counted_lost(system: ActorSystem) -> None:
    config = tiny_config()
    system.spawn(ParamServerActor(config=config), "/params")
    system.spawn(InferenceActor("test/params", config=config), "/inference")
    game = GameActor("test/inference", ["test/nobody"], "test/params", config=config, seed=0)
    system.spawn(game, "/game-0")
    await until(lambda: game.ledger.lost > 0)
    assert game.ledger.sent_total == 0


async def test_inference_follows_a_restarted_param_server_back_to_its_versions(system: ActorSystem) -> None:
    config = tiny_config()
    spec = model_spec(config)
    server, inference, _, _ = start(system, config, games=0)
    await until(lambda: inference.version == 0)
    await server.ref.tell(publish(initial_policy(spec, 5), 5))
    await until(lambda: inference.version == 5)
    await system.stop("/params")
    # Without a run dir the new ParamServer starts again from version 0: the inference actor
    # subscribes again and follows it rather than keeping parameters the server no longer has.
    restarted = ParamServerActor(config=config)
    system.spawn(restarted, "/params")
    await until(lambda: inference.version == 0)
    await restarted.ref.tell(publish(initial_policy(spec, 1), 1))
    await until(lambda: inference.version == 1)


async def test_a_game_actor_moves_on_to_another_inference_actor_when_one_dies(system: ActorSystem) -> None:
    config = tiny_config()
    system.spawn(ParamServerActor(config=config), "/params")
    first, second = InferenceActor("test/params", config=config), InferenceActor("test/params", config=config)
    system.spawn(first, "/inference-a")
    system.spawn(second, "/inference-b")
    learner = LearnerStandIn()
    system.spawn(learner, "/learner-0")
    game = GameActor(["test/inference-a", "test/inference-b"], ["test/learner-0"], "test/params", config=config, seed=0)
    system.spawn(game, "/game-0")
    await until(lambda: len(learner.rollouts) >= 1)
    used = "/inference-a" if first.forwards else "/inference-b"
    other = second if used == "/inference-a" else first
    system.kill(used)
    sent = len(learner.rollouts)
    await until(lambda: len(learner.rollouts) >= sent + 3)
    assert other.forwards > 0 and 1 <= game.lost_steps <= 2, "one failed ask, then the other inference actor"


async def test_a_game_actor_holds_back_while_its_learner_has_not_trained_its_chunks(system: ActorSystem) -> None:
    rows = GAMES * 2 * 2  # chunks per ship
    config = tiny_config(minibatch_chunks=rows, max_outstanding_chunks=2 * rows)
    _, _, (game,), (learner,) = start(system, config)
    await until(lambda: len(learner.rollouts) == 2)
    steps = game.batch_steps
    await asyncio.sleep(1.0)  # the stand-in trains nothing: no fate comes back, and the game waits
    assert len(learner.rollouts) == 2 and game.batch_steps == steps
    assert game.stats()["chunks_outstanding"] == 2 * rows
    await system.ref("/game-0").tell(ChunkFates("test/learner-0", "one", trained=rows))
    await until(lambda: len(learner.rollouts) == 3)
    await asyncio.sleep(0.5)
    assert len(learner.rollouts) == 3 and game.stats()["backpressure_s"] >= 1.0


async def test_chunks_are_counted_lost_while_the_learner_is_down_and_flow_again_after_its_restart(
    system: ActorSystem,
) -> None:
    config = tiny_config()
    _, _, (game,), (learner,) = start(system, config)
    await until(lambda: len(learner.rollouts) >= 1)
    await system.stop("/learner-0")
    await until(lambda: game.ledger.lost > 0)
    restarted = LearnerStandIn()
    system.spawn(restarted, "/learner-0")
    await until(lambda: len(restarted.rollouts) >= 2)
    assert system.is_alive("/game-0")
