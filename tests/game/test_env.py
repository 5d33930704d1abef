"""The lane game seen from outside: observations, fog, mirroring, terminals, rewards, masks, input checks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from five_actors.errors import GameError
from five_actors.game.bots import RandomBot, ScriptedBot
from five_actors.game.config import GameConfig
from five_actors.game.env import LaneGame
from five_actors.game.match import team_rows
from five_actors.game.spec import action_spec, obs_spec
from five_actors.game.state import (
    A_ATTACK,
    A_MOVE,
    ALIVE,
    DMG,
    H_GOLD,
    H_ITEMS,
    H_RESPAWN,
    HP,
    KIND,
    KIND_CREEP,
    MAXHP,
    TEAM,
    TGT,
    X,
    Y,
    fountains,
    structure_positions,
)

CFG = GameConfig(games_per_batch=4, draft="fixed", seed=5)
HPS = CFG.heroes_per_side
SB = CFG.structures_per_side


@pytest.fixture(scope="module")
def env() -> LaneGame:
    return LaneGame(CFG)


def noop(env: LaneGame) -> np.ndarray:
    return np.zeros((env.num_rows, env.action_spec.columns), dtype=np.int64)


def block(env: LaneGame, obs: np.ndarray, row: int, name: str, slot: int = 0) -> dict[str, float]:
    """One entity of one row's observation as {feature: value}."""
    values = env.obs_spec.split(obs)[name][row, slot]
    return dict(zip(env.obs_spec.block(name).features, values.tolist()))


def creep_slot(env: LaneGame) -> int:
    """Index of the first creep unit slot of a game."""
    return 2 * HPS + 2 * SB


@pytest.mark.timeout(900)
def test_the_kernels_compile_and_a_batch_steps(env: LaneGame) -> None:
    """First in the area on purpose: a fresh checkout compiles every kernel here (a minute or
    two), under a longer timeout than the suite's; later tests reuse the compiled code."""
    obs, masks = env.reset()
    for bot in (RandomBot(seed=0), ScriptedBot(CFG)):
        step = env.step(bot.act(obs, masks))
        obs, masks = step.obs, step.masks
    assert obs.shape == (env.num_rows, env.obs_spec.size) and np.isfinite(obs).all()
    assert step.rewards.shape == (env.num_rows,) and not step.dones.any()


def test_observation_decodes_to_the_entities_placed(env: LaneGame) -> None:
    env.reset()
    u = env.state.units[0]
    fountain = fountains(CFG)[0]
    c = creep_slot(env)
    u[c] = 0.0
    u[c, [X, Y, HP, MAXHP, TEAM, KIND, ALIVE]] = [fountain[0] + 3.0, fountain[1] + 4.0, 150.0, 300.0, 1, KIND_CREEP, 1]
    obs, _ = env.observe()
    scale = CFG.map_size / 2
    me = block(env, obs, 0, "self")
    assert me["alive"] == 1.0 and me["hp_frac"] == 1.0
    assert me["x"] == pytest.approx(fountain[0] / scale) and me["y"] == pytest.approx(fountain[1] / scale)
    assert me["type_knight"] == 1.0 and me["level"] == pytest.approx(1 / CFG.max_level)
    creep = block(env, obs, 0, "creeps", 0)
    assert creep["present"] == 1.0 and creep["enemy"] == 1.0
    assert creep["dx"] == pytest.approx(3.0 / scale) and creep["dy"] == pytest.approx(4.0 / scale)
    assert creep["dist"] == pytest.approx(5.0 / scale) and creep["hp_frac"] == pytest.approx(0.5)
    assert block(env, obs, 0, "creeps", 1)["present"] == 0.0
    ancient = block(env, obs, 0, "structures", SB - 1)
    own_ancient_at = structure_positions(CFG)[0, -1]
    assert ancient["ancient"] == 1.0 and ancient["enemy"] == 0.0
    assert ancient["dx"] == pytest.approx((own_ancient_at[0] - fountain[0]) / scale)
    enemy_ancient = block(env, obs, 0, "structures", 2 * SB - 1)
    assert enemy_ancient["enemy"] == 1.0 and enemy_ancient["vulnerable"] == 0.0
    ally = block(env, obs, 0, "allies", 0)
    assert ally["present"] == 1.0 and ally["dist"] == 0.0 and ally["type_ranger"] == 1.0


