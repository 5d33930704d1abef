"""ParamServerActor and LearnerActor: versions, the opponent pool, checkpoints and resume,
lockstep allreduced PPO across real learner processes, staleness, reuse, refused chunks."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from five_actors.actors.learner import LearnerActor
from five_actors.actors.messages import (
    GetParams,
    GetStats,
    MatchResult,
    OpponentRequest,
    ParamsAvailable,
    PublishParams,
    Subscribe,
)
from five_actors.actors.param_server import GetOptimizerState, OptimizerState, ParamServerActor
from five_actors.actors.params import initial_policy, model_spec, state_arrays
from five_actors.actors.pool import OpponentPool
from five_actors.bench.learning import free_port, run_world, synthetic_rollout, tiny_config
from five_actors.config import Config
from five_actors.errors import RemoteError
from five_actors.model.ppo import PPO
from five_actors.runtime.actor import Actor, ActorRef, ActorSystem

pytestmark = pytest.mark.timeout(120)


class Subscriber(Actor):
    """Records every ParamsAvailable it is told."""

    def __init__(self) -> None:
        self.seen: list[int] = []

    async def on_params_available(self, msg: ParamsAvailable) -> None:
        self.seen.append(msg.version)


def shifted(state: dict[str, np.ndarray], by: float) -> dict[str, np.ndarray]:
    """A recognisable parameter version: every float parameter moved by `by`."""
    return {
        k: (v + np.asarray(by, v.dtype)) if v.dtype.kind == "f" and "norm" not in k else v for k, v in state.items()
    }


async def start_server(
    system: ActorSystem, config: Config, run_dir: Path | None, path: str = "/params"
) -> tuple[ParamServerActor, ActorRef]:
    server = ParamServerActor(config=config, run_dir=None if run_dir is None else str(run_dir))
    ref = system.spawn(server, path)
    assert await system.wait_started(ref) is None
    return server, ref


_BASES: dict[str, dict[str, np.ndarray]] = {}
"""Version 0's parameters per architecture (building a policy is slow on a busy machine)."""


async def publish(ref: ActorRef, server: ParamServerActor, version: int) -> dict[str, np.ndarray]:
    """Publish version `version` as learner rank 0 would: version 0's parameters shifted by `version`."""
    if server.arch not in _BASES:
        _BASES[server.arch] = state_arrays(initial_policy(server.spec, 0))
    state = shifted(_BASES[server.arch], float(version))
    await ref.tell(PublishParams(version, server.arch, server.spec.to_dict(), state, learner_steps=10 * version))
    await ref.ask(GetStats())  # the mailbox is FIFO: the publish has been handled
    return state


def same_state(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)


# -- the ParamServer --------------------------------------------------------------------------


async def test_versions_advance_subscribers_hear_of_each_and_past_versions_are_served(
    system: ActorSystem, tmp_path: Path
) -> None:
    config = tiny_config(checkpoint_every=2, keep_checkpoints=5, pool_add_every=100)
    server, ref = await start_server(system, config, tmp_path)
    subscriber = Subscriber()
    system.spawn(subscriber, "/sub")
    await ref.tell(Subscribe("test/sub"))
    first = await ref.ask(GetParams())
    assert first.version == 0 and first.arch == model_spec(config).hash

    published = {v: await publish(ref, server, v) for v in (1, 2, 3, 4)}

    latest = await ref.ask(GetParams(-1))
    assert latest.version == 4 and same_state(latest.state, published[4])
    past = await ref.ask(GetParams(2))  # not in memory any more: read back from its checkpoint
    assert past.version == 2 and same_state(past.state, published[2])
    with pytest.raises(RemoteError, match="unknown parameter version 3"):
        await ref.ask(GetParams(3))
    await asyncio.sleep(0.05)
    assert subscriber.seen == [0, 1, 2, 3, 4]
    assert (await ref.ask(GetParams(0))).version == 0  # the untrained reference is always on disk
    names = sorted(p.name for p in (tmp_path / "checkpoints").glob("*.ckpt"))
    assert names == ["v000000000.ckpt", "v000000002.ckpt", "v000000004.ckpt"]


async def test_parameters_of_another_architecture_shape_or_an_old_version_are_refused(system: ActorSystem) -> None:
    server, ref = await start_server(system, tiny_config(), None)
    good = server.versions[0]
    wrong_shape = dict(good)
    name = next(k for k, v in good.items() if v.ndim == 2)
    wrong_shape[name] = np.zeros((3, 3), good[name].dtype)
    spec = server.spec.to_dict()
    await ref.tell(PublishParams(1, "0123456789abcdef", spec, good, 1))
    await ref.tell(PublishParams(1, server.arch, spec, wrong_shape, 1))
    await ref.tell(PublishParams(0, server.arch, spec, good, 1))
    stats = await ref.ask(GetStats())
    assert stats["version"] == 0 and stats["refused"] == 3 and stats["published"] == 0
    assert "not newer" in stats["last_refusal"]
    assert same_state((await ref.ask(GetParams())).state, good)


