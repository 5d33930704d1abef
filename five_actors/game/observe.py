"""Observations and masks: fog of war, last-seen enemy heroes, mirroring, pointer slots.

Team 1 sees every position reflected by (x, y) -> (S - y, S - x) and offsets by
(dx, dy) -> (-dy, -dx), so both teams see their own base at (0, 0). The feature order written
here is the order of spec.py's names; tests decode observations by those names.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from five_actors.game.jit import kernel
from five_actors.game.sim import closer, team_offset, vulnerable
from five_actors.game.state import (
    A_ABILITY0,
    A_ATTACK,
    A_MOVE,
    A_NOOP,
    A_RECALL,
    AB_COOLDOWN,
    AB_COST,
    AB_KIND,
    ACD,
    AK_AREA,
    AK_HASTE,
    AK_HEAL,
    AK_NUKE,
    ALIVE,
    DMG,
    G_NEXTWAVE,
    G_STEP,
    H_CD0,
    H_CDRECALL,
    H_DEATHS,
    H_GOLD,
    H_ITEMS,
    H_KILLS,
    H_LEVEL,
    H_RESPAWN,
    H_TYPE,
    H_XP,
    HASTE,
    HP,
    MANA,
    MAXHP,
    MAXMANA,
    P_MAP,
    P_MAX_ITEMS,
    P_MAX_LEVEL,
    P_POS_SCALE,
    P_RECALL_CD,
    P_SPS,
    P_TIME_LIMIT,
    P_TPL,
    P_WAVE_INTERVAL,
    P_XP_PER_LEVEL,
    RANGE,
    S_DMG,
    S_EVER,
    S_HPF,
    S_ITEMS,
    S_LEVEL,
    S_MPF,
    S_STUN,
    S_TIME,
    S_X,
    S_Y,
    SPEED,
    STUN,
    TEAM,
    TIER,
    VISION,
    X,
    Y,
)


@kernel
def _visibility(g: int, u: np.ndarray, vis: np.ndarray, nh: int, sb: int) -> None:
    """vis[g, team, unit]: a team sees its own units, all structures, and any unit within the
    vision radius of one of its living units."""
    n = u.shape[1]
    c0 = nh + 2 * sb
    ox = np.empty(n)
    oy = np.empty(n)
    orad = np.empty(n)
    for team in range(2):
        m = 0
        for v in range(n):
            if u[g, v, ALIVE] > 0 and u[g, v, TEAM] == team:
                ox[m] = u[g, v, X]
                oy[m] = u[g, v, Y]
                orad[m] = u[g, v, VISION] ** 2
                m += 1
        for k in range(n):
            alive = u[g, k, ALIVE] > 0
            if k >= nh and k < c0:
                vis[g, team, k] = alive
                continue
            if not alive:
                vis[g, team, k] = False
                continue
            if u[g, k, TEAM] == team:
                vis[g, team, k] = True
                continue
            x = u[g, k, X]
            y = u[g, k, Y]
            seen = False
            for j in range(m):
                if (ox[j] - x) ** 2 + (oy[j] - y) ** 2 <= orad[j]:
                    seen = True
                    break
            vis[g, team, k] = seen


@kernel
def _remember(g: int, u: np.ndarray, h: np.ndarray, seen: np.ndarray, vis: np.ndarray, step: float, hps: int) -> None:
    """Refresh each team's last-seen features of the enemy heroes it sees now."""
    for team in range(2):
        for j in range(hps):
            e = (1 - team) * hps + j
            if vis[g, team, e]:
                seen[g, team, j, S_X] = u[g, e, X]
                seen[g, team, j, S_Y] = u[g, e, Y]
                seen[g, team, j, S_HPF] = u[g, e, HP] / u[g, e, MAXHP]
                seen[g, team, j, S_MPF] = u[g, e, MANA] / u[g, e, MAXMANA]
                seen[g, team, j, S_LEVEL] = h[g, e, H_LEVEL]
                seen[g, team, j, S_TIME] = step
                seen[g, team, j, S_EVER] = 1.0
                seen[g, team, j, S_DMG] = u[g, e, DMG]
                seen[g, team, j, S_ITEMS] = h[g, e, H_ITEMS]
                seen[g, team, j, S_STUN] = 1.0 if u[g, e, STUN] > 0 else 0.0


