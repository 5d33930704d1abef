"""The ParamServer's Surgery message: the latest version operated, verified and handed over, then the pool."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from five_actors.actors.messages import (
    EvalRating,
    GetParams,
    GetStats,
    OpponentRequest,
    ParamsAvailable,
    PublishParams,
    Subscribe,
    Surgery,
)
from five_actors.actors.param_server import ParamServerActor
from five_actors.actors.params import initial_policy, state_arrays
from five_actors.config import Config, load_config
from five_actors.errors import RemoteError
from five_actors.game.spec import sized_config
from five_actors.model.spec import ModelSpec
from five_actors.runtime.actor import Actor, ActorRef, ActorSystem


class Listener(Actor):
    """Records every ParamsAvailable it is told."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str]] = []
        self.shares: list[dict[str, float]] = []

    async def on_params_available(self, msg: ParamsAvailable) -> None:
        self.seen.append((msg.version, msg.arch))
        self.shares.append(dict(msg.anneal))


async def listened(system: ActorSystem, config: Config, run_dir: Path) -> tuple[ParamServerActor, ActorRef, Listener]:
    """A started ParamServer of `config` with a Listener subscribed to it."""
    server = ParamServerActor(config=config, run_dir=str(run_dir))
    ref = system.spawn(server, "/params")
    assert await system.wait_started(ref) is None
    listener = Listener()
    system.spawn(listener, "/listener")
    await ref.tell(Subscribe(f"{system.node_id}/listener"))
    return server, ref, listener


async def test_a_live_widen_lstm_operates_latest_and_pool_and_announces_the_new_arch(
    system: ActorSystem, tmp_path: Path
) -> None:
    config = load_config("smoke")
    server, ref, listener = await listened(system, config, tmp_path)
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


async def test_publishes_during_the_probes_are_kept_and_operated(system: ActorSystem, tmp_path: Path) -> None:
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
    assert report["versions_operated"] == [2, 4, 6, 7] and report["pool_dropped"] == {}
    assert 0.0 <= report["pause_seconds"] < report["in_play_seconds"] < report["seconds"]
    stats = await ref.ask(GetStats())
    assert stats["refused"] == 0 and stats["published"] == 7 and stats["version"] == 8


async def test_with_a_pool_of_32_the_new_architecture_plays_within_seconds_and_the_pool_follows(
    system: ActorSystem, tmp_path: Path
) -> None:
    """The pause and the time to the new architecture do not grow with the pool: its members are operated after the
    hand-over, each rejoining the pool as it is done, while the new architecture's publishes are taken."""
    config = load_config("smoke", ["training.pool_max_versions=32"])
    server = ParamServerActor(config=config, run_dir=str(tmp_path))
    ref = system.spawn(server, "/params")
    assert await system.wait_started(ref) is None
    base = state_arrays(initial_policy(server.spec, 1))
    for version in range(1, 66):  # every second one joins the pool: 32 members, and the latest (65) is not one
        await ref.tell(PublishParams(version, server.arch, server.spec.to_dict(), base, learner_steps=version))
    old_arch = server.arch
    assert (await ref.ask(GetStats()))["pool_size"] == 32  # asked after the tells: they are in
    surgery = asyncio.ensure_future(ref.ask(Surgery(["widen-lstm", "48"], probe_steps=16), timeout=300))
    while server.arch == old_arch:
        await asyncio.sleep(0.01)
    new = await ref.ask(GetParams(-1))
    shapes = {k: v.shape for k, v in new.state.items()}
    waiting = [(await ref.ask(GetStats()))["surgery_pool_waiting"]]
    version, handed_out = new.version, set()
    while not surgery.done():  # the learners of the new architecture train on; games take opponents from the pool
        version += 1
        await ref.tell(PublishParams(version, new.arch, new.spec, new.state, learner_steps=version))
        opponent = (await ref.ask(OpponentRequest())).version
        if opponent >= 0:
            played = (await ref.ask(GetParams(opponent))).state  # never a member still to be operated
            assert {k: v.shape for k, v in played.items()} == shapes, opponent
            handed_out.add(opponent)
        waiting.append((await ref.ask(GetStats()))["surgery_pool_waiting"])
        await asyncio.sleep(0.05)
    report = await surgery
    assert report["pause_seconds"] < 2.0 and report["in_play_seconds"] < 10.0, report
    assert len(report["versions_operated"]) == 33 and report["pool_dropped"] == {}
    assert waiting[0] >= 24 and waiting == sorted(waiting, reverse=True) and waiting[-1] <= 1
    assert handed_out - {new.version} and handed_out <= set(report["versions_operated"]) | set(range(65, version + 1))
    stats = await ref.ask(GetStats())
    # Full again (new versions joined while the members rejoined; the least likely left), and no new version was
    # evicted for the members still waiting (that took the latest version's arrays and crashed the next checkpoint).
    assert stats["refused"] == 0 and stats["surgery_pool_waiting"] == 0 and stats["pool_size"] == 32
    for member in server.pool.versions:
        assert {k: v.shape for k, v in (await ref.ask(GetParams(member))).state.items()} == shapes, member


