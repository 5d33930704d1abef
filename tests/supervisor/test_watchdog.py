"""The watchdog's rules on views of a tree (five_actors.supervisor.watchdog); the real tree is in
tests/actors/test_training_never_stops.py."""

from __future__ import annotations

from typing import Any

from five_actors.supervisor.watchdog import Watchdog

PARAMS, LEARNER, GAME = "/root/params", "/root/learners/learner-0", "/root/rollouts/game-0"


def view(
    version: int, trained: int | None, env_steps: int, game_state: str = "running", learner_state: str = "running"
) -> dict[str, Any]:
    learner: dict[str, Any] = {"path": LEARNER, "restart": "permanent", "state": learner_state}
    if trained is not None:  # an unreachable learner's entry comes from its supervisor: no class, no status
        learner |= {"class": "LearnerActor", "status": {"metrics": {"chunks_trained": trained}}}
    return {
        "actors": [
            {
                "path": PARAMS,
                "class": "ParamServerActor",
                "restart": "permanent",
                "state": "running",
                "status": {"progress": {"version": version}},
            },
            learner,
            {
                "path": GAME,
                "class": "GameActor",
                "restart": "permanent",
                "state": game_state,
                "status": {"progress": {"env_steps": env_steps}},
            },
        ]
    }


def test_no_new_version_while_games_run_is_a_stall_that_restarts_the_learners() -> None:
    dog = Watchdog(stall_s=10)
    assert dog.check(view(5, 40, 100), 0.0) == []
    assert dog.check(view(5, 40, 200), 9.0) == []
    stalls = dog.check(view(5, 40, 300), 10.0)
    rules = {s.rule: s for s in stalls}
    assert set(rules) == {f"version:{PARAMS}", f"trained:{LEARNER}"}
    assert "no new version for 10s (version 5)" in rules[f"version:{PARAMS}"].reason
    assert rules[f"version:{PARAMS}"].restart == (LEARNER,)
    assert dog.check(view(6, 48, 400), 11.0) == []  # progress clears it


def test_an_unreachable_learner_has_made_no_progress() -> None:
    dog = Watchdog(stall_s=10)
    dog.check(view(5, 40, 100), 0.0)
    assert dog.check(view(5, None, 100, learner_state="unreachable (timeout)"), 5.0) == []
    stalls = dog.check(view(5, None, 100, learner_state="unreachable (timeout)"), 12.0)
    assert {s.rule for s in stalls} == {
        f"version:{PARAMS}",
        f"trained:{LEARNER}",
    }  # env steps: not while a child is down


def test_without_running_games_nothing_stalls() -> None:
    dog = Watchdog(stall_s=10)
    dog.check(view(5, 40, 100, game_state="restarting"), 0.0)
    assert dog.check(view(5, 40, 100, game_state="restarting"), 60.0) == []
    assert dog.check(view(5, 40, 100), 61.0) == []  # the clock starts when games run


def test_a_game_making_no_env_step_with_every_child_up_is_restarted_at_most_once_per_stall_s() -> None:
    dog = Watchdog(stall_s=10)
    dog.check(view(5, 40, 100), 0.0)
    stalls = dog.check(view(6, 48, 100), 10.0)
    assert [s.restart for s in stalls] == [(GAME,)] and "made no env step for 10s" in stalls[0].reason
    assert dog.due(GAME, 10.0) and not dog.due(GAME, 15.0) and dog.due(GAME, 20.0)
