"""The lane game's state arrays, their column layout, the hero table and the map geometry.

Everything the numba kernels read is a numpy array: unit columns and parameters are module
constants (numba freezes them at compile time), and a config becomes one float64 parameter
vector so that one compiled kernel serves every config.

Units of one game, in index order: heroes (team 0 then team 1), structures (team 0's towers
lane-major with tier 0 the outermost, then its ancient; then team 1's), then creep slots.
Positions are map units with team 0's corner at (0, 0); team 1's view is the reflection
(x, y) -> (S - y, S - x), which maps every lane onto itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from five_actors.game.config import HERO_TYPE_NAMES, GameConfig

# Unit columns (float32 [games, units, UNIT_COLUMNS]).
(
    X,
    Y,
    HP,
    MAXHP,
    MANA,
    MAXMANA,
    TEAM,
    KIND,
    ALIVE,
    DMG,
    RANGE,
    PERIOD,
    ACD,
    SPEED,
    STUN,
    HASTE,
    LANE,
    WP,
    TGT,
    VISION,
    HITHERO,
    TIER,
    PREVHPF,
) = range(23)
UNIT_COLUMNS = 23
KIND_HERO, KIND_CREEP, KIND_TOWER, KIND_ANCIENT = 0, 1, 2, 3

# Hero columns (float32 [games, heroes, HERO_COLUMNS]); CD0..CD0+2 are the ability cooldowns.
(
    H_TYPE,
    H_LEVEL,
    H_XP,
    H_GOLD,
    H_SPENT,
    H_ITEMS,
    H_RESPAWN,
    H_CD0,
    H_CD1,
    H_CD2,
    H_CDRECALL,
    H_PREVHPF,
    H_PREVMPF,
    H_KILLS,
    H_DEATHS,
    H_LASTHITS,
    H_DENIES,
    H_HPREGEN,
    H_MPREGEN,
) = range(19)
HERO_COLUMNS = 19

# Last-seen enemy hero features (float32 [games, observer team, heroes_per_side, SEEN_COLUMNS]).
S_X, S_Y, S_HPF, S_MPF, S_LEVEL, S_TIME, S_EVER, S_DMG, S_ITEMS, S_STUN = range(10)
SEEN_COLUMNS = 10

# Per-step scratch per unit (float32 [games, units, SCRATCH_COLUMNS]): damage taken, the hero
# that hit hardest and how hard, the new position, heal, stun and haste received.
SC_DMG, SC_BEST, SC_BESTDMG, NX_SCRATCH, NY_SCRATCH, SC_HEAL, SC_STUN, SC_HASTE = range(8)
SCRATCH_COLUMNS = 8

# Per-game scalars (float64 [games, GAME_COLUMNS]).
G_STEP, G_NEXTWAVE, G_WINNER, G_DONE = range(4)
GAME_COLUMNS = 4

# Reward components, in the order of REWARD_NAMES.
REWARD_NAMES = (
    "win",
    "hero_death",
    "xp",
    "gold",
    "health",
    "mana",
    "kill",
    "last_hit",
    "deny",
    "tower",
    "ancient",
    "gold_spent",
    "lane",
)
(C_WIN, C_DEATH, C_XP, C_GOLD, C_HEALTH, C_MANA, C_KILL, C_LASTHIT, C_DENY, C_TOWER, C_ANCIENT, C_SPENT, C_LANE) = (
    range(13)
)
REWARD_COMPONENTS = 13

# Events (float32 [games, MAX_EVENTS, EVENT_COLUMNS]): kind, x, y, a, b.
EVENT_KINDS = ("kill", "last_hit", "deny", "tower_destroyed", "ancient_destroyed", "ability", "recall")
EV_KILL, EV_LASTHIT, EV_DENY, EV_TOWER, EV_ANCIENT, EV_ABILITY, EV_RECALL = range(7)
MAX_EVENTS = 48
EVENT_COLUMNS = 5

# Action types (v2 appends RECALL) and the move head's 8 directions (45 degrees apart, 0 = +x).
A_NOOP, A_MOVE, A_ATTACK, A_ABILITY0, A_ABILITY1, A_ABILITY2, A_RECALL = range(7)
DIRECTIONS = 8

# Hero type table columns.
(
    HT_HP,
    HT_MANA,
    HT_DMG,
    HT_RANGE,
    HT_PERIOD,
    HT_SPEED,
    HT_HP_GAIN,
    HT_DMG_GAIN,
    HT_MANA_GAIN,
    HT_HP_REGEN,
    HT_MP_REGEN,
) = range(11)
# Ability table columns and kinds: a nuke hits one enemy unit; an area hits and stuns enemies
# around an enemy hero; a heal targets an allied hero (or self); haste speeds the caster up.
AB_KIND, AB_VALUE, AB_RANGE, AB_RADIUS, AB_DURATION, AB_COST, AB_COOLDOWN = range(7)
AK_NUKE, AK_AREA, AK_HEAL, AK_HASTE = range(4)
HASTE_FACTOR = 1.5

_NUKE, _AREA, _HEAL, _HASTE = float(AK_NUKE), float(AK_AREA), float(AK_HEAL), float(AK_HASTE)
HERO_TABLE: dict[str, tuple[tuple[float, ...], tuple[tuple[float, ...], ...]]] = {
    # name: (hp, mana, damage, range, attack period, speed, hp/dmg/mana per level, hp/mana regen),
    #       3 abilities (kind, value, cast range, radius, duration, mana cost, cooldown)
    "knight": (
        (650, 250, 42, 2.0, 7, 0.95, 60, 3.0, 20, 0.5, 0.3),
        ((_AREA, 70, 5, 4, 12, 90, 90), (_NUKE, 110, 6, 0, 0, 70, 60), (_HASTE, 0, 0, 0, 30, 50, 100)),
    ),
    "ranger": (
        (520, 260, 48, 7.0, 7, 1.0, 45, 4.0, 20, 0.35, 0.4),
        ((_NUKE, 130, 9, 0, 0, 80, 55), (_HASTE, 0, 0, 0, 25, 40, 90), (_AREA, 50, 8, 3, 8, 100, 110)),
    ),
    "mage": (
        (470, 420, 34, 6.5, 8, 0.95, 40, 2.5, 35, 0.3, 0.8),
        ((_NUKE, 200, 8, 0, 0, 120, 70), (_AREA, 100, 8, 5, 6, 130, 100), (_NUKE, 90, 7, 0, 0, 60, 35)),
    ),
    "priest": (
        (500, 400, 30, 6.0, 8, 0.95, 45, 2.5, 30, 0.35, 0.8),
        ((_HEAL, 180, 8, 0, 0, 100, 60), (_AREA, 60, 7, 4, 14, 110, 100), (_HEAL, 90, 8, 0, 0, 50, 30)),
    ),
    "brute": (
        (780, 200, 52, 1.8, 7, 0.95, 70, 3.5, 15, 0.6, 0.25),
        ((_HASTE, 0, 0, 0, 35, 40, 80), (_NUKE, 120, 3, 0, 0, 80, 50), (_AREA, 80, 3, 5, 10, 100, 100)),
    ),
}
assert tuple(HERO_TABLE) == HERO_TYPE_NAMES

# The kernels' parameter vector: one float64 per name (a GameConfig field or a derived value).
PARAM_NAMES = (
    "map_size",
    "time_limit_steps",
    "towers_per_lane",
    "tower_hp",
    "tower_damage",
    "tower_range",
    "ancient_hp",
    "creep_wave_interval",
    "creeps_per_wave",
    "creep_hp",
    "creep_damage",
    "creep_speed",
    "hero_speed",
    "creep_gold",
    "creep_xp",
    "deny_xp_fraction",
    "hero_kill_gold",
    "hero_kill_xp",
    "tower_gold",
    "passive_gold_per_step",
    "start_gold",
    "xp_radius",
    "xp_per_level",
    "max_level",
    "respawn_base_steps",
    "respawn_per_level_steps",
    "item_cost",
    "max_items",
    "hero_vision",
    "creep_vision",
    "tower_vision",
    "fountain_regen",
    "recall_cooldown",
    "reward_win",
    "reward_hero_death",
    "reward_xp",
    "reward_gold",
    "reward_health",
    "reward_mana",
    "reward_kill",
    "reward_last_hit",
    "reward_deny",
    "reward_ancient",
    "reward_gold_spent",
    "team_spirit",
    "steps_per_second",
    "version",
    "lanes",
    "heroes_per_side",
    "creep_slots",
    "decay_per_step",
    "pos_scale",
    "reward_lane",
    "lane_width",
)


def param_index(name: str) -> int:
    """Where parameter `name` sits in the kernels' vector. Every P_ index below is looked up by
    its name, so a reordered PARAM_NAMES cannot make a kernel read another parameter."""
    return PARAM_NAMES.index(name)


P_MAP = param_index("map_size")
P_TIME_LIMIT = param_index("time_limit_steps")
P_TPL = param_index("towers_per_lane")
P_TOWER_HP = param_index("tower_hp")
P_TOWER_DMG = param_index("tower_damage")
P_TOWER_RANGE = param_index("tower_range")
P_ANCIENT_HP = param_index("ancient_hp")
P_WAVE_INTERVAL = param_index("creep_wave_interval")
P_CREEPS_PER_WAVE = param_index("creeps_per_wave")
P_CREEP_HP = param_index("creep_hp")
P_CREEP_DMG = param_index("creep_damage")
P_CREEP_SPEED = param_index("creep_speed")
P_HERO_SPEED = param_index("hero_speed")
P_CREEP_GOLD = param_index("creep_gold")
P_CREEP_XP = param_index("creep_xp")
P_DENY_XP = param_index("deny_xp_fraction")
P_KILL_GOLD = param_index("hero_kill_gold")
P_KILL_XP = param_index("hero_kill_xp")
P_TOWER_GOLD = param_index("tower_gold")
P_PASSIVE_GOLD = param_index("passive_gold_per_step")
P_START_GOLD = param_index("start_gold")
P_XP_RADIUS = param_index("xp_radius")
P_XP_PER_LEVEL = param_index("xp_per_level")
P_MAX_LEVEL = param_index("max_level")
P_RESPAWN_BASE = param_index("respawn_base_steps")
P_RESPAWN_PER_LEVEL = param_index("respawn_per_level_steps")
P_ITEM_COST = param_index("item_cost")
P_MAX_ITEMS = param_index("max_items")
P_HERO_VISION = param_index("hero_vision")
P_CREEP_VISION = param_index("creep_vision")
P_TOWER_VISION = param_index("tower_vision")
P_FOUNTAIN_REGEN = param_index("fountain_regen")
P_RECALL_CD = param_index("recall_cooldown")
P_R_WIN = param_index("reward_win")
P_R_DEATH = param_index("reward_hero_death")
P_R_XP = param_index("reward_xp")
P_R_GOLD = param_index("reward_gold")
P_R_HEALTH = param_index("reward_health")
P_R_MANA = param_index("reward_mana")
P_R_KILL = param_index("reward_kill")
P_R_LASTHIT = param_index("reward_last_hit")
P_R_DENY = param_index("reward_deny")
P_R_ANCIENT = param_index("reward_ancient")
P_R_SPENT = param_index("reward_gold_spent")
P_TEAM_SPIRIT = param_index("team_spirit")
P_SPS = param_index("steps_per_second")
P_VERSION = param_index("version")
P_LANES = param_index("lanes")
P_HPS = param_index("heroes_per_side")
P_CREEP_SLOTS = param_index("creep_slots")
P_DECAY_PER_STEP = param_index("decay_per_step")
P_POS_SCALE = param_index("pos_scale")
P_R_LANE = param_index("reward_lane")
P_LANE_WIDTH = param_index("lane_width")

# Lane waypoints for team 0 as fractions of the map side: mid, top, bottom.
LANE_SHAPES = (
    ((0.1, 0.1), (0.5, 0.5), (0.9, 0.9)),
    ((0.1, 0.1), (0.1, 0.9), (0.9, 0.9)),
    ((0.1, 0.1), (0.9, 0.1), (0.9, 0.9)),
)
ANCIENT_AT = 0.08
FOUNTAIN_AT = 0.03
FOUNTAIN_RADIUS = 10.0


def reflect(points: np.ndarray, map_size: float) -> np.ndarray:
    """Team 1's view of `[..., 2]` positions (and the inverse): (x, y) -> (S - y, S - x)."""
    out = np.empty_like(points)
    out[..., 0] = map_size - points[..., 1]
    out[..., 1] = map_size - points[..., 0]
    return out