def test_fog_hides_far_enemies_and_keeps_their_last_seen_features(env: LaneGame) -> None:
    obs, _ = env.reset()
    assert block(env, obs, 0, "enemies", 0)["present"] == 0.0, "enemies start unseen"
    u = env.state.units[0]
    enemy = HPS  # team 1's hero 0
    u[enemy, X], u[enemy, Y] = u[0, X] + 6.0, u[0, Y] + 8.0
    u[enemy, HP] = 0.5 * u[enemy, MAXHP]
    obs, masks = env.observe()
    seen = block(env, obs, 0, "enemies", 0)
    assert seen["present"] == 1.0 and seen["visible"] == 1.0 and seen["since_seen"] == 0.0
    assert seen["dist"] == pytest.approx(10.0 / (CFG.map_size / 2)) and seen["hp_frac"] == pytest.approx(0.5)
    assert masks["target"][0, A_ATTACK, HPS]
    # team 1 sees team 0's hero 0 too (mirrored offsets)
    assert block(env, obs, HPS, "enemies", 0)["visible"] == 1.0
    u[enemy, X], u[enemy, Y] = 50.0, 90.0
    u[enemy, HP] = u[enemy, MAXHP]
    for _ in range(3):
        step = env.step(noop(env))
    hidden = block(env, step.obs, 0, "enemies", 0)
    assert hidden["present"] == 1.0 and hidden["visible"] == 0.0 and hidden["since_seen"] > 0.0
    assert hidden["hp_frac"] == pytest.approx(0.5), "out of sight, the last seen health stays"
    assert hidden["dist"] == pytest.approx(10.0 / (CFG.map_size / 2), abs=1e-4)
    assert not step.masks["target"][0, A_ATTACK, HPS], "an unseen hero cannot be attacked"


def test_both_sides_see_the_mirrored_game() -> None:
    env = LaneGame(dataclasses.replace(CFG, games_per_batch=2))
    obs, masks = env.reset()
    bot = ScriptedBot(env.config)
    t0, t1 = team_rows(env, 0), team_rows(env, 1)
    for step_no in range(120):
        np.testing.assert_allclose(obs[t0], obs[t1], atol=1e-5, err_msg=f"step {step_no}")
        for name in masks:
            assert (masks[name][t0] == masks[name][t1]).all()
        actions = bot.act(obs, masks)
        step = env.step(actions)
        obs, masks = step.obs, step.masks
    assert env.state.units[0, :HPS, X].max() > 20.0, "the heroes left their fountain"


def test_ancient_death_ends_only_that_game(env: LaneGame) -> None:
    env.reset()
    u = env.state.units[1]
    nh = 2 * HPS
    enemy_ancient = nh + 2 * SB - 1
    u[nh + SB : nh + SB + CFG.towers_per_lane, ALIVE] = 0.0  # team 1's first lane is down
    u[enemy_ancient, HP] = 1.0
    u[0, X], u[0, Y] = u[enemy_ancient, X] - 1.0, u[enemy_ancient, Y]
    obs, masks = env.observe()
    target = env.action_spec.heads[1].size - 1  # the last structure slot: the enemy ancient
    row = 1 * nh
    assert masks["target"][row, A_ATTACK, target]
    actions = noop(env)
    actions[row] = (A_ATTACK, 0, target)
    step = env.step(actions)
    assert step.dones[nh : 2 * nh].all() and not step.dones[:nh].any() and not step.dones[2 * nh :].any()
    assert (step.infos["win"][nh : nh + HPS] == 1.0).all() and (step.infos["win"][nh + HPS : 2 * nh] == 0.0).all()
    assert (step.rewards[nh : nh + HPS] > 0).all() and (step.rewards[nh + HPS : 2 * nh] < 0).all()
    assert env.results[-1]["winner"] == 0 and env.results[-1]["reason"] == "ancient"
    assert block(env, step.obs, row, "self")["time"] == 0.0, "the game restarted"
    assert env.state.units[1, enemy_ancient, ALIVE] == 1.0


def test_time_limit_ends_every_game_as_a_draw() -> None:
    env = LaneGame(dataclasses.replace(CFG, time_limit_steps=5))
    env.reset()
    for _ in range(4):
        assert not env.step(noop(env)).dones.any()
    step = env.step(noop(env))
    assert step.dones.all()
    assert (step.infos["win"] == 0.5).all()
    assert [r["winner"] for r in env.results] == [-1] * env.num_games
    assert {r["reason"] for r in env.results} == {"time_limit"}