async def test_the_pause_does_not_grow_with_probe_steps(system: ActorSystem, tmp_path: Path) -> None:
    """At the CLI's 256 probe steps the full verification runs on a snapshot while publishes are still taken; the
    version published meanwhile is operated in the pause and checked on the first 16 steps (it was 8.7 s of pause on a
    live smoke tree when the pause verified all 256)."""
    config = load_config("smoke")
    server = ParamServerActor(config=config, run_dir=str(tmp_path))
    ref = system.spawn(server, "/params")
    assert await system.wait_started(ref) is None
    base = state_arrays(initial_policy(server.spec, 1))
    old = server.arch
    version = 1
    await ref.tell(PublishParams(version, old, server.spec.to_dict(), base, learner_steps=version))
    surgery = asyncio.ensure_future(ref.ask(Surgery(["widen-lstm", "48"], probe_steps=256), timeout=300))
    while server.arch == old:  # the learners publish on, every 50 ms, until the new architecture is announced
        version += 1
        await ref.tell(PublishParams(version, old, server.spec.to_dict(), base, learner_steps=version))
        await asyncio.sleep(0.05)
    report = await surgery
    snapshot, latest = report["verified_before_pause"], report["version_from"]
    assert snapshot < latest and report["version_to"] == latest + 1
    checks = report["verification"]
    assert checks[str(snapshot)]["steps"] == 256 and checks[str(latest)]["steps"] == 16
    assert report["pause_seconds"] < 2.0, report


@pytest.mark.parametrize(
    "env", [["env.id=gymnasium:CartPole-v1"], ["env.id=lane", "env.factory=tests.actors.gym_factories:target"]]
)
async def test_a_live_widen_lstm_on_an_external_environment(
    system: ActorSystem, tmp_path: Path, env: list[str]
) -> None:
    """Surgery where it applies beyond the lane game: the probes come from two copies of the run's own environment
    played at random, and a Gaussian head's mean and std are compared like any head's probabilities."""
    config = load_config("cartpole", [*env, "model.core=lstm", "model.lstm_size=16"])
    server = ParamServerActor(config=config, run_dir=str(tmp_path))
    ref = system.spawn(server, "/params")
    assert await system.wait_started(ref) is None
    base = state_arrays(initial_policy(server.spec, 1))
    await ref.tell(PublishParams(1, server.arch, server.spec.to_dict(), base, learner_steps=1))
    report = await ref.ask(Surgery(["widen-lstm", "24"], probe_steps=32), timeout=120)
    check = report["verification"][str(report["version_from"])]
    assert check["preserved"] and (check["steps"], check["rows"]) == (32, 2), check
    assert ("gaussian" in check["head_diffs"]) == ("target" in env[-1])
    assert (await ref.ask(GetParams(-1))).spec["lstm_size"] == 24


async def heard(listener: Listener, shares: dict[str, float]) -> None:
    """Wait until the listener's latest ParamsAvailable carried `shares` (tells arrive on their own time)."""
    for _ in range(100):
        if listener.shares and listener.shares[-1] == shares:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the listener heard {listener.shares[-3:]}, not {shares}")