def pack_params(cfg: GameConfig) -> np.ndarray:
    """The kernels' float64 parameter vector for `cfg`."""
    values = {name: getattr(cfg, name) for name in PARAM_NAMES if hasattr(cfg, name)}
    minutes_per_step = 1.0 / (cfg.steps_per_second * 60.0)
    values["decay_per_step"] = minutes_per_step * np.log(cfg.time_decay) / cfg.time_decay_minutes
    values["pos_scale"] = cfg.map_size / 2.0
    values["team_spirit"] = cfg.team_spirit_at(0)
    return np.array([float(values[name]) for name in PARAM_NAMES], dtype=np.float64)


def hero_tables(cfg: GameConfig) -> tuple[np.ndarray, np.ndarray]:
    """The stats `[types, 11]` and abilities `[types, 3, 7]` of the hero types in play, in config order."""
    stats = np.array([HERO_TABLE[name][0] for name in cfg.hero_types], dtype=np.float64)
    stats[:, HT_SPEED] *= cfg.hero_speed
    abilities = np.array([HERO_TABLE[name][1] for name in cfg.hero_types], dtype=np.float64)
    return stats, abilities


def lane_waypoints(cfg: GameConfig) -> np.ndarray:
    """Waypoints `[team, lane, 3, 2]` in walking order for each team's creeps."""
    pts = np.array(LANE_SHAPES[: cfg.lanes], dtype=np.float64) * cfg.map_size
    return np.stack([pts, reflect(pts, cfg.map_size)])