@kernel
def observe_game(
    g: int,
    u: np.ndarray,
    h: np.ndarray,
    seen: np.ndarray,
    gs: np.ndarray,
    vis: np.ndarray,
    obs: np.ndarray,
    slot_unit: np.ndarray,
    mtype: np.ndarray,
    mmove: np.ndarray,
    mtarget: np.ndarray,
    P: np.ndarray,
    AB: np.ndarray,
    widths: np.ndarray,
    n_types: int,
    hps: int,
    sb: int,
) -> None:
    """Write the observations, pointer slots and masks of game `g`'s hero rows."""
    nh = 2 * hps
    n = u.shape[1]
    c0 = nh + 2 * sb
    tpl = int(P[P_TPL])
    S = P[P_MAP]
    ps = P[P_POS_SCALE]
    v2 = widths.shape[0] > 5 and widths[5] == 2
    step = gs[g, G_STEP]
    n_slots = slot_unit.shape[1]
    n_creep_slots = n_slots - 1 - (hps - 1) - hps - 2 * sb
    _visibility(g, u, vis, nh, sb)
    _remember(g, u, h, seen, vis, step, hps)
    w_self, w_ally, w_enemy, w_creep, w_struct = widths[0], widths[1], widths[2], widths[3], widths[4]
    off_ally = w_self
    off_enemy = off_ally + (hps - 1) * w_ally
    off_creep = off_enemy + hps * w_enemy
    off_struct = off_creep + n_creep_slots * w_creep
    s_enemy = hps
    s_creep = 2 * hps
    s_struct = 2 * hps + n_creep_slots
    best_d = np.empty(n_creep_slots)
    best_x = np.empty(n_creep_slots)
    best_y = np.empty(n_creep_slots)
    best_k = np.empty(n_creep_slots, dtype=np.int64)
    vuln = np.zeros(2 * sb, dtype=np.bool_)
    for k in range(2 * sb):
        vuln[k] = u[g, nh + k, ALIVE] > 0 and vulnerable(u, g, nh + k, nh, sb, tpl)
    seen_creeps = np.empty((2, n - c0), dtype=np.int64)
    n_seen = np.zeros(2, dtype=np.int64)
    for team in range(2):
        for k in range(c0, n):
            if vis[g, team, k]:
                seen_creeps[team, n_seen[team]] = k
                n_seen[team] += 1
    tower_alive = np.zeros(2)
    for team in range(2):
        for s in range(sb - 1):
            tower_alive[team] += u[g, nh + team * sb + s, ALIVE]
    for i in range(nh):
        row = g * nh + i
        team = i // hps
        other = 1 - team
        t = int(h[g, i, H_TYPE])
        o = obs[row]
        o[:] = 0.0
        x = u[g, i, X]
        y = u[g, i, Y]
        alive = u[g, i, ALIVE] > 0
        my_dmg = u[g, i, DMG]
        # self and global features
        mx, my = (x, y) if team == 0 else (S - y, S - x)
        o[0] = 1.0 if alive else 0.0
        o[1] = u[g, i, HP] / u[g, i, MAXHP]
        o[2] = u[g, i, MANA] / u[g, i, MAXMANA]
        o[3] = mx / ps
        o[4] = my / ps
        o[5] = h[g, i, H_LEVEL] / P[P_MAX_LEVEL]
        o[6] = h[g, i, H_XP] / (P[P_XP_PER_LEVEL] * h[g, i, H_LEVEL])
        o[7] = h[g, i, H_GOLD] / 1000.0
        o[8] = h[g, i, H_RESPAWN] / 100.0
        o[9] = my_dmg / 100.0
        o[10] = u[g, i, RANGE] / 10.0
        o[11] = 1.0 if u[g, i, ACD] <= 0 else 0.0
        o[12] = u[g, i, SPEED]
        o[13] = 1.0 if u[g, i, STUN] > 0 else 0.0
        o[14] = 1.0 if u[g, i, HASTE] > 0 else 0.0
        for k in range(3):
            o[15 + k] = h[g, i, H_CD0 + k] / AB[t, k, AB_COOLDOWN]
            ready = alive and h[g, i, H_CD0 + k] <= 0 and u[g, i, MANA] >= AB[t, k, AB_COST]
            o[18 + k] = 1.0 if ready else 0.0
        o[21] = h[g, i, H_ITEMS] / P[P_MAX_ITEMS] if P[P_MAX_ITEMS] > 0 else 0.0
        o[22] = step / P[P_TIME_LIMIT]
        o[23] = u[g, nh + team * sb + sb - 1, HP] / u[g, nh + team * sb + sb - 1, MAXHP]
        o[24] = u[g, nh + other * sb + sb - 1, HP] / u[g, nh + other * sb + sb - 1, MAXHP]
        o[25] = tower_alive[team] / (sb - 1)
        o[26] = tower_alive[other] / (sb - 1)
        o[27] = (gs[g, G_NEXTWAVE] - step) / P[P_WAVE_INTERVAL]
        o[28 + t] = 1.0
        if v2:
            o[28 + n_types] = h[g, i, H_CDRECALL] / P[P_RECALL_CD]
            o[29 + n_types] = h[g, i, H_KILLS] / 10.0
            o[30 + n_types] = h[g, i, H_DEATHS] / 10.0
        slot_unit[row, 0] = i
        # allies, in hero order without self
        a = 0
        for j in range(team * hps, team * hps + hps):
            if j == i:
                continue
            b = off_ally + a * w_ally
            slot_unit[row, 1 + a] = j
            dx, dy = team_offset(team, u[g, j, X] - x, u[g, j, Y] - y)
            o[b] = 1.0
            o[b + 1] = u[g, j, ALIVE]
            o[b + 2] = dx / ps
            o[b + 3] = dy / ps
            o[b + 4] = math.sqrt(dx * dx + dy * dy) / ps
            o[b + 5] = u[g, j, HP] / u[g, j, MAXHP]
            o[b + 6] = u[g, j, MANA] / u[g, j, MAXMANA]
            o[b + 7] = h[g, j, H_LEVEL] / P[P_MAX_LEVEL]
            o[b + 8] = h[g, j, H_RESPAWN] / 100.0
            o[b + 9] = 1.0 if u[g, j, STUN] > 0 else 0.0
            o[b + 10 + int(h[g, j, H_TYPE])] = 1.0
            if v2:
                o[b + 10 + n_types] = h[g, j, H_ITEMS] / max(P[P_MAX_ITEMS], 1.0)
            a += 1
        # enemies: slot j is enemy hero j, with last-seen features
        for j in range(hps):
            e = other * hps + j
            slot_unit[row, s_enemy + j] = e
            if seen[g, team, j, S_EVER] == 0:
                continue
            b = off_enemy + j * w_enemy
            dx, dy = team_offset(team, seen[g, team, j, S_X] - x, seen[g, team, j, S_Y] - y)
            o[b] = 1.0
            o[b + 1] = 1.0 if vis[g, team, e] else 0.0
            o[b + 2] = min((step - seen[g, team, j, S_TIME]) / (P[P_SPS] * 30.0), 1.0)
            o[b + 3] = u[g, e, ALIVE]
            o[b + 4] = dx / ps
            o[b + 5] = dy / ps
            o[b + 6] = math.sqrt(dx * dx + dy * dy) / ps
            o[b + 7] = seen[g, team, j, S_HPF]
            o[b + 8] = seen[g, team, j, S_MPF]
            o[b + 9] = seen[g, team, j, S_LEVEL] / P[P_MAX_LEVEL]
            o[b + 10] = seen[g, team, j, S_STUN]
            o[b + 11 + int(h[g, e, H_TYPE])] = 1.0
            if v2:
                o[b + 11 + n_types] = seen[g, team, j, S_DMG] / 100.0
                o[b + 12 + n_types] = seen[g, team, j, S_ITEMS] / max(P[P_MAX_ITEMS], 1.0)
        # The nearest creeps this team sees. Near-equal distances are ordered by the offset as
        # this team sees it, so that both teams order mirrored creeps alike.
        m = 0
        for j in range(n_seen[team]):
            k = seen_creeps[team, j]
            d2 = (u[g, k, X] - x) ** 2 + (u[g, k, Y] - y) ** 2
            rx, ry = team_offset(team, u[g, k, X] - x, u[g, k, Y] - y)
            if m < n_creep_slots:
                pos = m
                m += 1
            elif closer(d2, rx, ry, best_d[m - 1], best_x[m - 1], best_y[m - 1]):
                pos = m - 1
            else:
                continue
            while pos > 0 and closer(d2, rx, ry, best_d[pos - 1], best_x[pos - 1], best_y[pos - 1]):
                best_d[pos] = best_d[pos - 1]
                best_x[pos] = best_x[pos - 1]
                best_y[pos] = best_y[pos - 1]
                best_k[pos] = best_k[pos - 1]
                pos -= 1
            best_d[pos] = d2
            best_x[pos] = rx
            best_y[pos] = ry
            best_k[pos] = k
        for c in range(n_creep_slots):
            slot_unit[row, s_creep + c] = best_k[c] if c < m else -1
            if c >= m:
                continue
            k = best_k[c]
            b = off_creep + c * w_creep
            dx, dy = team_offset(team, u[g, k, X] - x, u[g, k, Y] - y)
            enemy = u[g, k, TEAM] != team
            hpf = u[g, k, HP] / u[g, k, MAXHP]
            o[b] = 1.0
            o[b + 1] = 1.0 if enemy else 0.0
            o[b + 2] = dx / ps
            o[b + 3] = dy / ps
            o[b + 4] = math.sqrt(best_d[c]) / ps
            o[b + 5] = hpf
            o[b + 6] = 1.0 if u[g, k, HP] <= my_dmg else 0.0
            o[b + 7] = 1.0 if (not enemy and hpf < 0.5) else 0.0
        # structures: own side first, then the enemy's; towers lane-major, then the ancient
        for q in range(2 * sb):
            side = team if q < sb else other
            k = nh + side * sb + q % sb
            slot_unit[row, s_struct + q] = k
            if u[g, k, ALIVE] == 0:
                continue
            b = off_struct + q * w_struct
            dx, dy = team_offset(team, u[g, k, X] - x, u[g, k, Y] - y)
            o[b] = 1.0
            o[b + 1] = 1.0 if side != team else 0.0
            o[b + 2] = 1.0 if q % sb == sb - 1 else 0.0
            o[b + 3] = u[g, k, TIER] / tpl
            o[b + 4] = dx / ps
            o[b + 5] = dy / ps
            o[b + 6] = math.sqrt(dx * dx + dy * dy) / ps
            o[b + 7] = u[g, k, HP] / u[g, k, MAXHP]
            o[b + 8] = 1.0 if vuln[k - nh] else 0.0
        _masks(
            g,
            i,
            row,
            u,
            h,
            vis,
            vuln,
            obs,
            slot_unit,
            mtype,
            mmove,
            mtarget,
            AB,
            hps,
            sb,
            n_creep_slots,
            off_creep,
            w_creep,
            v2,
        )