def test_random_play_is_legal_and_zero_sum(env: LaneGame) -> None:
    obs, masks = env.reset()
    bot = RandomBot(seed=3)
    before = env.illegal_actions
    seen_components = set()
    for _ in range(300):
        step = env.step(bot.act(obs, masks))
        obs, masks = step.obs, step.masks
        per_game = step.rewards.reshape(env.num_games, -1).sum(axis=1)
        np.testing.assert_allclose(per_game, 0.0, atol=1e-4)
        seen_components |= {k for k, v in step.infos.items() if k.startswith("reward/") and v.any()}
        assert (step.infos["illegal"] == 0).all()
    assert env.illegal_actions == before
    assert {"reward/gold", "reward/xp", "reward/health"} <= seen_components


def test_illegal_orders_are_played_as_noop_and_counted(env: LaneGame) -> None:
    obs, masks = env.reset()
    empty_creep_slot = 1 + (HPS - 1) + HPS
    assert not masks["target"][0, A_ATTACK, empty_creep_slot]
    actions = noop(env)
    actions[0] = (A_ATTACK, 0, empty_creep_slot)
    before = env.state.units[0, 0, [X, Y]].copy()
    step = env.step(actions)
    assert step.infos["illegal"][0] == 1 and step.infos["illegal"][1:].sum() == 0
    assert (env.state.units[0, 0, [X, Y]] == before).all()


def test_dead_heroes_may_only_noop(env: LaneGame) -> None:
    env.reset()
    env.state.units[0, 0, HP] = -1.0
    env.state.units[0, 0, ALIVE] = 1.0
    env.step(noop(env))  # the death is resolved in the step
    _, masks = env.observe()
    assert env.state.units[0, 0, ALIVE] == 0.0
    assert masks["type"][0].tolist() == [True] + [False] * (len(env.action_spec.types) - 1)
    assert masks["type"][1, A_MOVE]


def test_same_seed_same_game() -> None:
    def run(seed: int) -> np.ndarray:
        env = LaneGame(dataclasses.replace(CFG, draft="random", games_per_batch=2))
        obs, masks = env.reset(seed)
        bot = RandomBot(seed=11)
        for _ in range(150):
            step = env.step(bot.act(obs, masks))
            obs, masks = step.obs, step.masks
        return obs

    np.testing.assert_array_equal(run(1), run(1))
    assert not np.array_equal(run(1), run(2))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda a: a.astype(np.float32), "integer dtype"),
        (lambda a: a[:-1], "shape"),
        (lambda a: a[:, :2], "shape"),
        (lambda a: a.tolist(), "numpy array"),
    ],
)
def test_malformed_actions_are_refused(env: LaneGame, make, message: str) -> None:  # type: ignore[no-untyped-def]
    env.reset()
    with pytest.raises(GameError, match=message):
        env.step(make(noop(env)))


@pytest.mark.parametrize(("column", "value", "name"), [(0, 6, "type"), (1, 8, "move"), (2, -1, "target")])
def test_out_of_range_actions_are_refused(env: LaneGame, column: int, value: int, name: str) -> None:
    env.reset()
    actions = noop(env)
    actions[3, column] = value
    with pytest.raises(GameError, match=rf"actions\[3, {column}\] \({name}\) = {value}"):
        env.step(actions)


def test_version_2_only_appends() -> None:
    v1, v2 = obs_spec(1), obs_spec(2)
    for b1, b2 in zip(v1.blocks, v2.blocks):
        assert b1.name == b2.name and b1.slots == b2.slots
        assert b2.features[: b1.width] == b1.features
    assert v2.size > v1.size
    a1, a2 = action_spec(1), action_spec(2)
    assert a2.types[: len(a1.types)] == a1.types and len(a2.types) == len(a1.types) + 1
    assert a2.heads == a1.heads

    # The same game played by both versions: v2's observation holds v1's at v1's feature positions.
    env1 = LaneGame(dataclasses.replace(CFG, games_per_batch=2))
    env2 = LaneGame(dataclasses.replace(CFG, games_per_batch=2, version=2))
    obs1, masks1 = env1.reset()
    obs2, masks2 = env2.reset()
    index = []
    start1 = start2 = 0
    for b1, b2 in zip(v1.blocks, v2.blocks):
        for slot in range(b1.slots):
            index.extend(range(start2 + slot * b2.width, start2 + slot * b2.width + b1.width))
        start1 += b1.size
        start2 += b2.size
    bot = RandomBot(seed=4)
    for _ in range(100):
        np.testing.assert_array_equal(obs2[:, index], obs1)
        assert (masks2["type"][:, : len(a1.types)] == masks1["type"]).all()
        actions = bot.act(obs1, masks1)
        step1, step2 = env1.step(actions), env2.step(actions)
        obs1, masks1, obs2, masks2 = step1.obs, step1.masks, step2.obs, step2.masks
    assert masks2["type"][:, -1].any(), "v2 offers recall"


