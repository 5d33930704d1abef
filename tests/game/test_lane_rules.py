"""The lane game's rules that shape what a policy learns: creep aggro, where structures can be
attacked from, how an undecided game ends, the paper's health score and team spirit over versions."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from five_actors.game.config import GameConfig
from five_actors.game.env import LaneGame
from five_actors.game.state import A_ATTACK, ALIVE, HP, KIND, KIND_CREEP, MAXHP, TEAM, X, Y
from five_actors.game.step import health_score

CFG = GameConfig(games_per_batch=2, draft="fixed", seed=3)
HPS = CFG.heroes_per_side
NH = 2 * HPS
SB = CFG.structures_per_side


def noop(env: LaneGame) -> np.ndarray:
    return np.zeros((env.num_rows, env.action_spec.columns), dtype=np.int64)


def lone_creeps(env: LaneGame) -> tuple[int, int]:
    """After the first wave: one creep of each team kept (the others removed), heroes left at home."""
    env.reset()
    env.step(noop(env))
    u = env.state.units[0]
    creeps = [k for k in range(NH + 2 * SB, u.shape[0]) if u[k, KIND] == KIND_CREEP and u[k, ALIVE] > 0]
    ours = next(k for k in creeps if u[k, TEAM] == 0)
    theirs = next(k for k in creeps if u[k, TEAM] == 1)
    for k in creeps:
        if k not in (ours, theirs):
            u[k, ALIVE] = 0.0
    return ours, theirs


def test_creeps_keep_fighting_creeps_while_a_hero_stands_beside_them() -> None:
    """A hero standing in lane does not draw creep fire (it did: creeps hit the nearest enemy, heroes
    included, every step) until it attacks an enemy hero, as in Dota."""
    env = LaneGame(CFG)
    ours, theirs = lone_creeps(env)
    u = env.state.units[0]
    # Off the lanes, out of every tower's range.
    u[ours, X], u[ours, Y] = 65.0, 35.0
    u[theirs, X], u[theirs, Y] = 66.0, 35.0
    u[0, X], u[0, Y] = 66.0, 35.6  # team 0's hero, nearer to their creep than our creep is
    for _ in range(24):
        env.step(noop(env))
    assert u[ours, HP] < u[ours, MAXHP], "their creep fights ours"
    assert u[0, HP] == u[0, MAXHP], "and leaves the hero standing beside it alone"

    enemy = HPS  # team 1's first hero, next to the creeps, attacked by our hero
    u[enemy, X], u[enemy, Y] = 66.5, 36.0
    _, masks = env.observe()
    actions = noop(env)
    assert masks["target"][0, A_ATTACK, HPS]  # our row 0 sees enemy hero 0 in its enemies slot 0
    actions[0] = (A_ATTACK, 0, HPS)
    hp_before = float(u[0, HP])
    for _ in range(16):
        env.step(actions)
    assert u[0, HP] < hp_before, "a hero that attacks an enemy hero draws the enemy creeps"


def test_enemy_structures_are_targets_only_within_the_heros_vision() -> None:
    """From across the map an attack order on a tower walked a hero into its fire; now the tower
    must be in sight first."""
    env = LaneGame(CFG)
    env.reset()
    u = env.state.units[0]
    tower = NH + SB  # team 1's first tower (tier 0, attackable)
    slot = env.action_spec.heads[1].size - 2 * SB + SB  # row 0's first enemy-structure slot
    _, masks = env.observe()
    assert env._slot_unit[0, slot] == tower
    assert not masks["target"][0, A_ATTACK, slot], "not from the fountain"
    u[0, X], u[0, Y] = u[tower, X] - CFG.hero_vision + 1.0, u[tower, Y]
    _, masks = env.observe()
    assert masks["target"][0, A_ATTACK, slot], "within vision it is a target"


def test_an_undecided_game_is_won_on_towers_destroyed_else_drawn() -> None:
    env = LaneGame(dataclasses.replace(CFG, time_limit_steps=5))
    env.reset()
    env.state.units[0, NH + SB, ALIVE] = 0.0  # game 0: team 1 lost a tower
    env.state.units[0, NH + SB, HP] = 0.0
    env.state.units[1, NH, HP] = 1.0  # game 1: team 0's tower is nearly down, but stands
    for _ in range(5):
        step = env.step(noop(env))
    assert step.dones.all()
    results = sorted(env.results, key=lambda r: r["game"])
    assert results[0]["winner"] == 0 and results[0]["towers"] == [1, 0]
    assert results[1]["winner"] == -1, "tower health alone decides nothing"
    assert (step.infos["win"][:HPS] == 1.0).all() and (step.infos["win"][NH:] == 0.5).all()


def test_health_is_scored_as_in_the_paper() -> None:
    assert health_score(1.0) == 1.0 and health_score(0.0) == 0.0
    assert health_score(0.5) == pytest.approx((0.5 + 1.0 - 0.5**4) / 2)  # 0.71875
    env = LaneGame(CFG)
    env.reset()
    u = env.state.units[0]
    u[0, X], u[0, Y] = 50.0, 20.0  # away from the fountain's regeneration
    u[0, HP] = 0.9 * u[0, MAXHP]
    step = env.step(noop(env))
    after = u[0, HP] / u[0, MAXHP]
    expected = CFG.reward_health * (health_score(after) - 1.0)
    assert step.infos["reward/health"][0] == pytest.approx(expected, rel=1e-3)
    assert -0.11 < expected < -0.09, "a tenth of the health costs half of what linear scoring did (-0.2)"


def test_team_spirit_follows_its_schedule_over_versions() -> None:
    assert [CFG.team_spirit_at(v) for v in (0, 1500, 3000, 10**6)] == pytest.approx([0.3, 0.65, 1.0, 1.0])
    env = LaneGame(CFG)
    env.reset()
    u = env.state.units[0]

    def hurt_one_hero() -> np.ndarray:
        u[0, HP] = 0.5 * u[0, MAXHP]  # hero 0's health reward alone falls
        rewards = env.step(noop(env)).rewards.reshape(-1, HPS)[0]
        u[0, HP] = u[0, MAXHP]
        env.step(noop(env))
        return rewards

    assert np.ptp(hurt_one_hero()) > 0.1, "at 0.3 a hero keeps most of its own reward"
    env.follow_version(3000)
    assert env.team_spirit == 1.0
    assert np.ptp(hurt_one_hero()) == pytest.approx(0.0, abs=1e-5), "at 1.0 the team shares it evenly"
