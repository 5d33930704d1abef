"""One game step end to end: orders (sim.py), then damage, deaths, income, waves, the end of
the game and the shaped, team-spirited, zero-sum rewards. `step_all` runs it over games in parallel."""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from five_actors.game.jit import kernel
from five_actors.game.sim import _event, _hero_orders, _npc_orders, _refresh_hero
from five_actors.game.state import (
    ACD,
    ALIVE,
    C_ANCIENT,
    C_DEATH,
    C_DENY,
    C_GOLD,
    C_HEALTH,
    C_KILL,
    C_LANE,
    C_LASTHIT,
    C_MANA,
    C_SPENT,
    C_TOWER,
    C_WIN,
    C_XP,
    DMG,
    EV_ANCIENT,
    EV_DENY,
    EV_KILL,
    EV_LASTHIT,
    EV_TOWER,
    FOUNTAIN_RADIUS,
    G_DONE,
    G_NEXTWAVE,
    G_STEP,
    G_WINNER,
    H_CD0,
    H_CDRECALL,
    H_DEATHS,
    H_DENIES,
    H_GOLD,
    H_HPREGEN,
    H_ITEMS,
    H_KILLS,
    H_LASTHITS,
    H_LEVEL,
    H_MPREGEN,
    H_PREVHPF,
    H_PREVMPF,
    H_RESPAWN,
    H_SPENT,
    H_TYPE,
    H_XP,
    HASTE,
    HITHERO,
    HP,
    KIND,
    KIND_ANCIENT,
    KIND_CREEP,
    KIND_HERO,
    KIND_TOWER,
    LANE,
    MANA,
    MAXHP,
    MAXMANA,
    NX_SCRATCH,
    NY_SCRATCH,
    P_CREEP_DMG,
    P_CREEP_GOLD,
    P_CREEP_HP,
    P_CREEP_SPEED,
    P_CREEP_VISION,
    P_CREEP_XP,
    P_CREEPS_PER_WAVE,
    P_DECAY_PER_STEP,
    P_DENY_XP,
    P_FOUNTAIN_REGEN,
    P_HPS,
    P_ITEM_COST,
    P_KILL_GOLD,
    P_KILL_XP,
    P_LANE_WIDTH,
    P_LANES,
    P_MAX_ITEMS,
    P_MAX_LEVEL,
    P_PASSIVE_GOLD,
    P_R_ANCIENT,
    P_R_DEATH,
    P_R_DENY,
    P_R_GOLD,
    P_R_HEALTH,
    P_R_KILL,
    P_R_LANE,
    P_R_LASTHIT,
    P_R_MANA,
    P_R_SPENT,
    P_R_WIN,
    P_R_XP,
    P_RESPAWN_BASE,
    P_RESPAWN_PER_LEVEL,
    P_SPS,
    P_TEAM_SPIRIT,
    P_TIME_LIMIT,
    P_TOWER_GOLD,
    P_TPL,
    P_WAVE_INTERVAL,
    P_XP_PER_LEVEL,
    P_XP_RADIUS,
    PERIOD,
    PREVHPF,
    RANGE,
    REWARD_COMPONENTS,
    SC_BEST,
    SC_BESTDMG,
    SC_DMG,
    SC_HASTE,
    SC_HEAL,
    SC_STUN,
    SPEED,
    STUN,
    TEAM,
    TGT,
    TIER,
    VISION,
    WP,
    X,
    Y,
)


@kernel
def _gain(
    u: np.ndarray, h: np.ndarray, acc: np.ndarray, g: int, i: int, gold: float, xp: float, P: np.ndarray, HT: np.ndarray
) -> None:
    """Give hero `i` gold and XP, levelling it up as far as its XP reaches."""
    h[g, i, H_GOLD] += gold
    acc[g, i, C_GOLD] += gold
    if xp <= 0:
        return
    acc[g, i, C_XP] += xp
    if h[g, i, H_LEVEL] >= P[P_MAX_LEVEL]:
        return
    h[g, i, H_XP] += xp
    levelled = False
    while h[g, i, H_LEVEL] < P[P_MAX_LEVEL] and h[g, i, H_XP] >= P[P_XP_PER_LEVEL] * h[g, i, H_LEVEL]:
        h[g, i, H_XP] -= P[P_XP_PER_LEVEL] * h[g, i, H_LEVEL]
        h[g, i, H_LEVEL] += 1.0
        levelled = True
    if levelled:
        _refresh_hero(u, h, g, i, HT)