def test_recall_takes_a_hero_home() -> None:
    env = LaneGame(dataclasses.replace(CFG, games_per_batch=1, version=2))
    env.reset()
    env.state.units[0, 0, X] = 50.0
    _, masks = env.observe()
    recall = env.action_spec.types.index("recall")
    assert masks["type"][0, recall]
    actions = noop(env)
    actions[0, 0] = recall
    step = env.step(actions)
    assert env.state.units[0, 0, X] == pytest.approx(fountains(CFG)[0, 0])
    assert not step.masks["type"][0, recall], "recall is on cooldown"


def place_creep(env: LaneGame, game: int, slot: int, team: int, x: float, y: float, hp: float = 300.0) -> int:
    """Put a creep of `team` at (x, y) in creep slot `slot`; returns its unit index."""
    k = creep_slot(env) + slot
    u = env.state.units[game]
    u[k] = 0.0
    u[k, [X, Y, HP, MAXHP, TEAM, KIND, ALIVE]] = [x, y, hp, 300.0, team, KIND_CREEP, 1.0]
    u[k, TGT] = -1.0
    return k


def test_fog_hides_far_creeps_and_shows_near_ones(env: LaneGame) -> None:
    env.reset()
    near = place_creep(env, 0, 0, 1, 20.0, 20.0)
    place_creep(env, 0, 1, 1, 60.0, 30.0)
    u = env.state.units[0]
    u[0, X], u[0, Y] = 15.0, 15.0
    obs, masks = env.observe()
    creeps = env.obs_spec.split(obs)["creeps"][0]
    assert creeps[:, 0].sum() == 1.0, "only the creep within vision is observed"
    assert creeps[0, 4] == pytest.approx(np.hypot(5.0, 5.0) / (CFG.map_size / 2))
    target = 1 + (HPS - 1) + HPS
    assert env._slot_unit[0, target] == near and masks["target"][0, A_ATTACK, target]


def test_last_hit_pays_the_hero_and_xp_goes_to_nearby_allies(env: LaneGame) -> None:
    env.reset()
    u, h = env.state.units[0], env.state.heroes[0]
    u[:HPS, X], u[:HPS, Y] = 30.0, 30.0
    u[1, X] = 5.0  # too far away for a share of the XP
    k = place_creep(env, 0, 60, 1, 31.0, 30.0, hp=5.0)  # a slot the first wave will not reuse
    obs, masks = env.observe()
    slot = 1 + (HPS - 1) + HPS
    assert env._slot_unit[0, slot] == k and block(env, obs, 0, "creeps")["last_hittable"] == 1.0
    gold_before = h[:, H_GOLD].copy()
    actions = noop(env)
    actions[0] = (A_ATTACK, 0, slot)
    step = env.step(actions)
    assert u[k, ALIVE] == 0.0
    assert h[0, H_GOLD] - gold_before[0] > h[2, H_GOLD] - gold_before[2] + CFG.creep_gold - 1
    assert step.infos["reward/last_hit"][0] < 0 and step.infos["reward/gold"][0] > step.infos["reward/gold"][2]
    xp = step.infos["reward/xp"][:HPS]
    assert xp[0] > 0 and xp[2] == xp[0] and xp[1] == 0.0
    assert {e["kind"] for e in env.events(0)} == {"last_hit"}


def test_towers_prefer_creeps_but_defend_attacked_heroes(env: LaneGame) -> None:
    env.reset()
    u = env.state.units[0]
    nh = 2 * HPS
    tower = nh  # team 0's first tower
    tx, ty = u[tower, X], u[tower, Y]
    creep = place_creep(env, 0, 0, 1, tx + 3.0, ty, hp=3000.0)
    enemy = HPS  # team 1's hero 0, a knight with melee range
    ally = 1
    u[enemy, X], u[enemy, Y] = tx - 3.0, ty
    u[ally, X], u[ally, Y] = tx - 4.5, ty
    u[0, X], u[0, Y] = tx, ty - 30.0
    env.observe()
    env.step(noop(env))
    assert u[creep, HP] < 3000.0 and u[enemy, HP] == u[enemy, MAXHP], "the tower hits the creep first"
    obs, masks = env.observe()
    actions = noop(env)
    enemy_target = HPS + ally  # team 1 sees team 0's hero j in its enemies slot j
    assert masks["target"][enemy, A_ATTACK, enemy_target]
    actions[enemy] = (A_ATTACK, 0, enemy_target)
    for _ in range(8):
        env.step(actions)
    assert u[ally, HP] < u[ally, MAXHP]
    assert u[enemy, HP] < u[enemy, MAXHP], "the tower switched to the hero attacking its ally"