def test_pool_samples_in_proportion_to_exp_q_and_a_win_lowers_q_by_eta_over_n_p() -> None:
    pool = OpponentPool(eta=0.01)
    assert pool.sample(np.random.default_rng(0)) == -1
    for version in (10, 20, 30):
        pool.add(version)
    pool.quality.update({10: 0.0, 20: math.log(2.0), 30: math.log(5.0)})
    rng = np.random.default_rng(2)
    draws = np.array([pool.sample(rng) for _ in range(20_000)])
    shares = {v: float(np.mean(draws == v)) for v in (10, 20, 30)}
    assert shares == pytest.approx({10: 0.125, 20: 0.25, 30: 0.625}, abs=0.015)

    p20 = pool.probabilities()[20]
    assert pool.record_win(20)
    assert pool.quality[20] == pytest.approx(math.log(2.0) - 0.01 / (3 * p20))
    assert not pool.record_win(99)
    assert pool.add(40) == pytest.approx(math.log(5.0))  # a newcomer gets the pool's best q
    assert pool.evict() == 10 and pool.versions == [20, 30, 40]  # the least likely leaves first


async def test_opponents_come_from_the_pool_and_wins_update_its_quality(system: ActorSystem) -> None:
    server, ref = await start_server(system, tiny_config(pool_add_every=2, pool_eta=0.5, pool_max_versions=2), None)
    assert (await ref.ask(OpponentRequest())).version == -1
    for v in (1, 2, 3, 4, 5, 6):
        await publish(ref, server, v)
    assert server.pool.versions == [4, 6]  # at most pool_max_versions: version 2 left
    assert sorted(server.versions) == [4, 6]
    opponents = {(await ref.ask(OpponentRequest())).version for _ in range(40)}
    assert opponents == {4, 6}
    await ref.tell(MatchResult(opponent_version=4, outcome=1.0))
    await ref.tell(MatchResult(opponent_version=6, outcome=0.0))
    stats = await ref.ask(GetStats())
    assert stats["pool"]["4"]["q"] == pytest.approx(-0.5 / (2 * 0.5))
    assert stats["pool"]["6"]["q"] == 0.0
    assert stats["wins"] == 1 and stats["losses"] == 1


async def test_a_restarted_param_server_resumes_counter_params_optimizer_and_pool(
    system: ActorSystem, tmp_path: Path
) -> None:
    config = tiny_config(checkpoint_every=3, keep_checkpoints=1, pool_add_every=2)
    server, ref = await start_server(system, config, tmp_path)
    moments = {"0.step": np.array(7.0, np.float32)}
    first = next(iter(initial_policy(server.spec, 0).parameters()))
    moments.update(
        {
            "0.exp_avg": np.full(tuple(first.shape), 0.5, np.float32),
            "0.exp_avg_sq": np.full(tuple(first.shape), 0.25, np.float32),
        }
    )
    for v in (1, 2, 3, 4, 5):
        if v == 5:
            await ref.tell(OptimizerState(5, server.arch, moments))
        await publish(ref, server, v)
    await ref.tell(MatchResult(2, 1.0))
    await ref.ask(GetStats())
    q_before = dict(server.pool.quality)
    assert await system.stop(ref) == "shutdown"  # a graceful stop checkpoints version 5
    checkpoints = tmp_path / "checkpoints"
    (checkpoints / "v000000009.ckpt").write_bytes(b"FIVEACTORS-CKPT1 truncated by a crash")
    assert not list(checkpoints.glob(".*tmp*"))

    resumed, ref = await start_server(system, config, tmp_path, "/params2")
    assert resumed.version == 5 and resumed.learner_steps == 50
    assert resumed.pool.quality == q_before and resumed.pool.versions == [2, 4]
    assert (await ref.ask(GetParams(2))).version == 2
    optimizer = await ref.ask(GetOptimizerState())
    assert optimizer.version == 5 and same_state(optimizer.state, moments)
    assert same_state((await ref.ask(GetParams())).state, server.versions[5])
    kept = sorted(p.name for p in checkpoints.glob("v*.ckpt"))  # the latest and the pool's
    assert kept == ["v000000000.ckpt", "v000000002.ckpt", "v000000004.ckpt", "v000000005.ckpt", "v000000009.ckpt"]