def structure_positions(cfg: GameConfig) -> np.ndarray:
    """Positions `[team, structures_per_side, 2]`: towers lane-major (tier 0 outermost), then the ancient."""
    pts = lane_waypoints(cfg)[0]
    out = np.zeros((2, cfg.structures_per_side, 2), dtype=np.float64)
    for lane in range(cfg.lanes):
        seg = np.diff(pts[lane], axis=0)
        seg_len = np.linalg.norm(seg, axis=1)
        total = seg_len.sum()
        for tier in range(cfg.towers_per_lane):
            along = total * (0.42 - 0.3 * tier / cfg.towers_per_lane)
            first = along <= seg_len[0]
            start, d, length = (pts[lane][0], seg[0], seg_len[0]) if first else (pts[lane][1], seg[1], seg_len[1])
            offset = along if first else along - seg_len[0]
            out[0, lane * cfg.towers_per_lane + tier] = start + d / length * offset
    out[0, -1] = (ANCIENT_AT * cfg.map_size, ANCIENT_AT * cfg.map_size)
    out[1] = reflect(out[0], cfg.map_size)
    return out


def fountains(cfg: GameConfig) -> np.ndarray:
    """Each team's fountain (respawn point) `[team, 2]`."""
    own = np.array([[FOUNTAIN_AT * cfg.map_size] * 2])
    return np.concatenate([own, reflect(own, cfg.map_size)])


