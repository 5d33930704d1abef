"""Vectorised bots: `RandomBot` (uniform over legal actions) and `ScriptedBot` (a lane pusher) for the lane game,
`UniformBot` (uniform over legal actions) for any environment's layout.

A bot maps the observations and masks of some rows to actions: `bot.act(obs, masks)`. The
rows must come as whole teams (heroes_per_side consecutive rows each, in hero order), as
LaneGame lays them out; the scripted bot assigns hero j of a team to lane j mod lanes.
"""

from __future__ import annotations

import math

import numpy as np

from five_actors.game.config import GameConfig
from five_actors.game.jit import kernel
from five_actors.game.layout import ActionSpec, encode_continuous
from five_actors.game.spec import obs_spec
from five_actors.game.state import (
    A_ABILITY0,
    A_ATTACK,
    A_MOVE,
    A_NOOP,
    AB_KIND,
    AK_HASTE,
    AK_HEAL,
    DIRECTIONS,
    FOUNTAIN_AT,
    hero_tables,
)


@kernel
def _seed(seed: int) -> None:
    np.random.seed(seed)


@kernel
def _pick(mask: np.ndarray) -> int:
    """A uniformly random True index of `mask` (0 when none)."""
    count = 0
    for j in range(mask.shape[0]):
        if mask[j]:
            count += 1
    if count == 0:
        return 0
    r = np.random.randint(count)
    for j in range(mask.shape[0]):
        if mask[j]:
            if r == 0:
                return j
            r -= 1
    return 0


@kernel
def _random_actions(mtype: np.ndarray, mmove: np.ndarray, mtarget: np.ndarray, out: np.ndarray) -> None:
    for r in range(mtype.shape[0]):
        t = _pick(mtype[r])
        out[r, 0] = t
        out[r, 1] = _pick(mmove[r, t])
        out[r, 2] = _pick(mtarget[r, t])


