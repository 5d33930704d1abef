"""The lane game's observation and action layouts, per game version.

A hero's observation is seen from its own team's corner (team 1's positions are reflected),
so one policy plays either side. Version 2 only appends features to the end of blocks and one
action type to the end of the type list, so a v1 model can be carried to v2 by surgery.
Positions are map coordinates / (map_size / 2); offsets dx, dy, dist are relative to the hero.

Slots: `allies` are the other heroes of the team in hero order (always present, dead or not);
`enemies` slot j is enemy hero j, present once seen in this game, with its last-seen features
(`visible` says whether it is in sight now, `since_seen` how long ago it was, in 30 s units up
to 1); `creeps` are the nearest creeps the team sees, nearest first; `structures` are the own
towers (lane-major, tier 0 outermost) and ancient, then the enemy's, present while standing.
The `target` pointer head indexes self, allies, enemies, creeps, structures in that order.
"""

from __future__ import annotations

from dataclasses import replace

from five_actors.errors import GameError
from five_actors.game.config import GameConfig
from five_actors.game.layout import ActionHead, ActionSpec, EntityBlock, ObsSpec
from five_actors.game.state import DIRECTIONS

SELF_V1 = (
    "alive",
    "hp_frac",
    "mana_frac",
    "x",
    "y",
    "level",
    "xp_frac",
    "gold",
    "respawn",
    "attack_damage",
    "attack_range",
    "attack_ready",
    "speed",
    "stunned",
    "hasted",
    "cd_0",
    "cd_1",
    "cd_2",
    "ready_0",
    "ready_1",
    "ready_2",
    "items",
    "time",
    "own_ancient",
    "enemy_ancient",
    "own_towers",
    "enemy_towers",
    "next_wave",
)
SELF_V2 = ("recall_cd", "kills", "deaths")
ALLY_V1 = ("present", "alive", "dx", "dy", "dist", "hp_frac", "mana_frac", "level", "respawn", "stunned")
ALLY_V2 = ("items",)
ENEMY_V1 = ("present", "visible", "since_seen", "alive", "dx", "dy", "dist", "hp_frac", "mana_frac", "level", "stunned")
ENEMY_V2 = ("attack_damage", "items")
CREEP_V1 = ("present", "enemy", "dx", "dy", "dist", "hp_frac", "last_hittable", "deniable")
CREEP_V2 = ()
STRUCT_V1 = ("present", "enemy", "ancient", "tier", "dx", "dy", "dist", "hp_frac", "vulnerable")
STRUCT_V2 = ()

TYPES_V1 = ("noop", "move", "attack", "ability_0", "ability_1", "ability_2")
TYPES_V2 = ("recall",)
POINTER_BLOCKS = ("self", "allies", "enemies", "creeps", "structures")


def _types(cfg: GameConfig) -> tuple[str, ...]:
    return tuple(f"type_{name}" for name in cfg.hero_types)


def block_features(version: int, cfg: GameConfig | None = None) -> dict[str, tuple[str, ...]]:
    """Feature names per block for a game version (hero-type one-hots follow the v1 features)."""
    cfg = cfg or GameConfig()
    if version not in (1, 2):
        raise ValueError(f"unknown game version {version} (known: 1, 2)")
    extra = version == 2
    types = _types(cfg)
    return {
        "self": SELF_V1 + types + (SELF_V2 if extra else ()),
        "allies": ALLY_V1 + types + (ALLY_V2 if extra else ()),
        "enemies": ENEMY_V1 + types + (ENEMY_V2 if extra else ()),
        "creeps": CREEP_V1 + (CREEP_V2 if extra else ()),
        "structures": STRUCT_V1 + (STRUCT_V2 if extra else ()),
    }


def obs_spec(version: int = 1, cfg: GameConfig | None = None) -> ObsSpec:
    """The observation layout of the lane game (default config unless `cfg` is given)."""
    cfg = cfg or GameConfig()
    features = block_features(version, cfg)
    slots = {
        "self": 1,
        "allies": cfg.heroes_per_side - 1,
        "enemies": cfg.heroes_per_side,
        "creeps": cfg.creep_slots,
        "structures": 2 * cfg.structures_per_side,
    }
    return ObsSpec(tuple(EntityBlock(name, slots[name], features[name]) for name in POINTER_BLOCKS), version)


def target_slots(cfg: GameConfig | None = None) -> int:
    """Choices of the `target` pointer head: self, allies, enemies, creeps, structures."""
    cfg = cfg or GameConfig()
    return 1 + (cfg.heroes_per_side - 1) + cfg.heroes_per_side + cfg.creep_slots + 2 * cfg.structures_per_side


def action_spec(version: int = 1, cfg: GameConfig | None = None) -> ActionSpec:
    """The action layout: type, then `move` (8 directions) and `target` (pointer) heads."""
    if version not in (1, 2):
        raise ValueError(f"unknown game version {version} (known: 1, 2)")
    types = TYPES_V1 + (TYPES_V2 if version == 2 else ())
    heads = (ActionHead("move", DIRECTIONS), ActionHead("target", target_slots(cfg), POINTER_BLOCKS))
    uses = tuple((name == "move", name == "attack" or name.startswith("ability_")) for name in types)
    return ActionSpec(types, heads, uses)


def sized_config(obs: ObsSpec, base: GameConfig) -> GameConfig:
    """`base` with the game version, heroes a side, lanes and creep slots of the game whose observations have `obs`'s
    layout (towers per lane stay `base`'s): the game a model plays after a game-size or game-version surgery.
    GameError where no lane game has that layout."""
    try:
        allies, enemies = obs.block("allies").slots, obs.block("enemies").slots
        structures, creeps = obs.block("structures").slots, obs.block("creeps").slots
    except KeyError as exc:
        raise GameError(f"not a lane-game layout: {exc}") from None
    lanes, rest = divmod(structures - 2, 2 * base.towers_per_lane)
    if enemies != allies + 1 or rest or not 1 <= lanes <= 3:
        raise GameError(
            f"no lane game with {base.towers_per_lane} towers a lane has {allies} allies, {enemies} enemies and "
            f"{structures} structures in sight"
        )
    return replace(base, version=obs.version, heroes_per_side=enemies, lanes=lanes, creep_slots=creeps)
