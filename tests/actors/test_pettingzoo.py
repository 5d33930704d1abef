"""PettingZoo parallel environments on the actor system: one shared policy, a row per agent, and a real
`five-actors up` that learns one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

from five_actors.actors.play import play_games, summarize
from five_actors.config import load_config
from five_actors.envs import EnvConfig, make_external
from five_actors.errors import ConfigError, GameError
from five_actors.game.bots import UniformBot
from five_actors.game.pettingzoo_env import ParallelBatchEnv
from tests.actors.parallel_envs import DUEL_STEPS, EPISODE_STEPS, LEAVES_AT, Duel, Signals
from tests.supervisor.cluster import Proc, get, log_events, wait_until

MODULE = "tests.actors.parallel_envs"


def test_the_test_environments_pass_pettingzoos_own_api_test() -> None:
    parallel_api_test(Signals(), num_cycles=30)
    parallel_api_test(Duel(), num_cycles=30)


def test_every_agent_is_a_row_that_sees_its_index_and_gets_its_own_reward() -> None:
    env = make_external(EnvConfig(id=f"pettingzoo:{MODULE}"), 2, seed=4)
    assert isinstance(env, ParallelBatchEnv)
    assert (env.num_games, env.agents_per_team, env.num_rows, env.teams) == (2, 3, 6, 1)
    assert env.seconds_per_step == 0.1  # from the environment's render_fps
    obs, masks = env.reset()
    assert obs.shape == (6, 3 + 2 + 3) and masks["type"].shape == (6, 3)  # colour one-hot, position, agent one-hot
    assert (obs[:, 5:] == np.tile(np.eye(3), (2, 1))).all()
    right = (obs[:, :3].argmax(1) + np.tile(np.arange(3), 2)) % 3
    step = env.step(right[:, None])
    assert step.rewards.tolist() == [1.0] * 6 and not step.dones.any()
    step = env.step(((right + 1) % 3)[:, None])  # the colours changed: answers to the old ones score by chance
    assert set(step.rewards.tolist()) <= {0.0, 1.0}


def test_an_agent_that_leaves_sits_out_and_the_copy_ends_with_its_last_agent() -> None:
    env = make_external(EnvConfig(factory=f"{MODULE}:parallel_env"), 1, seed=0)
    obs, _ = env.reset()
    total = np.zeros(3)
    for step_no in range(1, EPISODE_STEPS + 1):
        right = (obs[:, :3].argmax(1) + np.arange(3)) % 3
        step = env.step(right[:, None])
        total += step.rewards
        if step_no < EPISODE_STEPS:
            assert not step.dones.any()
            if step_no > LEAVES_AT:
                assert step.rewards[2] == 0.0  # a2 left: its row earns nothing, its action is ignored
        obs = step.obs
    assert step.dones.tolist() == [True] * 3  # every row of the copy ends together
    assert step.infos["episode_return"].tolist() == [12.0, 12.0, 5.0] == total.tolist()
    assert step.infos["episode_length"].tolist() == [12, 12, 5]
    assert step.infos["truncated"].tolist() == [True, True, False]  # a2 terminated; the others hit the time limit
    assert (step.infos["final_obs"][:, 5:] == np.eye(3)).all()
    assert not (step.obs[:, :5] == step.infos["final_obs"][:, :5]).all()  # the copy reset: a new first observation


def test_agents_with_different_spaces_and_unknown_modules_are_refused_by_name() -> None:
    with pytest.raises(GameError, match=r"agent 'a1' has .*Discrete\(4\).*same spaces for every agent"):
        make_external(EnvConfig(factory=f"{MODULE}:mixed_spaces"), 1, seed=0)
    with pytest.raises(ConfigError, match="cannot import 'no_such_pkg.envs'"):
        make_external(EnvConfig(id="pettingzoo:no_such_pkg.envs"), 1, seed=0)
    with pytest.raises(ConfigError, match="has no parallel_env"):
        make_external(EnvConfig(id="pettingzoo:tests.actors.gym_factories"), 1, seed=0)
    with pytest.raises(ConfigError, match="'pettingzoo:package.module'"):
        load_config("cartpole", ["env.id=pettingzoo:"])


TWO_TEAMS = EnvConfig(factory=f"{MODULE}:two_teams", teams=2)


class RightAnswers:
    """Duel's best player: the colour on red, the colour + 1 on blue (rows show the agent's one-hot after the
    colour's one-hot and the position)."""

    def act(self, obs: np.ndarray, masks: dict[str, np.ndarray]) -> np.ndarray:
        blue = obs[:, 5 + 2 :].sum(1) > 0  # agents 2 and 3 are blue_0 and blue_1
        return ((obs[:, :3].argmax(1) + blue) % 3)[:, None].astype(np.int64)


def test_two_teams_split_the_agents_in_halves_and_the_higher_total_wins() -> None:
    env = make_external(TWO_TEAMS, 2, seed=1)
    assert isinstance(env, ParallelBatchEnv)
    assert (env.teams, env.agents_per_team, env.num_rows) == (2, 2, 8)
    obs, _ = env.reset()
    for step_no in range(1, DUEL_STEPS + 1):  # every agent answers the colour: right on red, wrong on blue
        step = env.step((obs[:, :3].argmax(1))[:, None])
        obs = step.obs
        assert step.rewards.tolist() == [1.0, 1.0, 0.0, 0.0] * 2
        assert step.dones.all() == (step_no == DUEL_STEPS)
    assert step.infos["truncated"].all()
    assert step.infos["episode_return"].tolist() == [DUEL_STEPS, DUEL_STEPS, 0, 0] * 2
    assert step.infos["win"].tolist() == [1.0, 1.0, 0.0, 0.0] * 2
    going_on = env.step(np.zeros((8, 1), np.int64))
    assert not going_on.dones.any() and not going_on.infos["win"].any()