@kernel
def _masks(
    g: int,
    i: int,
    row: int,
    u: np.ndarray,
    h: np.ndarray,
    vis: np.ndarray,
    vuln: np.ndarray,
    obs: np.ndarray,
    slot_unit: np.ndarray,
    mtype: np.ndarray,
    mmove: np.ndarray,
    mtarget: np.ndarray,
    AB: np.ndarray,
    hps: int,
    sb: int,
    n_creep_slots: int,
    off_creep: int,
    w_creep: int,
    v2: bool,
) -> None:
    """Legal types, and legal targets per type. A type that does not use a head allows every
    choice of it; an illegal type that uses the target head allows only slot 0, so that every
    mask row has a legal choice."""
    team = i // hps
    n_types = mtype.shape[1]
    mtype[row, :] = False
    mmove[row, :, :] = True
    mtarget[row, :, :] = False
    mtype[row, A_NOOP] = True
    s_enemy = hps
    s_creep = 2 * hps
    s_struct = 2 * hps + n_creep_slots
    if u[g, i, ALIVE] > 0 and u[g, i, STUN] <= 0:
        mtype[row, A_MOVE] = True
        t = int(h[g, i, H_TYPE])
        for j in range(hps):
            e = slot_unit[row, s_enemy + j]
            if u[g, e, ALIVE] > 0 and vis[g, team, e]:
                mtarget[row, A_ATTACK, s_enemy + j] = True
        for c in range(n_creep_slots):
            k = slot_unit[row, s_creep + c]
            if k < 0:
                continue
            if u[g, k, TEAM] != team or obs[row, off_creep + c * w_creep + 7] > 0:
                mtarget[row, A_ATTACK, s_creep + c] = True
        # An enemy structure is a target once it is within the hero's vision, not from across the map.
        sight2 = u[g, i, VISION] ** 2
        for q in range(sb, 2 * sb):
            k = slot_unit[row, s_struct + q]
            if vuln[k - 2 * hps] and (u[g, k, X] - u[g, i, X]) ** 2 + (u[g, k, Y] - u[g, i, Y]) ** 2 <= sight2:
                mtarget[row, A_ATTACK, s_struct + q] = True
        for a in range(3):
            if h[g, i, H_CD0 + a] > 0 or u[g, i, MANA] < AB[t, a, AB_COST]:
                continue
            kind = int(AB[t, a, AB_KIND])
            col = A_ABILITY0 + a
            if kind == AK_NUKE or kind == AK_AREA:
                for j in range(hps):
                    mtarget[row, col, s_enemy + j] = mtarget[row, A_ATTACK, s_enemy + j]
                if kind == AK_NUKE:
                    for c in range(n_creep_slots):
                        k = slot_unit[row, s_creep + c]
                        if k >= 0 and u[g, k, TEAM] != team:
                            mtarget[row, col, s_creep + c] = True
            elif kind == AK_HEAL:
                mtarget[row, col, 0] = True
                for j in range(1, hps):
                    mtarget[row, col, j] = u[g, slot_unit[row, j], ALIVE] > 0
            elif kind == AK_HASTE:
                mtarget[row, col, 0] = True
        for a in range(A_ATTACK, A_ABILITY0 + 3):
            for s in range(mtarget.shape[2]):
                if mtarget[row, a, s]:
                    mtype[row, a] = True
                    break
        if v2 and n_types > A_RECALL and h[g, i, H_CDRECALL] <= 0:
            mtype[row, A_RECALL] = True
    for a in range(n_types):
        if a == A_ATTACK or A_ABILITY0 <= a < A_ABILITY0 + 3:
            if not mtype[row, a]:
                mtarget[row, a, 0] = True
        else:
            mtarget[row, a, :] = True