# -- the learners -----------------------------------------------------------------------------


def test_two_learner_processes_average_gradients_end_with_identical_parameters_and_stop_together(
    tmp_path: Path,
) -> None:
    training = {"minibatch_chunks": 4, "buffer_chunks": 8, "max_sample_reuse": 1.0}
    # Rank 0 is stopped after its step; rank 1 would wait for fresh chunks for a minute, but leaves with it.
    rank0, rank1 = run_world(_two_ranks(training, steps=[1, 1000]), tmp_path)
    assert rank0["stats"]["steps"] == rank1["stats"]["steps"] == 1
    assert not rank1["alive"] and rank1["elapsed_s"] < 50
    for name in rank0["params"]:
        np.testing.assert_array_equal(rank0["params"][name], rank1["params"][name], err_msg=name)

    # The same step in one process: the mean of the two ranks' gradients, clipped, one Adam step.
    config = tiny_config(**training)
    spec = model_spec(config)
    policy = initial_policy(spec, config.training.seed)
    ppo = PPO(policy, config.ppo)
    batches = [_as_chunks(synthetic_rollout(spec, 16, 4, 0, 100 + r)) for r in range(2)]
    policy.value_norm.update(batches[0].returns)
    grads = []
    for batch in batches:
        terms, _ = ppo.loss(batch)
        ppo.optimizer.zero_grad()
        ppo.total_loss(terms).backward()
        grads.append({n: p.grad.clone() for n, p in policy.named_parameters()})
    for n, p in policy.named_parameters():
        p.grad = (grads[0][n] + grads[1][n]) / 2
    ppo._clip_gradients()
    for n, p in policy.named_parameters():
        np.testing.assert_allclose(rank0["grads"][n], p.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=n)
        np.testing.assert_allclose(rank1["grads"][n], p.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=n)
    ppo.optimizer.step()
    policy.update_normalizer(batches[0].obs)
    for name, expected in state_arrays(policy).items():
        np.testing.assert_allclose(rank0["params"][name], expected, rtol=1e-4, atol=1e-5, err_msg=name)


def test_a_learner_group_skips_a_step_on_the_ranks_mean_kl_even_where_one_rank_alone_would_step(
    tmp_path: Path,
) -> None:
    training = {"minibatch_chunks": 4, "buffer_chunks": 8, "max_sample_reuse": 1.0}
    config = tiny_config(**training)
    spec = model_spec(config)
    policy = initial_policy(spec, config.training.seed)
    kls = [PPO(policy, config.ppo).loss(_as_chunks(synthetic_rollout(spec, 16, 4, 0, 100 + r)))[1] for r in range(2)]
    low, mean = min(s["approx_kl"] for s in kls), sum(s["approx_kl"] for s in kls) / 2
    assert low < mean  # the synthetic logp differ per rank, so the ranks' KLs do
    kl_stop = (low + mean) / 2  # the lower rank alone would step; the group's mean says skip
    ranks = run_world(_two_ranks(training, steps=[1, 1], ppo={"kl_stop": kl_stop}), tmp_path)
    assert min(rank["stats"]["approx_kl"] for rank in ranks) < kl_stop  # each rank logs its own KL
    for rank in ranks:
        assert rank["stats"]["steps"] == 1 and rank["stats"]["kl_stopped_steps"] == 1
        for name, p in policy.named_parameters():  # an Adam step moves each weight by about lr = 2.5e-4
            np.testing.assert_allclose(rank["params"][name], p.detach().numpy(), rtol=0, atol=1e-5, err_msg=name)


