"""A learner hears ParamsAvailable from the ParamServer: an announcement the server cannot back must not freeze it
(issue 14)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from five_actors.actors.messages import GetStats, ParamsAvailable
from five_actors.bench.learning import synthetic_rollout, tiny_config
from five_actors.runtime.actor import ActorSystem
from tests.actors.test_learning import start_learner, start_server, wait_for

pytestmark = pytest.mark.timeout(120)


async def test_a_bogus_architecture_announcement_is_dropped_after_one_check_and_training_goes_on(
    system: ActorSystem, tmp_path: Path
) -> None:
    config = tiny_config(minibatch_chunks=4, buffer_chunks=16, max_sample_reuse=2.0, publish_every=1, max_staleness=8)
    server, _ = await start_server(system, config, tmp_path)
    learner, ref = await start_learner(system, config, params="test/params")
    await ref.tell(ParamsAvailable(10**12, "bogus", {}))
    await ref.tell(synthetic_rollout(learner.spec, 16, 4, 0, seed=1))
    await wait_for(lambda: learner.trainer.steps >= 2)
    await asyncio.sleep(0.5)
    await ref.tell(synthetic_rollout(learner.spec, 16, 4, learner.trainer.version, seed=2))
    await wait_for(lambda: learner.trainer.steps >= 4)  # the old code switched "architecture" every round instead
    stats = await ref.ask(GetStats())
    assert stats["arch"] == server.arch and stats["chunks_trained"] >= 8