def test_a_two_team_game_refuses_what_cannot_form_two_teams() -> None:
    with pytest.raises(GameError, match=r"3 agents \['a0', 'a1', 'a2'\] cannot form 2 teams"):
        make_external(EnvConfig(factory=f"{MODULE}:parallel_env", teams=2), 1, seed=0)
    with pytest.raises(ConfigError, match="env.teams = 2: gymnasium:CartPole-v1 is a gymnasium environment"):
        make_external(EnvConfig(id="gymnasium:CartPole-v1", teams=2), 1, seed=0)
    with pytest.raises(ConfigError, match="env.teams must be 1 or 2, got 3"):
        load_config("cartpole", [f"env.factory={MODULE}:two_teams", "env.id=lane", "env.teams=3"])


def test_play_games_plays_both_sides_and_scores_each_game_for_the_player() -> None:
    env = make_external(TWO_TEAMS, 10, seed=3)
    outcomes = play_games(env, RightAnswers(), UniformBot(env.action_spec, seed=5), seed=3)
    assert [o.team for o in outcomes] == [0, 1] * 5 and {o.steps for o in outcomes} == {DUEL_STEPS}
    assert summarize(outcomes)["win_rate"] >= 0.9  # 16 points against about 5.3
    mirrored = play_games(env, UniformBot(env.action_spec, seed=6), RightAnswers(), seed=3)
    assert summarize(mirrored)["win_rate"] <= 0.1


@pytest.mark.timeout(300)
def test_up_trains_one_shared_policy_over_the_agents(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = ["up", "--config", "cartpole", "--run-dir", str(run_dir), "--port", "0", "--duration", "150"]
    proc = Proc([*args, "--set", f"env.id=pettingzoo:{MODULE}", "--set", "ppo.horizon_seconds=1.0"], tmp_path, "up")
    try:
        url = "http://127.0.0.1:" + proc.wait_for_output(r"serving http://127\.0\.0\.1:(\d+)").group(1)
        # Chance scores 1/3 a step: (4 + 4 + 5/3) / 3 = 3.2 per agent; the best is (12 + 12 + 5) / 3 = 9.7.
        best = wait_until(
            lambda: [e for e in log_events(run_dir, "eval_result") if e["mean_return"] >= 6.0],
            timeout=240,
            what="an eval round's mean return per agent of 6 (chance 3.2, best 9.7)",
        )[0]
        assert best["episodes"] == 10 * 3  # 10 copies of 3 agents, one episode each
        status, view = get(f"{url}/actors")
        game = next(a for a in view["actors"] if a["path"] == "/root/rollouts/game-0")
        assert status == 200 and game["status"]["metrics"]["game_past_opponent_games"] == 0
    finally:
        proc.kill()


@pytest.mark.timeout(300)
def test_up_on_a_two_team_game_keeps_self_play_and_rates_against_random_and_past_versions(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = ["up", "--config", "cartpole", "--run-dir", str(run_dir), "--port", "0", "--duration", "150"]
    sets = [f"env.factory={MODULE}:two_teams", "env.id=lane", "env.teams=2", "ppo.horizon_seconds=0.5"]
    sets += ["training.past_opponent_share=0.5", "training.pool_add_every=5"]
    proc = Proc([*args, *(x for s in sets for x in ("--set", s))], tmp_path, "up")
    try:
        url = "http://127.0.0.1:" + proc.wait_for_output(r"serving http://127\.0\.0\.1:(\d+)").group(1)
        beat = wait_until(
            lambda: [
                e for e in log_events(run_dir, "eval_result") if e["opponent"] == "random" and e["win_rate"] >= 0.9
            ],
            timeout=240,
            what="an eval round that beats the uniformly random player in 0.9 of its games",
        )[0]
        assert beat["games"] == 10 and "trueskill" in beat
        past = wait_until(
            lambda: [e for e in log_events(run_dir, "eval_result") if e["opponent"].startswith("v")],
            timeout=60,
            what="an eval round against a past version",
        )
        assert past[0]["games"] == 10
        status, view = get(f"{url}/actors")
        game = next(a for a in view["actors"] if a["path"] == "/root/rollouts/game-0")
        metrics = game["status"]["metrics"]
        assert status == 200 and metrics["game_past_opponent_games"] > 0 and metrics["game_match_results"] > 0
        assert not list(run_dir.glob("replays/*"))  # replays are the lane game's
        # The live line: the games' mean return, the win rate against the random player, TrueSkill.
        proc.wait_for_output(r"return [\d.]+ \| vs random \d\.\d\d \[\d\.\d\d, \d\.\d\d\] \| TrueSkill")
        # From its first line on, before the EvalActor first reports: a two-team game has no held-out returns.
        lines = [line for line in proc.out.splitlines() if " | v " in line]
        assert lines and not [line for line in lines if "| eval " in line], lines[:3]
    finally:
        proc.kill()