@kernel
def _share_xp(
    u: np.ndarray,
    h: np.ndarray,
    acc: np.ndarray,
    g: int,
    team: int,
    x: float,
    y: float,
    amount: float,
    P: np.ndarray,
    HT: np.ndarray,
) -> None:
    """Split `amount` XP between the living heroes of `team` within xp_radius of (x, y)."""
    hps = int(P[P_HPS])
    r2 = P[P_XP_RADIUS] ** 2
    near = 0
    for i in range(team * hps, team * hps + hps):
        if u[g, i, ALIVE] > 0 and (u[g, i, X] - x) ** 2 + (u[g, i, Y] - y) ** 2 <= r2:
            near += 1
    if near == 0 or amount <= 0:
        return
    for i in range(team * hps, team * hps + hps):
        if u[g, i, ALIVE] > 0 and (u[g, i, X] - x) ** 2 + (u[g, i, Y] - y) ** 2 <= r2:
            _gain(u, h, acc, g, i, 0.0, amount / near, P, HT)


@kernel
def _die(
    g: int,
    k: int,
    u: np.ndarray,
    h: np.ndarray,
    gs: np.ndarray,
    acc: np.ndarray,
    sc: np.ndarray,
    ev: np.ndarray,
    nev: np.ndarray,
    P: np.ndarray,
    HT: np.ndarray,
    RT: np.ndarray,
) -> None:
    """Resolve the death of unit `k`: bounties, XP, denies, respawn timers, structure rewards, the winner."""
    hps = int(P[P_HPS])
    team = int(u[g, k, TEAM])
    other = 1 - team
    kind = u[g, k, KIND]
    killer = int(sc[g, k, SC_BEST])
    x = u[g, k, X]
    y = u[g, k, Y]
    u[g, k, ALIVE] = 0.0
    u[g, k, HP] = 0.0
    u[g, k, STUN] = 0.0
    u[g, k, HASTE] = 0.0
    enemy_killer = killer >= 0 and int(u[g, killer, TEAM]) != team
    if kind == KIND_HERO:
        level = h[g, k, H_LEVEL]
        h[g, k, H_DEATHS] += 1.0
        acc[g, k, C_DEATH] += 1.0
        h[g, k, H_RESPAWN] = P[P_RESPAWN_BASE] + P[P_RESPAWN_PER_LEVEL] * level
        if enemy_killer:
            h[g, killer, H_KILLS] += 1.0
            acc[g, killer, C_KILL] += 1.0
            _gain(u, h, acc, g, killer, P[P_KILL_GOLD] + 10.0 * level, 0.0, P, HT)
        _share_xp(u, h, acc, g, other, x, y, P[P_KILL_XP] + 20.0 * level, P, HT)
        _event(ev, nev, g, EV_KILL, x, y, killer, k)
    elif kind == KIND_CREEP:
        xp = P[P_CREEP_XP]
        if enemy_killer:
            h[g, killer, H_LASTHITS] += 1.0
            acc[g, killer, C_LASTHIT] += 1.0
            _gain(u, h, acc, g, killer, P[P_CREEP_GOLD], 0.0, P, HT)
            _event(ev, nev, g, EV_LASTHIT, x, y, killer, k)
        elif killer >= 0:
            h[g, killer, H_DENIES] += 1.0
            acc[g, killer, C_DENY] += 1.0
            xp *= P[P_DENY_XP]
            _event(ev, nev, g, EV_DENY, x, y, killer, k)
        _share_xp(u, h, acc, g, other, x, y, xp, P, HT)
    elif kind == KIND_TOWER:
        tier = min(int(u[g, k, TIER]), RT.shape[0] - 1)
        for i in range(other * hps, other * hps + hps):
            _gain(u, h, acc, g, i, P[P_TOWER_GOLD], 0.0, P, HT)
            acc[g, i, C_TOWER] += RT[tier] / 3.0
        _event(ev, nev, g, EV_TOWER, x, y, killer, k)
    else:
        gs[g, G_WINNER] = other
        _event(ev, nev, g, EV_ANCIENT, x, y, killer, k)


