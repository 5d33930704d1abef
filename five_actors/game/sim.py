"""The lane game's numba kernels that reset and advance games (observations are in observe.py).

A step runs in phases so that neither team acts first: every unit decides and accumulates
damage, heals and moves from the positions at the start of the step (scratch arrays), then
all of it is applied, then deaths are resolved. The killing blow on a unit goes to the hero
that hit it hardest this step (the lower index on a tie), or to nobody.
"""

from __future__ import annotations

import math

import numpy as np

from five_actors.game.jit import kernel
from five_actors.game.state import (
    A_ABILITY0,
    A_ABILITY2,
    A_ATTACK,
    A_MOVE,
    A_NOOP,
    A_RECALL,
    AB_COOLDOWN,
    AB_COST,
    AB_DURATION,
    AB_KIND,
    AB_RADIUS,
    AB_RANGE,
    AB_VALUE,
    ACD,
    AK_AREA,
    AK_HASTE,
    AK_HEAL,
    AK_NUKE,
    ALIVE,
    DMG,
    EV_ABILITY,
    EV_RECALL,
    G_NEXTWAVE,
    G_WINNER,
    H_CD0,
    H_CDRECALL,
    H_GOLD,
    H_HPREGEN,
    H_ITEMS,
    H_LEVEL,
    H_MPREGEN,
    H_PREVHPF,
    H_PREVMPF,
    H_TYPE,
    HASTE,
    HASTE_FACTOR,
    HITHERO,
    HP,
    HT_DMG,
    HT_DMG_GAIN,
    HT_HP,
    HT_HP_GAIN,
    HT_HP_REGEN,
    HT_MANA,
    HT_MANA_GAIN,
    HT_MP_REGEN,
    HT_PERIOD,
    HT_RANGE,
    HT_SPEED,
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
    P_ANCIENT_HP,
    P_HERO_VISION,
    P_HPS,
    P_MAP,
    P_RECALL_CD,
    P_START_GOLD,
    P_TOWER_DMG,
    P_TOWER_HP,
    P_TOWER_RANGE,
    P_TOWER_VISION,
    P_TPL,
    PERIOD,
    PREVHPF,
    RANGE,
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

ITEM_DAMAGE, ITEM_HEALTH, ITEM_MANA = 12.0, 150.0, 120.0

# The move head's directions as exact unit vectors (0 = +x, counter-clockwise by 45 degrees).
_R = math.sqrt(0.5)
DIR_X = np.array([1.0, _R, 0.0, -_R, -1.0, -_R, 0.0, _R])
DIR_Y = np.array([0.0, _R, 1.0, _R, 0.0, -_R, -1.0, -_R])


@kernel
def _event(ev: np.ndarray, nev: np.ndarray, g: int, kind: int, x: float, y: float, a: float, b: float) -> None:
    n = nev[g]
    if n < ev.shape[1]:
        ev[g, n, 0] = kind
        ev[g, n, 1] = x
        ev[g, n, 2] = y
        ev[g, n, 3] = a
        ev[g, n, 4] = b
        nev[g] = n + 1


@kernel
def _refresh_hero(u: np.ndarray, h: np.ndarray, g: int, i: int, HT: np.ndarray) -> None:
    """Recompute a hero's max health, mana and damage from its level and items."""
    t = int(h[g, i, H_TYPE])
    lv = h[g, i, H_LEVEL] - 1.0
    n = int(h[g, i, H_ITEMS])
    maxhp = HT[t, HT_HP] + lv * HT[t, HT_HP_GAIN] + ((n + 1) // 3) * ITEM_HEALTH
    maxmp = HT[t, HT_MANA] + lv * HT[t, HT_MANA_GAIN] + (n // 3) * ITEM_MANA
    u[g, i, DMG] = HT[t, HT_DMG] + lv * HT[t, HT_DMG_GAIN] + ((n + 2) // 3) * ITEM_DAMAGE
    if u[g, i, ALIVE] > 0:
        u[g, i, HP] += maxhp - u[g, i, MAXHP]
        u[g, i, MANA] += maxmp - u[g, i, MAXMANA]
    u[g, i, MAXHP] = maxhp
    u[g, i, MAXMANA] = maxmp


@kernel
def reset_game(
    g: int,
    types: np.ndarray,
    u: np.ndarray,
    h: np.ndarray,
    seen: np.ndarray,
    gs: np.ndarray,
    P: np.ndarray,
    HT: np.ndarray,
    SPOS: np.ndarray,
    FOUNT: np.ndarray,
) -> None:
    """Start game `g` afresh with hero types `types[heroes]`."""
    hps = int(P[P_HPS])
    nh = 2 * hps
    sb = SPOS.shape[1]
    tpl = int(P[P_TPL])
    u[g] = 0.0
    h[g] = 0.0
    seen[g] = 0.0
    gs[g] = 0.0
    gs[g, G_NEXTWAVE] = 1.0
    gs[g, G_WINNER] = -1.0
    u[g, :, TGT] = -1.0
    for i in range(nh):
        team = i // hps
        t = int(types[i])
        h[g, i, H_TYPE] = t
        h[g, i, H_LEVEL] = 1.0
        h[g, i, H_GOLD] = P[P_START_GOLD]
        h[g, i, H_PREVHPF] = 1.0
        h[g, i, H_PREVMPF] = 1.0
        h[g, i, H_HPREGEN] = HT[t, HT_HP_REGEN]
        h[g, i, H_MPREGEN] = HT[t, HT_MP_REGEN]
        u[g, i, TEAM] = team
        u[g, i, KIND] = KIND_HERO
        u[g, i, ALIVE] = 1.0
        _refresh_hero(u, h, g, i, HT)
        u[g, i, HP] = u[g, i, MAXHP]
        u[g, i, MANA] = u[g, i, MAXMANA]
        u[g, i, X] = FOUNT[team, 0]
        u[g, i, Y] = FOUNT[team, 1]
        u[g, i, RANGE] = HT[t, HT_RANGE]
        u[g, i, PERIOD] = HT[t, HT_PERIOD]
        u[g, i, SPEED] = HT[t, HT_SPEED]
        u[g, i, VISION] = P[P_HERO_VISION]
        u[g, i, PREVHPF] = 1.0
    for team in range(2):
        for s in range(sb):
            k = nh + team * sb + s
            ancient = s == sb - 1
            u[g, k, TEAM] = team
            u[g, k, KIND] = KIND_ANCIENT if ancient else KIND_TOWER
            u[g, k, X] = SPOS[team, s, 0]
            u[g, k, Y] = SPOS[team, s, 1]
            u[g, k, MAXHP] = P[P_ANCIENT_HP] if ancient else P[P_TOWER_HP]
            u[g, k, HP] = u[g, k, MAXHP]
            u[g, k, ALIVE] = 1.0
            u[g, k, DMG] = 0.0 if ancient else P[P_TOWER_DMG]
            u[g, k, RANGE] = P[P_TOWER_RANGE]
            u[g, k, PERIOD] = 8.0
            u[g, k, VISION] = P[P_TOWER_VISION]
            u[g, k, TIER] = tpl if ancient else s % tpl
            u[g, k, LANE] = -1.0 if ancient else s // tpl
            u[g, k, PREVHPF] = 1.0


@kernel
def team_offset(team: int, dx: float, dy: float) -> tuple[float, float]:
    """A map offset as `team` sees it (team 1's view is reflected)."""
    if team == 0:
        return dx, dy
    return -dy, -dx


@kernel
def closer(d2: float, rx: float, ry: float, other_d2: float, other_x: float, other_y: float) -> bool:
    """Whether squared distance `d2` at offset (rx, ry) comes before the other: near-equal distances
    are ordered by the offset in the viewer's own frame, so that mirrored units choose alike on both sides."""
    if abs(d2 - other_d2) > 1e-3:
        return d2 < other_d2
    # Units stacked on one spot (a creep wave at a waypoint) differ by rounding alone: none comes first.
    return rx < other_x - 1e-3 or (abs(rx - other_x) <= 1e-3 and ry < other_y - 1e-3)


@kernel
def vulnerable(u: np.ndarray, g: int, k: int, nh: int, sb: int, tpl: int) -> bool:
    """Whether structure `k` can be attacked: tier 0 always, a tier once the one before fell,
    an ancient once some lane has lost all its towers."""
    team = int(u[g, k, TEAM])
    base = nh + team * sb
    s = k - base
    if s == sb - 1:
        for lane in range((sb - 1) // tpl):
            if u[g, base + lane * tpl + tpl - 1, ALIVE] == 0:
                return True
        return False
    if s % tpl == 0:
        return True
    return u[g, k - 1, ALIVE] == 0


@kernel
def _hit(sc: np.ndarray, g: int, target: int, attacker: int, amount: float, nh: int) -> None:
    sc[g, target, SC_DMG] += amount
    if attacker < nh and amount > sc[g, target, SC_BESTDMG]:
        sc[g, target, SC_BESTDMG] = amount
        sc[g, target, SC_BEST] = attacker


@kernel
def _move_toward(
    u: np.ndarray, sc: np.ndarray, g: int, k: int, tx: float, ty: float, speed: float, stop_at: float
) -> None:
    dx = tx - u[g, k, X]
    dy = ty - u[g, k, Y]
    d = math.sqrt(dx * dx + dy * dy)
    step = min(speed, d - stop_at)
    if step > 0 and d > 0:
        sc[g, k, NX_SCRATCH] = u[g, k, X] + dx / d * step
        sc[g, k, NY_SCRATCH] = u[g, k, Y] + dy / d * step


@kernel
def _hero_orders(
    g: int,
    actions: np.ndarray,
    u: np.ndarray,
    h: np.ndarray,
    sc: np.ndarray,
    ev: np.ndarray,
    nev: np.ndarray,
    slot_unit: np.ndarray,
    mtype: np.ndarray,
    mmove: np.ndarray,
    mtarget: np.ndarray,
    illegal: np.ndarray,
    P: np.ndarray,
    AB: np.ndarray,
    FOUNT: np.ndarray,
) -> None:
    """Phase 1 for heroes: check each order against the masks it was given, then act on it."""
    nh = 2 * int(P[P_HPS])
    S = P[P_MAP]
    for i in range(nh):
        row = g * nh + i
        a = actions[row, 0]
        tg = actions[row, 2]
        ok = mtype[row, a]
        if ok and a == A_MOVE:
            ok = mmove[row, a, actions[row, 1]]
        if ok and (a == A_ATTACK or A_ABILITY0 <= a <= A_ABILITY2):
            ok = mtarget[row, a, tg]
        if not ok:
            illegal[row] += 1
            a = A_NOOP
        if a == A_NOOP or u[g, i, ALIVE] == 0 or u[g, i, STUN] > 0:
            continue
        team = int(u[g, i, TEAM])
        speed = u[g, i, SPEED] * (HASTE_FACTOR if u[g, i, HASTE] > 0 else 1.0)
        x = u[g, i, X]
        y = u[g, i, Y]
        if a == A_MOVE:
            d = actions[row, 1]
            # Team 1 sees the map reflected: its direction (dx, dy) is (-dy, -dx) on the map.
            cx = DIR_X[d] if team == 0 else -DIR_Y[d]
            cy = DIR_Y[d] if team == 0 else -DIR_X[d]
            sc[g, i, NX_SCRATCH] = min(max(x + speed * cx, 0.0), S)
            sc[g, i, NY_SCRATCH] = min(max(y + speed * cy, 0.0), S)
            continue
        if a == A_RECALL:
            sc[g, i, NX_SCRATCH] = FOUNT[team, 0]
            sc[g, i, NY_SCRATCH] = FOUNT[team, 1]
            h[g, i, H_CDRECALL] = P[P_RECALL_CD]
            _event(ev, nev, g, EV_RECALL, x, y, i, 0)
            continue
        tu = slot_unit[row, tg]
        tx = u[g, tu, X]
        ty = u[g, tu, Y]
        dist = math.sqrt((tx - x) ** 2 + (ty - y) ** 2)
        t = int(h[g, i, H_TYPE])
        k = a - A_ABILITY0
        reach = u[g, i, RANGE] if a == A_ATTACK else AB[t, k, AB_RANGE]
        if dist > reach:
            _move_toward(u, sc, g, i, tx, ty, speed, reach * 0.9)
        elif a == A_ATTACK:
            if u[g, i, ACD] <= 0:
                _hit(sc, g, tu, i, u[g, i, DMG], nh)
                u[g, i, ACD] = u[g, i, PERIOD]
                if tu < nh:
                    u[g, i, HITHERO] = 1.0
        else:
            kind = int(AB[t, k, AB_KIND])
            value = AB[t, k, AB_VALUE]
            u[g, i, MANA] -= AB[t, k, AB_COST]
            h[g, i, H_CD0 + k] = AB[t, k, AB_COOLDOWN]
            _event(ev, nev, g, EV_ABILITY, tx, ty, i, k)
            if kind == AK_NUKE:
                _hit(sc, g, tu, i, value, nh)
                if tu < nh:
                    u[g, i, HITHERO] = 1.0
            elif kind == AK_AREA:
                radius = AB[t, k, AB_RADIUS]
                for v in range(u.shape[1]):
                    kv = u[g, v, KIND]
                    if u[g, v, ALIVE] == 0 or u[g, v, TEAM] == team or (kv != KIND_HERO and kv != KIND_CREEP):
                        continue
                    if (u[g, v, X] - tx) ** 2 + (u[g, v, Y] - ty) ** 2 <= radius * radius:
                        _hit(sc, g, v, i, value, nh)
                        sc[g, v, SC_STUN] = max(sc[g, v, SC_STUN], AB[t, k, AB_DURATION])
                        if v < nh:
                            u[g, i, HITHERO] = 1.0
            elif kind == AK_HEAL:
                sc[g, tu, SC_HEAL] += value
            elif kind == AK_HASTE:
                sc[g, i, SC_HASTE] = max(sc[g, i, SC_HASTE], AB[t, k, AB_DURATION])


@kernel
def _nearest(u: np.ndarray, g: int, k: int, lo: int, hi: int, r2: float, hit_hero: bool) -> int:
    """The living enemy of unit `k` among units lo..hi-1 nearest to it within squared range `r2`
    (only heroes that hit an enemy hero this step when `hit_hero`), or -1; ties go by `closer`."""
    team = int(u[g, k, TEAM])
    best = -1
    best_d = 0.0
    best_x = 0.0
    best_y = 0.0
    for v in range(lo, hi):
        if u[g, v, ALIVE] == 0 or u[g, v, TEAM] == team or (hit_hero and u[g, v, HITHERO] == 0):
            continue
        d2 = (u[g, v, X] - u[g, k, X]) ** 2 + (u[g, v, Y] - u[g, k, Y]) ** 2
        if d2 > r2:
            continue
        rx, ry = team_offset(team, u[g, v, X] - u[g, k, X], u[g, v, Y] - u[g, k, Y])
        if best < 0 or closer(d2, rx, ry, best_d, best_x, best_y):
            best, best_d, best_x, best_y = v, d2, rx, ry
    return best


@kernel
def _npc_target(u: np.ndarray, g: int, k: int, r2: float, nh: int, sb: int, tpl: int, c0: int, structures: bool) -> int:
    """What tower or creep `k` fights within squared range `r2` (or -1), as Dota's choose: an enemy
    hero that hit an allied hero this step; else its current target while that is still an enemy in
    range; else the nearest enemy creep, then (creeps: `structures`) attackable structure, then hero.
    Creeps that prefer creeps and keep their target let a hero stand in lane without drawing fire."""
    best = _nearest(u, g, k, 0, nh, r2, True)
    cur = int(u[g, k, TGT])
    if best < 0 and cur >= 0 and u[g, cur, ALIVE] > 0 and u[g, cur, TEAM] != u[g, k, TEAM]:
        if (u[g, cur, X] - u[g, k, X]) ** 2 + (u[g, cur, Y] - u[g, k, Y]) ** 2 <= r2:
            best = cur
    if best < 0:
        best = _nearest(u, g, k, c0, u.shape[1], r2, False)
    if best < 0 and structures:
        best = _nearest_structure(u, g, k, nh, sb, tpl, r2)
    if best < 0:
        best = _nearest(u, g, k, 0, nh, r2, False)
    u[g, k, TGT] = best
    return best


@kernel
def _nearest_structure(u: np.ndarray, g: int, k: int, nh: int, sb: int, tpl: int, r2: float) -> int:
    """The nearest enemy structure of unit `k` within squared range `r2` that can be attacked, or -1."""
    team = int(u[g, k, TEAM])
    best = -1
    best_d = 0.0
    best_x = 0.0
    best_y = 0.0
    for v in range(nh, nh + 2 * sb):
        if u[g, v, ALIVE] == 0 or u[g, v, TEAM] == team or not vulnerable(u, g, v, nh, sb, tpl):
            continue
        d2 = (u[g, v, X] - u[g, k, X]) ** 2 + (u[g, v, Y] - u[g, k, Y]) ** 2
        if d2 > r2:
            continue
        rx, ry = team_offset(team, u[g, v, X] - u[g, k, X], u[g, v, Y] - u[g, k, Y])
        if best < 0 or closer(d2, rx, ry, best_d, best_x, best_y):
            best, best_d, best_x, best_y = v, d2, rx, ry
    return best


@kernel
def _npc_orders(
    g: int, u: np.ndarray, sc: np.ndarray, P: np.ndarray, WPTS: np.ndarray, nh: int, sb: int, tpl: int
) -> None:
    """Phase 1 for towers and creeps: each fights what `_npc_target` picks in its range (a creep:
    its aggro range, the creep vision), or a creep walks its lane."""
    n = u.shape[1]
    c0 = nh + 2 * sb
    for k in range(nh, n):
        if u[g, k, ALIVE] == 0 or u[g, k, STUN] > 0:
            continue
        kind = u[g, k, KIND]
        if kind == KIND_ANCIENT:
            continue
        team = u[g, k, TEAM]
        x = u[g, k, X]
        y = u[g, k, Y]
        reach = u[g, k, RANGE]
        if kind == KIND_TOWER:
            best = _npc_target(u, g, k, reach * reach, nh, sb, tpl, c0, False)
            if best >= 0 and u[g, k, ACD] <= 0:
                _hit(sc, g, best, k, u[g, k, DMG], nh)
                u[g, k, ACD] = u[g, k, PERIOD]
            continue
        best = _npc_target(u, g, k, u[g, k, VISION] ** 2, nh, sb, tpl, c0, True)
        if best >= 0:
            if (u[g, best, X] - x) ** 2 + (u[g, best, Y] - y) ** 2 <= reach * reach:
                if u[g, k, ACD] <= 0:
                    _hit(sc, g, best, k, u[g, k, DMG], nh)
                    u[g, k, ACD] = u[g, k, PERIOD]
            else:
                _move_toward(u, sc, g, k, u[g, best, X], u[g, best, Y], u[g, k, SPEED], reach * 0.9)
        else:
            t = int(team)
            lane = int(u[g, k, LANE])
            wp = int(u[g, k, WP])
            tx = WPTS[t, lane, wp, 0]
            ty = WPTS[t, lane, wp, 1]
            if (tx - x) ** 2 + (ty - y) ** 2 < 1.0 and wp < WPTS.shape[2] - 1:
                u[g, k, WP] = wp + 1
            _move_toward(u, sc, g, k, tx, ty, u[g, k, SPEED], 0.0)
