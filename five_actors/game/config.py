"""The `[game]` config section: every setting and reward weight of the lane game."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from five_actors.schedule import Schedule, check_schedule, schedule_value

HERO_TYPE_NAMES: tuple[str, ...] = ("knight", "ranger", "mage", "priest", "brute")
"""The built-in hero types (their stats live in five_actors.game.state.HERO_TABLE)."""


@dataclass(frozen=True)
class GameConfig:
    """Settings of the lane game; distances are map units, times are game steps."""

    version: int = 1
    """Game version: 1, or 2 (adds a few features and the `recall` action)."""
    games_per_batch: int = 64
    """Games stepped together by one LaneGame (rows = games * 2 * heroes_per_side)."""
    lanes: int = 3
    """Lanes on the map, 1 to 3 (mid, then top, then bottom)."""
    heroes_per_side: int = 5
    """Heroes on each team."""
    hero_types: tuple[str, ...] = HERO_TYPE_NAMES
    """Hero types in play (names from HERO_TYPE_NAMES); the obs one-hot follows this order."""
    draft: Literal["random", "fixed"] = "random"
    """'random': each hero's type drawn per game; 'fixed': hero i is type i mod len(hero_types)."""
    map_size: float = 100.0
    """Side of the square map; team 0's base is at (0, 0), team 1's at (map_size, map_size)."""
    steps_per_second: float = 7.5
    """Game steps per second of game time (OpenAI Five: 0.133 s per step)."""
    time_limit_steps: int = 2400
    """Steps before the game ends undecided: then the team that destroyed more enemy towers wins, then
    the one whose ancient lost less health; otherwise it is a draw."""
    towers_per_lane: int = 2
    """Towers per lane per side; tier 0 is the outermost, each tier is invulnerable until the one before falls."""
    tower_hp: float = 1400.0
    """Health of each tower."""
    tower_damage: float = 70.0
    """Damage of one tower attack."""
    tower_range: float = 8.0
    """Tower attack range."""
    ancient_hp: float = 2500.0
    """Health of each ancient; its fall ends the game."""
    creep_wave_interval: int = 150
    """Steps between creep waves (the first spawns at step 1)."""
    creeps_per_wave: int = 3
    """Creeps per lane per side in each wave."""
    max_creeps: int = 72
    """Creep slots per game; a wave that finds no free slot is cut short."""
    creep_hp: float = 300.0
    """Health of a creep."""
    creep_damage: float = 18.0
    """Damage of one creep attack."""
    creep_speed: float = 0.6
    """Creep walking speed per step."""
    hero_speed: float = 1.0
    """Multiplier on every hero type's base speed."""
    creep_gold: float = 40.0
    """Gold for the last hit on an enemy creep."""
    creep_xp: float = 50.0
    """XP of a dying creep, shared by enemy heroes within xp_radius."""
    deny_xp_fraction: float = 0.5
    """Share of a creep's XP that enemies still get when it is denied."""
    hero_kill_gold: float = 150.0
    """Gold for killing a hero (plus 10 per victim level)."""
    hero_kill_xp: float = 120.0
    """XP for killing a hero (plus 20 per victim level), shared like creep XP."""
    tower_gold: float = 150.0
    """Gold to every hero of the team that destroys a tower."""
    passive_gold_per_step: float = 0.2
    """Gold every hero earns each step."""
    start_gold: float = 100.0
    """Gold at the start of a game."""
    xp_radius: float = 14.0
    """Heroes within this distance of a dying enemy share its XP."""
    xp_per_level: float = 120.0
    """XP needed from level L to L+1 is xp_per_level * L."""
    max_level: int = 15
    """Highest hero level."""
    respawn_base_steps: int = 40
    """Respawn time of a dead level-0 hero."""
    respawn_per_level_steps: int = 8
    """Extra respawn steps per hero level."""
    item_cost: float = 300.0
    """Price of one stat item; the scripted shop buys one whenever a hero can afford it."""
    max_items: int = 6
    """Items a hero can hold."""
    hero_vision: float = 14.0
    """Vision radius of a hero."""
    creep_vision: float = 9.0
    """Vision (and aggro) radius of a creep."""
    tower_vision: float = 12.0
    """Vision radius of a tower or ancient."""
    fountain_regen: float = 0.015
    """Fraction of max health and mana regained per step within 10 units of the own fountain (0.015:
    11% a second, a full heal in 9 s; it was 0.03, a heal in 4.4 s)."""
    recall_cooldown: int = 300
    """Cooldown of the v2 `recall` action (teleport to the own fountain)."""
    creep_slots: int = 8
    """Nearest visible creeps in each hero's observation."""
    reward_win: float = 5.0
    """Reward for winning (the loser gets its negative through zero-sum)."""
    reward_hero_death: float = -1.0
    """Reward for dying."""
    reward_xp: float = 0.002
    """Reward per XP point gained."""
    reward_gold: float = 0.006
    """Reward per gold gained."""
    reward_health: float = 2.0
    """Reward per unit of the health score (x + 1 - (1 - x)^4) / 2 of the own health fraction x gained
    (negative when hurt): chip damage costs little, damage near death much (the paper's scoring)."""
    reward_mana: float = 0.75
    """Reward per fraction of own mana gained."""
    reward_kill: float = -0.6
    """Reward for the killing blow on an enemy hero (negative: its gold and XP are rewarded)."""
    reward_last_hit: float = -0.16
    """Reward for a last hit on an enemy creep (negative: its gold is rewarded)."""
    reward_deny: float = 0.15
    """Reward for denying an allied creep."""
    reward_tower: tuple[float, ...] = (2.25, 3.0)
    """Team reward per destroyed enemy tower by tier (2/3 paid as health falls, 1/3 on the fall); last value repeats."""
    reward_ancient: float = 5.0
    """Team reward per fraction of enemy ancient health removed."""
    reward_gold_spent: float = 0.0006
    """Reward per gold the shop spends for the hero."""
    reward_lane: float = -0.15
    """Reward per game second that a living hero spends farther than lane_width from its assigned
    lane (lane = the hero type's index in hero_types mod lanes, which the policy sees in its own
    type one-hot); the fountain counts as outside every lane."""
    lane_width: float = 8.0
    """Distance from a lane's path (its waypoints, own base end to enemy base end) within which a hero is in it."""
    team_spirit: Schedule = ((0.0, 0.3), (3000.0, 1.0))
    """Team spirit tau: r_i = (1 - tau) * own_i + tau * team mean; a schedule over parameter versions
    (the paper annealed it from 0.3 to 1.0 over training; the GameActor follows the version it plays)."""
    time_decay: float = 0.6
    """Shaped rewards are multiplied by time_decay ** (game minutes / time_decay_minutes)."""
    time_decay_minutes: float = 10.0
    """Game minutes over which the time decay factor applies once."""
    seed: int = 0
    """Seed of the drafts (the game itself is deterministic given actions)."""
    numba_threads: int = 1
    """Threads the game kernels use (parallel over games); 0 means all cores. One by default: a
    rollout process shares the machine with inference and learning."""

    def __post_init__(self) -> None:
        positive_ints = (
            "games_per_batch",
            "heroes_per_side",
            "time_limit_steps",
            "towers_per_lane",
            "creep_wave_interval",
            "max_level",
            "creep_slots",
            "recall_cooldown",
        )
        for name in positive_ints:
            if getattr(self, name) < 1:
                raise ValueError(f"game.{name} must be at least 1, got {getattr(self, name)}")
        positive_floats = (
            "map_size",
            "steps_per_second",
            "tower_hp",
            "ancient_hp",
            "creep_hp",
            "creep_speed",
            "hero_speed",
            "xp_per_level",
            "item_cost",
            "hero_vision",
            "creep_vision",
            "tower_vision",
            "tower_range",
            "time_decay_minutes",
            "lane_width",
        )
        for name in positive_floats:
            if not getattr(self, name) > 0:
                raise ValueError(f"game.{name} must be positive, got {getattr(self, name)}")
        non_negative = (
            "creeps_per_wave",
            "max_creeps",
            "creep_damage",
            "tower_damage",
            "creep_gold",
            "creep_xp",
            "hero_kill_gold",
            "hero_kill_xp",
            "tower_gold",
            "passive_gold_per_step",
            "start_gold",
            "xp_radius",
            "respawn_base_steps",
            "respawn_per_level_steps",
            "max_items",
            "fountain_regen",
            "deny_xp_fraction",
            "numba_threads",
        )
        for name in non_negative:
            if getattr(self, name) < 0:
                raise ValueError(f"game.{name} must not be negative, got {getattr(self, name)}")
        if self.version not in (1, 2):
            raise ValueError(f"game.version must be 1 or 2, got {self.version}")
        if not 1 <= self.lanes <= 3:
            raise ValueError(f"game.lanes must be 1, 2 or 3, got {self.lanes}")
        if not self.hero_types:
            raise ValueError("game.hero_types must name at least one hero type")
        unknown = [t for t in self.hero_types if t not in HERO_TYPE_NAMES]
        if unknown:
            raise ValueError(f"game.hero_types: unknown hero type {unknown[0]!r} (known: {', '.join(HERO_TYPE_NAMES)})")
        if len(set(self.hero_types)) != len(self.hero_types):
            raise ValueError("game.hero_types must not repeat a type")
        if self.draft not in ("random", "fixed"):
            raise ValueError(f"game.draft must be 'random' or 'fixed', got {self.draft!r}")
        if not self.reward_tower:
            raise ValueError("game.reward_tower must hold at least one value")
        check_schedule("game.team_spirit", self.team_spirit, 0.0, 1.0)
        if not 0.0 < self.time_decay <= 1.0:
            raise ValueError(f"game.time_decay must be within (0, 1], got {self.time_decay}")
        if not 0.0 <= self.deny_xp_fraction <= 1.0:
            raise ValueError(f"game.deny_xp_fraction must be within [0, 1], got {self.deny_xp_fraction}")

    def team_spirit_at(self, version: int) -> float:
        """Team spirit at parameter version `version`."""
        return schedule_value(self.team_spirit, version)

    @property
    def heroes_per_game(self) -> int:
        """Heroes of both teams in one game."""
        return 2 * self.heroes_per_side

    @property
    def structures_per_side(self) -> int:
        """Towers of one side plus its ancient."""
        return self.lanes * self.towers_per_lane + 1