@kernel
def lane_distance(x: float, y: float, WPTS: np.ndarray, team: int, lane: int) -> float:
    """Distance from (x, y) to the path through lane `lane`'s waypoints (as `team` walks it)."""
    best = 1e30
    for w in range(WPTS.shape[2] - 1):
        ax = WPTS[team, lane, w, 0]
        ay = WPTS[team, lane, w, 1]
        dx = WPTS[team, lane, w + 1, 0] - ax
        dy = WPTS[team, lane, w + 1, 1] - ay
        t = ((x - ax) * dx + (y - ay) * dy) / (dx * dx + dy * dy)
        t = min(max(t, 0.0), 1.0)
        best = min(best, math.sqrt((x - ax - t * dx) ** 2 + (y - ay - t * dy) ** 2))
    return best


@kernel
def _spawn_wave(g: int, u: np.ndarray, P: np.ndarray, WPTS: np.ndarray, c0: int) -> None:
    """One wave: creeps_per_wave creeps per lane per side at the lane's start, into free creep slots."""
    n = u.shape[1]
    nh_plus = 2 * int(P[P_HPS])  # towers and creeps hold targets
    slot = c0
    for lane in range(int(P[P_LANES])):
        for j in range(int(P[P_CREEPS_PER_WAVE])):
            for team in range(2):
                while slot < n and u[g, slot, ALIVE] > 0:
                    slot += 1
                if slot >= n:
                    return
                sx = WPTS[team, lane, 0, 0]
                sy = WPTS[team, lane, 0, 1]
                dx = WPTS[team, lane, 1, 0] - sx
                dy = WPTS[team, lane, 1, 1] - sy
                d = math.sqrt(dx * dx + dy * dy)
                back = 3.0 + 1.2 * j
                # A reused slot is a new unit: whoever targeted the one that died there forgets it.
                for v in range(nh_plus, n):
                    if u[g, v, TGT] == slot:
                        u[g, v, TGT] = -1.0
                u[g, slot] = 0.0
                u[g, slot, X] = sx + dx / d * back
                u[g, slot, Y] = sy + dy / d * back
                u[g, slot, TEAM] = team
                u[g, slot, KIND] = KIND_CREEP
                u[g, slot, ALIVE] = 1.0
                u[g, slot, HP] = P[P_CREEP_HP]
                u[g, slot, MAXHP] = P[P_CREEP_HP]
                u[g, slot, DMG] = P[P_CREEP_DMG]
                u[g, slot, RANGE] = 1.5
                u[g, slot, PERIOD] = 8.0
                u[g, slot, SPEED] = P[P_CREEP_SPEED]
                u[g, slot, VISION] = P[P_CREEP_VISION]
                u[g, slot, LANE] = lane
                u[g, slot, WP] = 1.0
                u[g, slot, TGT] = -1.0
                slot += 1