@dataclass
class GameState:
    """All arrays of a batch of games (see the module docstring for the unit order)."""

    units: np.ndarray
    heroes: np.ndarray
    seen: np.ndarray
    game: np.ndarray
    events: np.ndarray
    event_count: np.ndarray

    @classmethod
    def allocate(cls, cfg: GameConfig) -> GameState:
        """Zeroed state for `cfg.games_per_batch` games."""
        n, hps = cfg.games_per_batch, cfg.heroes_per_side
        units = cfg.heroes_per_game + 2 * cfg.structures_per_side + cfg.max_creeps
        return cls(
            units=np.zeros((n, units, UNIT_COLUMNS), dtype=np.float32),
            heroes=np.zeros((n, 2 * hps, HERO_COLUMNS), dtype=np.float32),
            seen=np.zeros((n, 2, hps, SEEN_COLUMNS), dtype=np.float32),
            game=np.zeros((n, GAME_COLUMNS), dtype=np.float64),
            events=np.zeros((n, MAX_EVENTS, EVENT_COLUMNS), dtype=np.float32),
            event_count=np.zeros(n, dtype=np.int32),
        )

    @property
    def nbytes(self) -> int:
        """Bytes held by the state arrays."""
        return sum(a.nbytes for a in (self.units, self.heroes, self.seen, self.game, self.events, self.event_count))