class RandomBot:
    """Uniformly random legal actions: a type among the legal ones, then legal head choices."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def act(self, obs: np.ndarray, masks: dict[str, np.ndarray]) -> np.ndarray:
        """Actions `[rows, 3]` for the rows of `obs` and `masks`."""
        out = np.zeros((masks["type"].shape[0], 3), dtype=np.int64)
        _seed(int(self._rng.integers(0, 2**31 - 1)))
        _random_actions(masks["type"], masks["move"], masks["target"], out)
        return out


class UniformBot:
    """Any layout's legal actions, uniformly: a type among the legal ones, then a legal choice of every head for it,
    and real values (a Gaussian head's) from a standard normal. The random reference of an external environment."""

    def __init__(self, actions: ActionSpec, seed: int = 0) -> None:
        self.actions = actions
        self._rng = np.random.default_rng(seed)

    def act(self, obs: np.ndarray, masks: dict[str, np.ndarray]) -> np.ndarray:
        """Action columns `[rows, actions.columns]` for the rows of `masks`."""
        rows = masks["type"].shape[0]
        types = self._pick(masks["type"])
        heads = [self._pick(masks[h.name][np.arange(rows), types]) for h in self.actions.heads]
        real = encode_continuous(self._rng.standard_normal((rows, self.actions.continuous)))
        return np.concatenate([np.stack([types, *heads], axis=1), real], axis=1)

    def _pick(self, mask: np.ndarray) -> np.ndarray:
        """A uniformly random True index of each row of `mask` (0 where none is)."""
        return np.argmax(np.where(mask, self._rng.random(mask.shape), -1.0), axis=1)


# Indices into ScriptedBot's `layout` array: block offsets, widths and feature positions.
(
    L_SELF_ALIVE,
    L_SELF_HP,
    L_SELF_X,
    L_SELF_Y,
    L_SELF_RANGE,
    L_SELF_TYPE,
    L_ALLY_OFF,
    L_ALLY_W,
    L_ALLY_HP,
    L_ENEMY_OFF,
    L_ENEMY_W,
    L_ENEMY_VIS,
    L_ENEMY_DX,
    L_ENEMY_DY,
    L_ENEMY_DIST,
    L_ENEMY_HP,
    L_CREEP_OFF,
    L_CREEP_W,
    L_CREEP_ENEMY,
    L_CREEP_DX,
    L_CREEP_DY,
    L_CREEP_DIST,
    L_CREEP_HP,
    L_CREEP_LASTHIT,
    L_STRUCT_OFF,
    L_STRUCT_W,
    L_STRUCT_ENEMY,
    L_STRUCT_ANCIENT,
    L_STRUCT_DX,
    L_STRUCT_DY,
    L_STRUCT_DIST,
    L_ALLIES,
    L_ENEMIES,
    L_CREEPS,
    L_STRUCTS,
    L_TPL,
    L_LANES,
    L_HPS,
) = range(38)


@kernel
def _direction(dx: float, dy: float) -> int:
    return int(round(math.atan2(dy, dx) / (math.pi / 4.0))) % DIRECTIONS


@kernel
def _scripted_actions(
    obs: np.ndarray,
    mtype: np.ndarray,
    mtarget: np.ndarray,
    L: np.ndarray,
    AB: np.ndarray,
    fountain: float,
    tower_reach: float,
    unit: float,
    out: np.ndarray,
) -> None:
    """The scripted lane bot, one row at a time; distances are in observation units (`unit` per map unit)."""
    n_allies, n_enemies, n_creeps, n_structs = L[L_ALLIES], L[L_ENEMIES], L[L_CREEPS], L[L_STRUCTS]
    s_enemy = 1 + n_allies
    s_creep = s_enemy + n_enemies
    s_struct = s_creep + n_creeps
    sb = n_structs // 2
    for r in range(obs.shape[0]):
        o = obs[r]
        out[r, 0] = A_NOOP
        out[r, 1] = 0
        out[r, 2] = 0
        if o[L[L_SELF_ALIVE]] == 0 or not mtype[r, A_MOVE]:
            continue
        hp = o[L[L_SELF_HP]]
        x = o[L[L_SELF_X]]
        y = o[L[L_SELF_Y]]
        t = 0
        for k in range(AB.shape[0]):
            if o[L[L_SELF_TYPE] + k] > 0:
                t = k
        fdx = fountain - x
        fdy = fountain - y
        fdist = math.sqrt(fdx * fdx + fdy * fdy)
        retreat = hp < 0.3 or (fdist < 0.2 and hp < 0.9)
        enemy_near = 1e9
        weakest = -1
        weakest_hp = 2.0
        for j in range(n_enemies):
            b = L[L_ENEMY_OFF] + j * L[L_ENEMY_W]
            if mtarget[r, A_ATTACK, s_enemy + j]:
                enemy_near = min(enemy_near, o[b + L[L_ENEMY_DIST]])
                if o[b + L[L_ENEMY_DIST]] < 0.24 and o[b + L[L_ENEMY_HP]] < weakest_hp:
                    weakest_hp = o[b + L[L_ENEMY_HP]]
                    weakest = s_enemy + j
        # Cast whatever is ready: heals on the most hurt ally, haste when enemies are near or
        # when running, damage on the weakest enemy hero in reach.
        cast = -1
        for a in range(3):
            col = A_ABILITY0 + a
            if not mtype[r, col]:
                continue
            kind = int(AB[t, a, AB_KIND])
            if kind == AK_HEAL:
                best, best_hp = -1, 0.6
                if hp < best_hp:
                    best, best_hp = 0, hp
                for j in range(n_allies):
                    ahp = o[L[L_ALLY_OFF] + j * L[L_ALLY_W] + L[L_ALLY_HP]]
                    if mtarget[r, col, 1 + j] and ahp < best_hp:
                        best, best_hp = 1 + j, ahp
                if best >= 0:
                    out[r, 0] = col
                    out[r, 2] = best
                    cast = col
                    break
            elif kind == AK_HASTE:
                if retreat or enemy_near < 0.3:
                    out[r, 0] = col
                    cast = col
                    break
            elif weakest >= 0 and mtarget[r, col, weakest] and not retreat:
                out[r, 0] = col
                out[r, 2] = weakest
                cast = col
                break
        if cast >= 0:
            continue
        if retreat:
            if fdist > 0.12:
                out[r, 0] = A_MOVE
                out[r, 1] = _direction(fdx, fdy)
            continue
        # Last hits and denies first.
        target = -1
        low = 2.0
        for c in range(n_creeps):
            b = L[L_CREEP_OFF] + c * L[L_CREEP_W]
            if mtarget[r, A_ATTACK, s_creep + c] and o[b + L[L_CREEP_LASTHIT]] > 0 and o[b + L[L_CREEP_DIST]] < 0.3:
                # Deny only with an enemy hero near: our own creeps push the lane.
                if o[b + L[L_CREEP_ENEMY]] == 0 and enemy_near > 0.3:
                    continue
                if o[b + L[L_CREEP_HP]] < low:
                    low = o[b + L[L_CREEP_HP]]
                    target = s_creep + c
        if target < 0:
            reach = (o[L[L_SELF_RANGE]] * 10.0 + 3.0) * unit
            for j in range(n_enemies):
                b = L[L_ENEMY_OFF] + j * L[L_ENEMY_W]
                ehp = o[b + L[L_ENEMY_HP]]
                weak = ehp < 0.4 or ehp < hp - 0.2
                if mtarget[r, A_ATTACK, s_enemy + j] and o[b + L[L_ENEMY_DIST]] < reach and weak and ehp < low:
                    low = ehp
                    target = s_enemy + j
        if target >= 0:
            out[r, 0] = A_ATTACK
            out[r, 2] = target
            continue
        # Respect enemy towers: hit them only while allied creeps are in their range.
        danger = -1
        danger_d = tower_reach + 0.03
        for q in range(sb, n_structs):
            b = L[L_STRUCT_OFF] + q * L[L_STRUCT_W]
            if o[b] > 0 and o[b + L[L_STRUCT_ANCIENT]] == 0 and o[b + L[L_STRUCT_DIST]] < danger_d:
                danger_d = o[b + L[L_STRUCT_DIST]]
                danger = q
        if danger >= 0:
            b = L[L_STRUCT_OFF] + danger * L[L_STRUCT_W]
            tx, ty = o[b + L[L_STRUCT_DX]], o[b + L[L_STRUCT_DY]]
            tanked = False
            for c in range(n_creeps):
                cb = L[L_CREEP_OFF] + c * L[L_CREEP_W]
                if o[cb] > 0 and o[cb + L[L_CREEP_ENEMY]] == 0:
                    if (o[cb + L[L_CREEP_DX]] - tx) ** 2 + (o[cb + L[L_CREEP_DY]] - ty) ** 2 < tower_reach**2:
                        tanked = True
            if tanked and mtarget[r, A_ATTACK, s_struct + danger]:
                out[r, 0] = A_ATTACK
                out[r, 2] = s_struct + danger
                continue
            if not tanked:
                out[r, 0] = A_MOVE
                out[r, 1] = _direction(-tx, -ty)
                continue
        # Push: a vulnerable ancient in reach, else the nearest enemy creep, else enemy heroes.
        ancient = s_struct + n_structs - 1
        ab = L[L_STRUCT_OFF] + (n_structs - 1) * L[L_STRUCT_W]
        if mtarget[r, A_ATTACK, ancient] and o[ab + L[L_STRUCT_DIST]] < 0.6:
            out[r, 0] = A_ATTACK
            out[r, 2] = ancient
            continue
        near = 0.3
        for c in range(n_creeps):
            b = L[L_CREEP_OFF] + c * L[L_CREEP_W]
            if mtarget[r, A_ATTACK, s_creep + c] and o[b + L[L_CREEP_ENEMY]] > 0 and o[b + L[L_CREEP_DIST]] < near:
                near = o[b + L[L_CREEP_DIST]]
                target = s_creep + c
        if target < 0 and weakest >= 0:
            target = weakest
        if target >= 0:
            out[r, 0] = A_ATTACK
            out[r, 2] = target
            continue
        # Walk the lane toward its outermost standing enemy tower, else the enemy ancient.
        lane = (r % L[L_HPS]) % L[L_LANES]
        goal = n_structs - 1
        for tier in range(L[L_TPL]):
            q = sb + lane * L[L_TPL] + tier
            if o[L[L_STRUCT_OFF] + q * L[L_STRUCT_W]] > 0:
                goal = q
                break
        b = L[L_STRUCT_OFF] + goal * L[L_STRUCT_W]
        out[r, 0] = A_MOVE
        out[r, 1] = _direction(o[b + L[L_STRUCT_DX]], o[b + L[L_STRUCT_DY]])


class ScriptedBot:
    """A scripted lane bot reading only observations and masks: it walks its lane, last-hits and
    denies, finishes low-health heroes, retreats to the fountain when hurt, stays out of tower
    range unless allied creeps tank, and casts abilities when ready."""

    def __init__(self, config: GameConfig | None = None) -> None:
        cfg = config or GameConfig()
        spec = obs_spec(cfg.version, cfg)
        blocks = {b.name: b for b in spec.blocks}

        def feat(block: str, name: str) -> int:
            return blocks[block].features.index(name)

        layout = [
            feat("self", "alive"),
            feat("self", "hp_frac"),
            feat("self", "x"),
            feat("self", "y"),
            feat("self", "attack_range"),
            feat("self", f"type_{cfg.hero_types[0]}"),
            spec.offset("allies"),
            blocks["allies"].width,
            feat("allies", "hp_frac"),
            spec.offset("enemies"),
            blocks["enemies"].width,
            feat("enemies", "visible"),
            feat("enemies", "dx"),
            feat("enemies", "dy"),
            feat("enemies", "dist"),
            feat("enemies", "hp_frac"),
            spec.offset("creeps"),
            blocks["creeps"].width,
            feat("creeps", "enemy"),
            feat("creeps", "dx"),
            feat("creeps", "dy"),
            feat("creeps", "dist"),
            feat("creeps", "hp_frac"),
            feat("creeps", "last_hittable"),
            spec.offset("structures"),
            blocks["structures"].width,
            feat("structures", "enemy"),
            feat("structures", "ancient"),
            feat("structures", "dx"),
            feat("structures", "dy"),
            feat("structures", "dist"),
            blocks["allies"].slots,
            blocks["enemies"].slots,
            blocks["creeps"].slots,
            blocks["structures"].slots,
            cfg.towers_per_lane,
            cfg.lanes,
            cfg.heroes_per_side,
        ]
        self._layout = np.array(layout, dtype=np.int64)
        self._abilities = hero_tables(cfg)[1]
        scale = cfg.map_size / 2.0
        self._fountain = FOUNTAIN_AT * cfg.map_size / scale
        self._tower_reach = (cfg.tower_range + 1.5) / scale
        self._unit = 1.0 / scale

    def act(self, obs: np.ndarray, masks: dict[str, np.ndarray]) -> np.ndarray:
        """Actions `[rows, 3]` for whole teams of rows (see the module docstring)."""
        out = np.zeros((obs.shape[0], 3), dtype=np.int64)
        _scripted_actions(
            obs,
            masks["type"],
            masks["target"],
            self._layout,
            self._abilities,
            self._fountain,
            self._tower_reach,
            self._unit,
            out,
        )
        return out