@kernel
def step_game(
    g: int,
    actions: np.ndarray,
    u: np.ndarray,
    h: np.ndarray,
    gs: np.ndarray,
    acc: np.ndarray,
    sc: np.ndarray,
    ev: np.ndarray,
    nev: np.ndarray,
    slot_unit: np.ndarray,
    mtype: np.ndarray,
    mmove: np.ndarray,
    mtarget: np.ndarray,
    illegal: np.ndarray,
    rewards: np.ndarray,
    comps: np.ndarray,
    P: np.ndarray,
    HT: np.ndarray,
    AB: np.ndarray,
    RT: np.ndarray,
    WPTS: np.ndarray,
    SPOS: np.ndarray,
    FOUNT: np.ndarray,
) -> None:
    """Advance game `g` by one step and write its rows' rewards and reward components."""
    hps = int(P[P_HPS])
    nh = 2 * hps
    sb = SPOS.shape[1]
    tpl = int(P[P_TPL])
    n = u.shape[1]
    c0 = nh + 2 * sb
    nev[g] = 0
    acc[g] = 0.0
    for k in range(n):
        sc[g, k, SC_DMG] = 0.0
        sc[g, k, SC_BEST] = -1.0
        sc[g, k, SC_BESTDMG] = 0.0
        sc[g, k, SC_HEAL] = 0.0
        sc[g, k, SC_STUN] = 0.0
        sc[g, k, SC_HASTE] = 0.0
        sc[g, k, NX_SCRATCH] = u[g, k, X]
        sc[g, k, NY_SCRATCH] = u[g, k, Y]
    for i in range(nh):
        u[g, i, HITHERO] = 0.0

    _hero_orders(g, actions, u, h, sc, ev, nev, slot_unit, mtype, mmove, mtarget, illegal, P, AB, FOUNT)
    _npc_orders(g, u, sc, P, WPTS, nh, sb, tpl)

    # Apply everything decided from the same starting positions, then resolve deaths.
    for k in range(n):
        if u[g, k, ALIVE] == 0:
            continue
        u[g, k, HP] = min(u[g, k, MAXHP], u[g, k, HP] + sc[g, k, SC_HEAL]) - sc[g, k, SC_DMG]
        u[g, k, STUN] = max(u[g, k, STUN], sc[g, k, SC_STUN])
        u[g, k, HASTE] = max(u[g, k, HASTE], sc[g, k, SC_HASTE])
        u[g, k, X] = sc[g, k, NX_SCRATCH]
        u[g, k, Y] = sc[g, k, NY_SCRATCH]
        kind = u[g, k, KIND]
        if kind == KIND_TOWER or kind == KIND_ANCIENT:
            frac = max(u[g, k, HP], 0.0) / u[g, k, MAXHP]
            lost = u[g, k, PREVHPF] - frac
            u[g, k, PREVHPF] = frac
            if lost > 0:
                attackers = 1 - int(u[g, k, TEAM])
                if kind == KIND_TOWER:
                    value = RT[min(int(u[g, k, TIER]), RT.shape[0] - 1)] * 2.0 / 3.0 * lost
                    col = C_TOWER
                else:
                    value = P[P_R_ANCIENT] * lost
                    col = C_ANCIENT
                for i in range(attackers * hps, attackers * hps + hps):
                    acc[g, i, col] += value
    for k in range(n):
        if u[g, k, ALIVE] > 0 and u[g, k, HP] <= 0:
            _die(g, k, u, h, gs, acc, sc, ev, nev, P, HT, RT)

    # Timers, regeneration, respawns, income and the scripted shop.
    for k in range(nh, n):
        if u[g, k, ALIVE] > 0:
            u[g, k, ACD] = max(0.0, u[g, k, ACD] - 1.0)
            u[g, k, STUN] = max(0.0, u[g, k, STUN] - 1.0)
    fr2 = FOUNTAIN_RADIUS * FOUNTAIN_RADIUS
    for i in range(nh):
        team = i // hps
        if u[g, i, ALIVE] > 0:
            u[g, i, ACD] = max(0.0, u[g, i, ACD] - 1.0)
            u[g, i, STUN] = max(0.0, u[g, i, STUN] - 1.0)
            u[g, i, HASTE] = max(0.0, u[g, i, HASTE] - 1.0)
            hp_regen = h[g, i, H_HPREGEN]
            mp_regen = h[g, i, H_MPREGEN]
            if (u[g, i, X] - FOUNT[team, 0]) ** 2 + (u[g, i, Y] - FOUNT[team, 1]) ** 2 <= fr2:
                hp_regen += P[P_FOUNTAIN_REGEN] * u[g, i, MAXHP]
                mp_regen += P[P_FOUNTAIN_REGEN] * u[g, i, MAXMANA]
            u[g, i, HP] = min(u[g, i, MAXHP], u[g, i, HP] + hp_regen)
            u[g, i, MANA] = min(u[g, i, MAXMANA], u[g, i, MANA] + mp_regen)
        else:
            h[g, i, H_RESPAWN] -= 1.0
            if h[g, i, H_RESPAWN] <= 0:
                h[g, i, H_RESPAWN] = 0.0
                u[g, i, ALIVE] = 1.0
                u[g, i, HP] = u[g, i, MAXHP]
                u[g, i, MANA] = u[g, i, MAXMANA]
                u[g, i, X] = FOUNT[team, 0]
                u[g, i, Y] = FOUNT[team, 1]
                u[g, i, ACD] = 0.0
        for k in range(3):
            h[g, i, H_CD0 + k] = max(0.0, h[g, i, H_CD0 + k] - 1.0)
        h[g, i, H_CDRECALL] = max(0.0, h[g, i, H_CDRECALL] - 1.0)
        # Lane assignment by hero type, which the hero sees in its own observation.
        lane = int(h[g, i, H_TYPE]) % int(P[P_LANES])
        if u[g, i, ALIVE] > 0 and lane_distance(u[g, i, X], u[g, i, Y], WPTS, team, lane) > P[P_LANE_WIDTH]:
            acc[g, i, C_LANE] += 1.0
        _gain(u, h, acc, g, i, P[P_PASSIVE_GOLD], 0.0, P, HT)
        while h[g, i, H_GOLD] >= P[P_ITEM_COST] and h[g, i, H_ITEMS] < P[P_MAX_ITEMS]:
            h[g, i, H_GOLD] -= P[P_ITEM_COST]
            h[g, i, H_SPENT] += P[P_ITEM_COST]
            acc[g, i, C_SPENT] += P[P_ITEM_COST]
            h[g, i, H_ITEMS] += 1.0
            _refresh_hero(u, h, g, i, HT)

    gs[g, G_STEP] += 1.0
    step_no = gs[g, G_STEP]
    if step_no >= gs[g, G_NEXTWAVE]:
        _spawn_wave(g, u, P, WPTS, c0)
        gs[g, G_NEXTWAVE] += P[P_WAVE_INTERVAL]
    if gs[g, G_WINNER] < 0 and step_no >= P[P_TIME_LIMIT]:
        # Decided by structures: more enemy towers destroyed, then the healthier ancient; else a draw.
        lost0 = lost1 = 0.0
        for s in range(sb - 1):
            lost0 += 1.0 - u[g, nh + s, ALIVE]
            lost1 += 1.0 - u[g, nh + sb + s, ALIVE]
        if lost0 == lost1:
            lost0 = 1.0 - u[g, nh + sb - 1, HP] / u[g, nh + sb - 1, MAXHP]
            lost1 = 1.0 - u[g, nh + 2 * sb - 1, HP] / u[g, nh + 2 * sb - 1, MAXHP]
        gs[g, G_DONE] = 1.0
        if lost0 != lost1:
            gs[g, G_WINNER] = 0.0 if lost0 < lost1 else 1.0
    elif gs[g, G_WINNER] >= 0:
        gs[g, G_DONE] = 1.0

    _rewards(g, u, h, gs, acc, rewards, comps, P, nh, hps)


