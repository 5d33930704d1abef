"""The ParamServer's Surgery message: the latest version and the pool operated and verified, all or none."""

from __future__ import annotations

from pathlib import Path

import asyncio

import pytest

from five_actors.actors.messages import GetParams, GetStats, ParamsAvailable, PublishParams, Subscribe, Surgery
from five_actors.actors.param_server import ParamServerActor
from five_actors.actors.params import state_arrays, initial_policy
from five_actors.config import load_config
from five_actors.errors import RemoteError
from five_actors.runtime.actor import Actor, ActorSystem


class Listener(Actor):
    """Records every ParamsAvailable it is told."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str]] = []

    async def on_params_available(self, msg: ParamsAvailable) -> None:
        self.seen.append((msg.version, msg.arch))


async def test_a_live_widen_lstm_operates_latest_and_pool_and_announces_the_new_arch(system: ActorSystem, tmp_path: Path) -> None:
    config = load_config("smoke")
    server = ParamServerActor(config=config, run_dir=str(tmp_path))
    ref = system.spawn(server, "/params")
    assert await system.wait_started(ref) is None
    listener = Listener()
    system.spawn(listener, "/listener")
    await ref.tell(Subscribe(f"{system.node_id}/listener"))
    base = state_arrays(initial_policy(server.spec, 1))
    for version in (1, 2):  # version 2 joins the pool (pool_add_every = 2)
        await ref.tell(PublishParams(version, server.arch, server.spec.to_dict(), base, learner_steps=version))
    old_arch = (await ref.ask(GetStats()))["arch"]

    dry = await ref.ask(Surgery(["widen-lstm", "48"], dry_run=True, probe_steps=16), timeout=120)
    assert dry["dry_run"] and (await ref.ask(GetStats()))["arch"] == old_arch

    with pytest.raises(RemoteError, match="shrink|smaller|remov|cannot"):
        await ref.ask(Surgery(["widen-lstm", "16"], probe_steps=16), timeout=120)
    with pytest.raises(RemoteError, match="unknown operation"):
        await ref.ask(Surgery(["frobnicate"], probe_steps=16), timeout=120)
    assert (await ref.ask(GetStats()))["version"] == 2

    first = asyncio.ensure_future(ref.ask(Surgery(["widen-lstm", "48"], probe_steps=16), timeout=120))
    await asyncio.sleep(0)  # the first is delivered before the second
    with pytest.raises(RemoteError, match="already in flight"):
        await ref.ask(Surgery(["widen-lstm", "64"], probe_steps=16), timeout=120)
    report = await first
    assert report["version_to"] == 3 and report["changes"]["widths"]["lstm_size"] == [32, 48]
    assert sorted(report["versions_operated"]) == [2]
    stats = await ref.ask(GetStats())
    assert stats["arch"] != old_arch and stats["arch"] == report["changes"]["architecture"]["to"]
    params = await ref.ask(GetParams(-1))
    assert params.spec["lstm_size"] == 48 and params.version == 3
    pool_member = await ref.ask(GetParams(2))
    assert pool_member.arch == stats["arch"]
    assert listener.seen[-1] == (3, stats["arch"])
    # The old architecture's parameters are refused from now on.
    await ref.tell(PublishParams(4, old_arch, {}, base, learner_steps=4))
    assert (await ref.ask(GetStats()))["version"] == 3

    # A resumed run continues on the new architecture, its pool member too.
    await system.stop(ref)
    resumed = ParamServerActor(config=config, run_dir=str(tmp_path))
    ref = system.spawn(resumed, "/params2")
    assert await system.wait_started(ref) is None
    stats = await ref.ask(GetStats())
    assert stats["arch"] == report["changes"]["architecture"]["to"] and stats["version"] == 3
    assert (await ref.ask(GetParams(2))).spec["lstm_size"] == 48


async def test_publishes_are_kept_while_the_pool_is_operated_and_the_newest_is_operated_last(system: ActorSystem, tmp_path: Path) -> None:
    config = load_config("smoke")
    server = ParamServerActor(config=config, run_dir=str(tmp_path))
    ref = system.spawn(server, "/params")
    assert await system.wait_started(ref) is None
    base = state_arrays(initial_policy(server.spec, 1))
    for version in range(1, 7):  # versions 2, 4 and 6 join the pool
        await ref.tell(PublishParams(version, server.arch, server.spec.to_dict(), base, learner_steps=version))
    surgery = asyncio.ensure_future(ref.ask(Surgery(["widen-lstm", "48"], probe_steps=16), timeout=120))
    await asyncio.sleep(0)
    # Arrives while the probes are recorded: training has not paused yet, so the version is kept and operated.
    await ref.tell(PublishParams(7, server.arch, server.spec.to_dict(), base, learner_steps=7))
    report = await surgery
    assert (report["version_from"], report["version_to"]) == (7, 8)
    assert report["versions_operated"] == [2, 4, 6, 7]
    assert 0.0 <= report["pause_seconds"] < report["seconds"]
    stats = await ref.ask(GetStats())
    assert stats["refused"] == 0 and stats["published"] == 7 and stats["version"] == 8