async def test_a_game_version_anneals_in_and_is_reverted_when_trueskill_falls(
    system: ActorSystem, tmp_path: Path
) -> None:
    config = load_config("smoke", ["training.surgery_anneal_versions=10", "training.surgery_revert_trueskill=5.0"])
    ref = system.spawn(ParamServerActor(config=config, run_dir=str(tmp_path)), "/params")
    assert await system.wait_started(ref) is None
    listener = Listener()
    system.spawn(listener, "/listener")
    await ref.tell(Subscribe(f"{system.node_id}/listener"))
    await ref.tell(EvalRating(0, 10.0))  # the latest TrueSkill when the surgery comes
    report = await ref.ask(Surgery(["game-version", "2"], probe_steps=16), timeout=120)
    new = report["version_to"]
    await heard(listener, {"recall": 0.0, "game_version": 0.0})
    params = await ref.ask(GetParams(-1))
    for version in (new + 1, new + 2):
        await ref.tell(PublishParams(version, params.arch, params.spec, params.state, learner_steps=version))
    await heard(listener, {"recall": 0.2, "game_version": 0.2})
    await ref.tell(EvalRating(new + 2, 5.5))  # within the bound: the anneal goes on
    assert (await ref.ask(GetStats()))["reverted"] == {}
    await ref.tell(EvalRating(new + 2, 4.5))
    stats = await ref.ask(GetStats())
    assert stats["anneal"] == {"recall": 0.0, "game_version": 0.0}
    assert "more than 5 below 10.00 at the surgery" in stats["reverted"]["game_version"]
    await heard(listener, stats["anneal"])
    await ref.tell(PublishParams(new + 3, params.arch, params.spec, params.state, learner_steps=new + 3))
    assert (await ref.ask(GetStats()))["anneal"] == {"recall": 0.0, "game_version": 0.0}  # for good

    await system.stop(ref)  # a resumed run keeps the reverted changes at 0
    ref = system.spawn(ParamServerActor(config=config, run_dir=str(tmp_path)), "/params2")
    assert await system.wait_started(ref) is None
    stats = await ref.ask(GetStats())
    assert stats["anneal"] == {"recall": 0.0, "game_version": 0.0} and set(stats["reverted"]) == {
        "recall",
        "game_version",
    }


async def test_surgery_sizes_are_bounded_and_a_refusal_frees_the_surgery(system: ActorSystem, tmp_path: Path) -> None:
    # widen-lstm 200000 crashed the ParamServer; probe_steps 10**9 held the surgery for good (issue 14).
    server = ParamServerActor(config=load_config("smoke"), run_dir=str(tmp_path))
    ref = system.spawn(server, "/params")
    assert await system.wait_started(ref) is None
    with pytest.raises(RemoteError, match="lstm_size 200000 is wider than a surgery makes, at most 4096"):
        await ref.ask(Surgery(["widen-lstm", "200000"], probe_steps=16), timeout=60)
    with pytest.raises(RemoteError, match=r"probe_steps must be within 1\.\.4096, got 1000000000"):
        await ref.ask(Surgery(["widen-lstm", "48"], probe_steps=10**9), timeout=60)
    dry = await ref.ask(Surgery(["widen-lstm", "48"], dry_run=True, probe_steps=16), timeout=120)
    assert dry["changes"]["widths"]["lstm_size"] == [32, 48] and system.is_alive("/params")


async def test_a_scheduled_surgery_grows_the_game_at_its_version_and_a_refused_one_is_logged(
    system: ActorSystem, tmp_path: Path
) -> None:
    """The curriculum: a run started on the smoke config's 2v2 one-lane game is carried to 3 heroes a side on two lanes
    by the ParamServer itself when the latest version reaches 3; the next entry asks for what the model already has,
    is refused with the reason, and training goes on."""
    config = load_config("smoke", ['training.surgery_schedule={3 = "game-size 3 2", 6 = "game-size 3 2"}'])
    server, ref, listener = await listened(system, config, tmp_path)
    base = state_arrays(initial_policy(server.spec, 1))
    small_arch = server.arch
    with capture_logs() as logs:
        for version in (1, 2):
            await ref.tell(PublishParams(version, small_arch, server.spec.to_dict(), base, learner_steps=version))
        assert (await ref.ask(GetStats()))["surgeries"] == 0
        await ref.tell(PublishParams(3, small_arch, server.spec.to_dict(), base, learner_steps=3))
        await wait_for(lambda: server.surgeries == 1 and server._surgery is None)
        latest = await ref.ask(GetParams(-1))
        assert latest.version == 4 and latest.arch != small_arch
        spec = ModelSpec.from_dict(latest.spec)
        assert sized_config(spec.obs, config.game) == dataclasses.replace(config.game, heroes_per_side=3, lanes=2)
        assert listener.seen[-1] == (4, latest.arch)
        for version in (5, 6):
            await ref.tell(PublishParams(version, latest.arch, latest.spec, dict(latest.state), learner_steps=version))
        await wait_for(lambda: any(e["event"] == "surgery_rejected" for e in logs) and server._surgery is None)
    assert [e["at_version"] for e in logs if e["event"] == "surgery_scheduled"] == [3, 6]
    refused = next(e for e in logs if e["event"] == "surgery_rejected")
    assert "already plays 3 heroes a side on 2 lane(s)" in refused["reason"]
    stats = await ref.ask(GetStats())
    assert stats["version"] == 6 and stats["surgeries"] == 1 and system.is_alive("/params")


async def wait_for(condition: Callable[[], bool], timeout: float = 120.0) -> None:
    """Poll `condition` until it holds (AssertionError after `timeout` seconds)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)