def test_team_spirit_one_shares_rewards_evenly() -> None:
    env = LaneGame(dataclasses.replace(CFG, games_per_batch=2, team_spirit=1.0))
    obs, masks = env.reset()
    bot = RandomBot(seed=8)
    for _ in range(100):
        step = env.step(bot.act(obs, masks))
        obs, masks = step.obs, step.masks
        per_team = step.rewards.reshape(-1, HPS)
        np.testing.assert_allclose(per_team, per_team[:, :1].repeat(HPS, axis=1), atol=1e-5)


def test_the_shop_buys_an_item_once_a_hero_can_afford_it(env: LaneGame) -> None:
    env.reset()
    h, u = env.state.heroes[0], env.state.units[0]
    h[0, H_GOLD] = CFG.item_cost - 0.1
    damage = u[0, DMG]
    step = env.step(noop(env))
    assert h[0, H_ITEMS] == 1.0 and h[0, H_GOLD] < 1.0 and u[0, DMG] > damage
    assert step.infos["reward/gold_spent"][0] == pytest.approx(CFG.item_cost * CFG.reward_gold_spent, rel=1e-3)
    assert step.infos["reward/gold_spent"][1] == 0.0


def test_a_hero_outside_its_assigned_lane_pays_the_lane_reward() -> None:
    """Lane = hero type index mod lanes (fixed draft: hero j of a team is type j): knight and priest
    mid, ranger and brute top, mage bottom."""
    env = LaneGame(dataclasses.replace(CFG, games_per_batch=1))
    env.reset()
    u = env.state.units[0]
    S = CFG.map_size
    places = {
        0: (50.0, 50.0),
        1: (50.0, 50.0),
        2: (60.0, 10.0),
        3: (40.0, 60.0),
        HPS + 1: (10.0, 70.0),
        HPS + 2: (S - 10.0, S - 60.0),
    }
    for hero, (x, y) in places.items():
        u[hero, X], u[hero, Y] = x, y
    u[4, ALIVE], u[4, HP] = 0.0, 0.0  # a dead hero is in no lane and pays nothing
    env.state.heroes[0, 4, H_RESPAWN] = 10.0
    step = env.step(noop(env))
    lane = step.infos["reward/lane"]
    per_step = CFG.reward_lane / CFG.steps_per_second
    outside = {1, 3, HPS, HPS + 3, HPS + 4}  # ranger and priest on mid, heroes left at the fountain
    for hero in range(2 * HPS):
        expected = per_step if hero in outside else 0.0
        assert lane[hero] == pytest.approx(expected, rel=1e-3), f"hero {hero}"
    off = LaneGame(dataclasses.replace(CFG, games_per_batch=1, reward_lane=0.0))
    off.reset()
    assert not off.step(noop(off)).infos["reward/lane"].any()


def test_creep_waves_alone_fight_mirror_alike_and_draw() -> None:
    """With every hero idle the two sides are mirror images for the whole game: no side wins by
    the order units are stored in (creeps and towers pick among equally near enemies alike)."""
    env = LaneGame(dataclasses.replace(CFG, games_per_batch=1))
    env.reset()
    u = env.state.units[0]
    first_creep, S = creep_slot(env), CFG.map_size
    for step_no in range(1, CFG.time_limit_steps + 1):
        step = env.step(noop(env))
        if step.dones.any():
            break
        creeps = u[first_creep:][u[first_creep:, ALIVE] > 0]
        own, other = creeps[creeps[:, TEAM] == 0], creeps[creeps[:, TEAM] == 1]
        mirrored = np.stack([S - other[:, Y], S - other[:, X], other[:, HP]], axis=1)
        assert len(own) == len(mirrored), f"step {step_no}"
        for x, y, hp in own[:, [X, Y, HP]]:
            gaps = np.abs(mirrored - (x, y, hp)).max(axis=1)
            assert gaps.min() < 0.05, f"step {step_no}: team 0's creep at ({x:.2f}, {y:.2f}) has no mirror image"
        structures = u[2 * HPS : first_creep, HP]
        np.testing.assert_allclose(structures[:SB], structures[SB:], err_msg=f"step {step_no}")
    assert step_no == CFG.time_limit_steps and env.results[-1]["winner"] == -1