@kernel(parallel=True)
def observe_all(
    u: np.ndarray,
    h: np.ndarray,
    seen: np.ndarray,
    gs: np.ndarray,
    vis: np.ndarray,
    obs: np.ndarray,
    slot_unit: np.ndarray,
    mtype: np.ndarray,
    mmove: np.ndarray,
    mtarget: np.ndarray,
    P: np.ndarray,
    AB: np.ndarray,
    widths: np.ndarray,
    n_types: int,
    hps: int,
    sb: int,
) -> None:
    """Observe every game of the batch, in parallel over games."""
    for g in prange(u.shape[0]):
        observe_game(g, u, h, seen, gs, vis, obs, slot_unit, mtype, mmove, mtarget, P, AB, widths, n_types, hps, sb)


@kernel
def observe_serial(
    u: np.ndarray,
    h: np.ndarray,
    seen: np.ndarray,
    gs: np.ndarray,
    vis: np.ndarray,
    obs: np.ndarray,
    slot_unit: np.ndarray,
    mtype: np.ndarray,
    mmove: np.ndarray,
    mtarget: np.ndarray,
    P: np.ndarray,
    AB: np.ndarray,
    widths: np.ndarray,
    n_types: int,
    hps: int,
    sb: int,
) -> None:
    """Observe every game of the batch on this thread."""
    for g in range(u.shape[0]):
        observe_game(g, u, h, seen, gs, vis, obs, slot_unit, mtype, mmove, mtarget, P, AB, widths, n_types, hps, sb)