def _two_ranks(training: dict[str, Any], steps: list[int], ppo: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Jobs for a learner group of two ranks on one free port, rank r fed 4 synthetic chunks of seed 100 + r and
    stopped after steps[r] steps (or a minute)."""
    port = free_port()
    return [
        {
            "rank": r,
            "world_size": 2,
            "port": port,
            "training": training,
            "ppo": ppo or {},
            "chunks": 4,
            "rollout_seeds": [100 + r],
            "steps": steps[r],
            "seconds": 60,
        }
        for r in range(2)
    ]


def _as_chunks(rollout: Any) -> Any:
    from five_actors.actors.buffer import ExperienceBuffer, to_chunks

    buffer = ExperienceBuffer(64, 16, 30.0)
    buffer.add(rollout, rollout.versions.shape[0])
    return to_chunks(list(buffer.chunks), torch.device("cpu"))


async def start_learner(
    system: ActorSystem, config: Config, path: str = "/learner", params: str = ""
) -> tuple[LearnerActor, ActorRef]:
    learner = LearnerActor(params=params, config=config)
    ref = system.spawn(learner, path)
    assert await system.wait_started(ref) is None
    return learner, ref


async def wait_for(condition: Any, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


async def test_learner_reports_staleness_and_reuse_and_waits_for_fresh_chunks(system: ActorSystem) -> None:
    config = tiny_config(minibatch_chunks=4, buffer_chunks=16, max_sample_reuse=2.0, publish_every=1, max_staleness=8)
    learner, ref = await start_learner(system, config)
    await ref.tell(synthetic_rollout(learner.spec, 16, 4, 0, seed=1))
    await wait_for(lambda: learner.trainer.steps == 2)
    await asyncio.sleep(0.2)
    stats = await ref.ask(GetStats())
    assert stats["steps"] == 2  # reuse would pass 2.0 with a third step: the learner waits
    assert stats["sample_reuse"] == 2.0
    assert stats["staleness_max"] == 1.0  # the second step trained version 1 on version-0 chunks
    assert stats["version"] == 2 and stats["chunks_received"] == 4
    assert set(stats) >= {"policy_loss", "value_loss", "entropy", "samples_per_s", "allreduce_ms"}
    await ref.tell(synthetic_rollout(learner.spec, 16, 4, 2, seed=2))  # fresh chunks: training resumes
    await wait_for(lambda: learner.trainer.steps > 2)


async def test_too_stale_chunks_are_dropped_and_counted(system: ActorSystem) -> None:
    config = tiny_config(minibatch_chunks=4, buffer_chunks=16, max_sample_reuse=4.0, publish_every=1, max_staleness=0)
    learner, ref = await start_learner(system, config)
    await ref.tell(synthetic_rollout(learner.spec, 16, 12, 0, seed=1))
    await wait_for(lambda: learner.trainer.steps == 1)
    await asyncio.sleep(0.2)
    stats = await ref.ask(GetStats())
    assert stats["steps"] == 1 and stats["chunks_dropped_stale"] == 8 and stats["buffer_chunks"] == 0


async def test_wrong_arch_or_misshapen_chunks_are_refused_and_counted(system: ActorSystem) -> None:
    config = tiny_config(minibatch_chunks=2, buffer_chunks=4, max_sample_reuse=1.0)
    learner, ref = await start_learner(system, config)
    good = synthetic_rollout(learner.spec, 16, 2, 0, seed=3)
    await ref.tell(dataclasses.replace(good, arch="f" * 16))
    await ref.tell(dataclasses.replace(good, obs=good.obs[:8]))
    await ref.tell(dataclasses.replace(good, masks={"type": good.masks["type"]}))
    stats = await ref.ask(GetStats())
    assert stats["chunks_refused"] == 6 and stats["chunks_received"] == 0 and stats["steps"] == 0


async def test_learners_publish_to_the_param_server_and_a_restarted_learner_continues_from_it(
    system: ActorSystem, tmp_path: Path
) -> None:
    config = tiny_config(
        minibatch_chunks=4, buffer_chunks=16, max_sample_reuse=2.0, publish_every=1, checkpoint_every=1
    )
    server, server_ref = await start_server(system, config, tmp_path)
    learner, ref = await start_learner(system, config, params="test/params")
    await ref.tell(synthetic_rollout(learner.spec, 16, 4, 0, seed=5))
    await wait_for(lambda: server.version == 2)
    published = (await server_ref.ask(GetParams())).state
    assert same_state(published, await learner.thread.run(lambda: state_arrays(learner.trainer.policy)))
    assert (await server_ref.ask(GetOptimizerState())).version == 2
    await system.stop(ref)

    again, _ = await start_learner(system, config, "/learner2", params="test/params")
    trainer = again.trainer
    assert trainer.version == 2 and trainer.ppo.optimizer.state_dict()["state"]  # Adam's moments came back too
    assert same_state(await again.thread.run(lambda: state_arrays(again.trainer.policy)), published)


STOP_WHILE_TRAINING = """
import asyncio, time, torch
from five_actors.actors.group import TorchThread

def busy() -> None:
    x = torch.randn(300, 300, requires_grad=True)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        (x @ x).relu().sum().backward()

async def main() -> None:
    thread = TorchThread("learner-test")
    job = asyncio.ensure_future(thread.run(busy))
    await asyncio.sleep(0.5)  # the job is inside torch now, as a training round is when a learner stops
    job.cancel()
    assert await thread.finish(30.0)

asyncio.run(main())
"""


def test_a_learner_stopping_mid_round_lets_its_torch_thread_finish_before_the_process_exits() -> None:
    # A daemon thread still inside torch at interpreter exit aborts the process from C++.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", STOP_WHILE_TRAINING], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "terminate called" not in done.stderr
