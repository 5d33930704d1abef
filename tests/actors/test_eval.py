"""The EvalActor: rounds against the random bot, the scripted bot and past versions; ratings, replays, resume."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from five_actors.actors.eval import MAX_REFERENCES, RATINGS_FILE, EvalActor
from five_actors.actors.messages import GetStats, Params
from five_actors.actors.ratings import REFERENCE, Ratings, load_state, save_state, wilson_interval
from five_actors.config import Config, from_mapping, load_config
from five_actors.errors import FiveActorsError
from five_actors.game.replay import load_replay
from five_actors.runtime.actor import ActorSystem
from five_actors.supervisor.child import TreeContext
from five_actors.supervisor.config import TreeConfig
from five_actors.supervisor.health import _actor_metrics
from five_actors.supervisor.tree import Supervisor
from tests.actors.support import TINY_GAME

TINY = [*TINY_GAME, "training.eval_games=4", "training.eval_every_s=0.2", "training.eval_past_versions=1"]


def test_wilson_interval_matches_the_formula() -> None:
    low, high = wilson_interval(8, 10)
    assert (round(low, 3), round(high, 3)) == (0.49, 0.943)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(0, 5)[0] == 0.0 and wilson_interval(5, 5)[1] == 1.0


def test_the_random_bot_is_the_pinned_zero_and_winners_climb() -> None:
    ratings = Ratings()
    for _ in range(20):
        ratings.record("scripted", REFERENCE, 1.0)
        ratings.record("v1", "scripted", 1.0)
    assert ratings.score(REFERENCE) == 0.0 and ratings.rating(REFERENCE).sigma == pytest.approx(25 / 3)
    assert 0 < ratings.score("scripted") < ratings.score("v1")
    assert ratings.table()["v1"]["games"] == 20
    with pytest.raises(ValueError, match="outcome must be 0, 0.5 or 1"):
        ratings.record("v1", "scripted", 2.0)


def test_ratings_survive_a_save_and_load(tmp_path: Path) -> None:
    ratings = Ratings()
    ratings.record("v3", "scripted", 0.5)
    save_state(tmp_path / "r.json", {"ratings": ratings.to_dict()})
    again = Ratings.from_dict(load_state(tmp_path / "r.json")["ratings"])  # type: ignore[index]
    assert again.table() == ratings.table()
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(FiveActorsError, match="bad.json: not a ratings file"):
        load_state(tmp_path / "bad.json")


async def _run_eval(run_dir: Path, config: Config, rounds: int, keep_past: bool = True) -> dict[str, Any]:
    """Run the stand-in ParamServer and an EvalActor under a supervisor until `rounds` rounds are done."""
    system = ActorSystem("head")
    tree = from_mapping(
        TreeConfig,
        {
            "children": [
                {"id": "params", "actor": "tests.actors.support:ParamsStub", "args": {"keep_past": keep_past}},
                {"id": "eval", "actor": "five_actors.actors.eval:EvalActor", "args": {"params": "head/root/params"}},
            ]
        },
        "tree",
    )
    root = system.spawn(Supervisor(tree, TreeContext(system, run_dir, config=config)), "/root")
    assert await system.wait_started(root) is None
    try:
        async with asyncio.timeout(120):
            while (stats := await system.ask("head/root/eval", GetStats(), 30.0))["rounds"] < rounds:
                await asyncio.sleep(0.1)
        actor = system.actor("/root/eval")
        assert isinstance(actor, EvalActor)
        return {"stats": stats, "status": actor.status()}
    finally:
        await system.stop(root, 30.0)


async def test_rounds_rate_the_latest_version_record_replays_and_resume(tmp_path: Path) -> None:
    config = load_config("pingpong", [*TINY, "training.eval_scripted_games=6"])
    first = await _run_eval(tmp_path, config, rounds=2)
    stats = first["stats"]
    assert set(stats["results"]) == {"random", "scripted", "v0"}  # round 2 also plays round 1's version, frozen
    scripted = stats["results"]["scripted"]
    assert scripted["games"] == 6 and scripted["wins"] + scripted["draws"] + scripted["losses"] == 6
    assert stats["results"]["random"]["games"] == stats["results"]["v0"]["games"] == 4
    assert 0.0 <= scripted["ci_low"] <= scripted["win_rate"] <= scripted["ci_high"] <= 1.0
    assert stats["ratings"]["random"]["score"] == 0.0 and "v1" in stats["ratings"]
    assert stats["trueskill"] == stats["ratings"][f"v{stats['version']}"]["score"]

    metrics = {
        f.name: f.samples[0].value
        for f in _actor_metrics({"actors": [{"path": "/root/eval", "status": first["status"]}]})
    }
    assert metrics["five_actors_eval_rounds"] >= 2 and "five_actors_eval_win_rate_scripted" in metrics
    assert metrics["five_actors_eval_trueskill"] == stats["trueskill"]

    replays = sorted((tmp_path / "replays").glob("*.replay"))
    assert [p.name for p in replays][:2] == ["eval-r00001-v0-vs-scripted.replay", "eval-r00002-v1-vs-scripted.replay"]
    replay = load_replay(replays[0])
    assert len(replay.frames) > 10 and replay.result["winner"] in (-1, 0, 1)

    saved = json.loads((tmp_path / RATINGS_FILE).read_text())
    assert saved["rounds"] >= 2 and saved["history"][:2] == [0, 1]
    again = await _run_eval(tmp_path, config, rounds=saved["rounds"] + 1)
    assert again["stats"]["ratings"]["v0"]["games"] >= saved["ratings"]["v0"][2]  # the ratings carried over


async def test_past_versions_are_played_after_the_param_server_stopped_serving_them(tmp_path: Path) -> None:
    config = load_config("pingpong", [*TINY, "training.eval_past_versions=2"])
    stats = (await _run_eval(tmp_path, config, rounds=3, keep_past=False))["stats"]
    past = {name for name in stats["results"] if name.startswith("v")}
    assert len(past) == 2 and "v0" in past  # earlier rounds' versions, kept by the EvalActor itself
    assert stats["results"]["v0"]["games"] == 4


def test_the_reference_history_is_thinned_evenly_keeping_the_oldest_and_newest() -> None:
    actor = EvalActor()
    for version in range(0, 400, 10):
        actor._remember(Params(version, "arch", {}, {}))
    assert len(actor.history) == MAX_REFERENCES == len(actor.frozen)
    assert actor.history[0] == 0 and actor.history[-1] == 390 and actor.history == sorted(actor.history)
    gaps = [b - a for a, b in zip(actor.history, actor.history[1:])]
    assert max(gaps) <= 2 * min(gaps) + 10


async def test_without_a_run_config_the_eval_actor_refuses_to_start() -> None:
    system = ActorSystem("head")
    ref = system.spawn(EvalActor(), "/eval")
    reason = await system.wait_started(ref)
    assert reason is not None and "has no run config" in reason