@kernel
def health_score(x: float) -> float:
    """OpenAI Five's score of a health fraction x, (x + 1 - (1 - x)^4) / 2: 0 at death, 1 at full
    health; losing health near full costs half as much as linear scoring, near death 2.5 times."""
    return (x + 1.0 - (1.0 - x) ** 4) / 2.0


@kernel
def _rewards(
    g: int,
    u: np.ndarray,
    h: np.ndarray,
    gs: np.ndarray,
    acc: np.ndarray,
    rewards: np.ndarray,
    comps: np.ndarray,
    P: np.ndarray,
    nh: int,
    hps: int,
) -> None:
    """Weighted, time-decayed components per hero; then team spirit and zero-sum across teams."""
    decay = math.exp(P[P_DECAY_PER_STEP] * gs[g, G_STEP])
    rho = np.zeros(nh)
    for i in range(nh):
        row = g * nh + i
        alive = u[g, i, ALIVE] > 0
        hpf = u[g, i, HP] / u[g, i, MAXHP] if alive else 0.0
        mpf = u[g, i, MANA] / u[g, i, MAXMANA] if alive else 0.0
        if h[g, i, H_PREVHPF] >= 0:
            acc[g, i, C_HEALTH] = health_score(hpf) - health_score(h[g, i, H_PREVHPF])
            acc[g, i, C_MANA] = mpf - h[g, i, H_PREVMPF]
        h[g, i, H_PREVHPF] = hpf if alive else -1.0
        h[g, i, H_PREVMPF] = mpf if alive else -1.0
        comps[row, C_DEATH] = acc[g, i, C_DEATH] * P[P_R_DEATH]
        comps[row, C_XP] = acc[g, i, C_XP] * P[P_R_XP]
        comps[row, C_GOLD] = acc[g, i, C_GOLD] * P[P_R_GOLD]
        comps[row, C_HEALTH] = acc[g, i, C_HEALTH] * P[P_R_HEALTH]
        comps[row, C_MANA] = acc[g, i, C_MANA] * P[P_R_MANA]
        comps[row, C_KILL] = acc[g, i, C_KILL] * P[P_R_KILL]
        comps[row, C_LASTHIT] = acc[g, i, C_LASTHIT] * P[P_R_LASTHIT]
        comps[row, C_DENY] = acc[g, i, C_DENY] * P[P_R_DENY]
        comps[row, C_TOWER] = acc[g, i, C_TOWER]
        comps[row, C_ANCIENT] = acc[g, i, C_ANCIENT]
        comps[row, C_SPENT] = acc[g, i, C_SPENT] * P[P_R_SPENT]
        comps[row, C_LANE] = acc[g, i, C_LANE] * P[P_R_LANE] / P[P_SPS]
        shaped = 0.0
        for c in range(REWARD_COMPONENTS):
            if c != C_WIN:
                comps[row, c] *= decay
                shaped += comps[row, c]
        won = gs[g, G_DONE] > 0 and gs[g, G_WINNER] == i // hps
        comps[row, C_WIN] = P[P_R_WIN] if won else 0.0
        rho[i] = shaped + comps[row, C_WIN]
    tau = P[P_TEAM_SPIRIT]
    means = np.zeros(2)
    for i in range(nh):
        means[i // hps] += rho[i] / hps
    spirited = np.zeros(nh)
    smeans = np.zeros(2)
    for i in range(nh):
        spirited[i] = (1.0 - tau) * rho[i] + tau * means[i // hps]
        smeans[i // hps] += spirited[i] / hps
    for i in range(nh):
        rewards[g * nh + i] = spirited[i] - smeans[1 - i // hps]


@kernel(parallel=True)
def step_all(
    actions: np.ndarray,
    u: np.ndarray,
    h: np.ndarray,
    gs: np.ndarray,
    acc: np.ndarray,
    sc: np.ndarray,
    ev: np.ndarray,
    nev: np.ndarray,
    slot_unit: np.ndarray,
    mtype: np.ndarray,
    mmove: np.ndarray,
    mtarget: np.ndarray,
    illegal: np.ndarray,
    rewards: np.ndarray,
    comps: np.ndarray,
    P: np.ndarray,
    HT: np.ndarray,
    AB: np.ndarray,
    RT: np.ndarray,
    WPTS: np.ndarray,
    SPOS: np.ndarray,
    FOUNT: np.ndarray,
) -> None:
    """Step every game of the batch, in parallel over games."""
    for g in prange(u.shape[0]):
        step_game(
            g,
            actions,
            u,
            h,
            gs,
            acc,
            sc,
            ev,
            nev,
            slot_unit,
            mtype,
            mmove,
            mtarget,
            illegal,
            rewards,
            comps,
            P,
            HT,
            AB,
            RT,
            WPTS,
            SPOS,
            FOUNT,
        )


@kernel
def step_serial(
    actions: np.ndarray,
    u: np.ndarray,
    h: np.ndarray,
    gs: np.ndarray,
    acc: np.ndarray,
    sc: np.ndarray,
    ev: np.ndarray,
    nev: np.ndarray,
    slot_unit: np.ndarray,
    mtype: np.ndarray,
    mmove: np.ndarray,
    mtarget: np.ndarray,
    illegal: np.ndarray,
    rewards: np.ndarray,
    comps: np.ndarray,
    P: np.ndarray,
    HT: np.ndarray,
    AB: np.ndarray,
    RT: np.ndarray,
    WPTS: np.ndarray,
    SPOS: np.ndarray,
    FOUNT: np.ndarray,
) -> None:
    """Step every game of the batch on this thread (no parallel launch, and a faster compile)."""
    for g in range(u.shape[0]):
        step_game(
            g,
            actions,
            u,
            h,
            gs,
            acc,
            sc,
            ev,
            nev,
            slot_unit,
            mtype,
            mmove,
            mtarget,
            illegal,
            rewards,
            comps,
            P,
            HT,
            AB,
            RT,
            WPTS,
            SPOS,
            FOUNT,
        )
