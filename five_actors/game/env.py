"""`LaneGame`: a batch of lane games behind the layout.BatchEnv interface.

Rows are `game * 2 * heroes_per_side + team * heroes_per_side + hero`. Games that end are
reset at once (the returned observation is the next game's first); `dones` marks their rows.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from five_actors.errors import GameError
from five_actors.game.config import GameConfig
from five_actors.game.layout import ActionSpec, ObsSpec, Step
from five_actors.game.observe import observe_all, observe_serial
from five_actors.game.sim import reset_game
from five_actors.game.spec import action_spec, obs_spec
from five_actors.game.state import (
    ALIVE,
    EVENT_KINDS,
    G_DONE,
    G_STEP,
    G_WINNER,
    H_DEATHS,
    H_DENIES,
    H_KILLS,
    H_LASTHITS,
    H_LEVEL,
    H_TYPE,
    HP,
    KIND,
    MAXHP,
    P_TEAM_SPIRIT,
    REWARD_COMPONENTS,
    REWARD_NAMES,
    SCRATCH_COLUMNS,
    TEAM,
    GameState,
    X,
    Y,
    fountains,
    hero_tables,
    lane_waypoints,
    pack_params,
    structure_positions,
)
from five_actors.game.step import step_all, step_serial

FRAME_COLUMNS = ("x", "y", "team", "kind", "type", "hp_frac", "alive", "level")
RESULTS_KEPT = 10_000

# The two unit/number fields of each event kind, by name.
_EVENT_FIELDS: dict[str, Callable[[int, int], dict[str, int]]] = {
    "kill": lambda a, b: {"killer": a, "victim": b},
    "last_hit": lambda a, b: {"hero": a, "creep": b},
    "deny": lambda a, b: {"hero": a, "creep": b},
    "tower_destroyed": lambda a, b: {"by": a, "unit": b},
    "ancient_destroyed": lambda a, b: {"by": a, "unit": b},
    "ability": lambda a, b: {"hero": a, "ability": b},
    "recall": lambda a, b: {"hero": a},
}


class LaneGame:
    """A batch of `config.games_per_batch` 5v5 lane games stepped together by numba kernels."""

    teams = 2

    def __init__(self, config: GameConfig | None = None) -> None:
        self.config = cfg = config or GameConfig()
        self.version = cfg.version
        self.obs_spec: ObsSpec = obs_spec(cfg.version, cfg)
        self.action_spec: ActionSpec = action_spec(cfg.version, cfg)
        self.agents_per_team = cfg.heroes_per_side
        self.num_games = cfg.games_per_batch
        self._hps = cfg.heroes_per_side
        self._sb = cfg.structures_per_side
        self._params = pack_params(cfg)
        self._stats, self._abilities = hero_tables(cfg)
        self._tower_rewards = np.array(cfg.reward_tower, dtype=np.float64)
        self._waypoints = lane_waypoints(cfg)
        self._structures = structure_positions(cfg)
        self._fountains = fountains(cfg)
        widths = [b.width for b in self.obs_spec.blocks] + [cfg.version]
        self._widths = np.array(widths, dtype=np.int64)
        self.state = GameState.allocate(cfg)
        n_units = self.state.units.shape[1]
        rows = self.num_rows
        self._acc = np.zeros((self.num_games, 2 * self._hps, REWARD_COMPONENTS), dtype=np.float32)
        self._scratch = np.zeros((self.num_games, n_units, SCRATCH_COLUMNS), dtype=np.float32)
        self._vis = np.zeros((self.num_games, 2, n_units), dtype=np.bool_)
        self._slot_unit = np.zeros((rows, self.action_spec.heads[1].size), dtype=np.int64)
        self._masks: dict[str, np.ndarray] = {}
        self._rng = np.random.default_rng(cfg.seed)
        self.illegal_actions = 0
        """Illegal actions the game has received (and played as noop) since it was made."""
        self.results: deque[dict[str, Any]] = deque(maxlen=RESULTS_KEPT)
        """One dict per finished game (game, winner, steps, reason, totals), oldest first; the
        latest RESULTS_KEPT are kept, and the caller may clear it."""
        self._threads = cfg.numba_threads or numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]  # set at import
        self.team_spirit = cfg.team_spirit_at(0)
        """The team spirit the rewards use now (`follow_version` moves it along game.team_spirit)."""
        # One thread runs (and compiles) the serial kernels: no parallel launch per step.
        self._step_kernel = step_serial if self._threads == 1 else step_all
        self._observe_kernel = observe_serial if self._threads == 1 else observe_all
        self._ready = False

    @property
    def num_rows(self) -> int:
        """Rows of the batch: every hero of both teams of every game."""
        return self.num_games * 2 * self._hps

    def _draft(self) -> np.ndarray:
        cfg = self.config
        n_types = len(cfg.hero_types)
        if cfg.draft == "fixed":
            return np.arange(2 * self._hps, dtype=np.int64) % n_types
        return self._rng.integers(0, n_types, size=2 * self._hps).astype(np.int64)

    def _reset_game(self, g: int) -> None:
        s = self.state
        reset_game(
            g,
            self._draft(),
            s.units,
            s.heroes,
            s.seen,
            s.game,
            self._params,
            self._stats,
            self._structures,
            self._fountains,
        )

    def follow_version(self, version: int) -> None:
        """Use the team spirit of parameter version `version` (game.team_spirit) from the next step on."""
        self.team_spirit = self.config.team_spirit_at(version)
        self._params[P_TEAM_SPIRIT] = self.team_spirit

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Start every game afresh (reseeding the drafts when `seed` is given); returns (obs, masks)."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        for g in range(self.num_games):
            self._reset_game(g)
        self.state.event_count[:] = 0
        self._ready = True
        return self._observe()

    def observe(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Observations and masks of the current state (after editing `state` by hand, say)."""
        if not self._ready:
            raise GameError("call reset() before observe()")
        return self._observe()

    def _observe(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if self._threads > 1:
            numba.set_num_threads(self._threads)
        rows, n_types = self.num_rows, len(self.action_spec.types)
        n_slots = self._slot_unit.shape[1]
        obs = np.empty((rows, self.obs_spec.size), dtype=np.float32)
        masks = {
            "type": np.empty((rows, n_types), dtype=np.bool_),
            "move": np.empty((rows, n_types, self.action_spec.heads[0].size), dtype=np.bool_),
            "target": np.empty((rows, n_types, n_slots), dtype=np.bool_),
        }
        s = self.state
        self._observe_kernel(
            s.units,
            s.heroes,
            s.seen,
            s.game,
            self._vis,
            obs,
            self._slot_unit,
            masks["type"],
            masks["move"],
            masks["target"],
            self._params,
            self._abilities,
            self._widths,
            n_types,
            self._hps,
            self._sb,
        )
        self._masks = masks
        return obs, masks

    def check_actions(self, actions: Any) -> np.ndarray:
        """The actions as int64 `[rows, 3]`, or a GameError naming what is wrong with them."""
        if not isinstance(actions, np.ndarray):
            raise GameError(f"actions must be a numpy array, got {type(actions).__name__}")
        if not np.issubdtype(actions.dtype, np.integer):
            raise GameError(f"actions must have an integer dtype, got {actions.dtype}")
        expected = (self.num_rows, self.action_spec.columns)
        if actions.shape != expected:
            raise GameError(f"actions must have shape {expected} (rows, type + heads), got {actions.shape}")
        limits = [len(self.action_spec.types)] + [head.size for head in self.action_spec.heads]
        names = ["type"] + [head.name for head in self.action_spec.heads]
        for col, (limit, name) in enumerate(zip(limits, names)):
            column = actions[:, col]
            bad = np.flatnonzero((column < 0) | (column >= limit))
            if bad.size:
                row = int(bad[0])
                raise GameError(f"actions[{row}, {col}] ({name}) = {int(column[row])} is out of range [0, {limit})")
        # A writable copy: a read-only array (one that arrived over a link) would make numba
        # compile a second specialisation of the step kernel, stalling the first step for a minute.
        return np.array(actions, dtype=np.int64)

    def step(self, actions: np.ndarray) -> Step:
        """Play one step of every game; games that end are reset (see the module docstring)."""
        if not self._ready:
            raise GameError("call reset() before step()")
        acts = np.ascontiguousarray(self.check_actions(actions))
        rows = self.num_rows
        s = self.state
        rewards = np.empty(rows, dtype=np.float32)
        comps = np.empty((rows, REWARD_COMPONENTS), dtype=np.float32)
        illegal = np.zeros(rows, dtype=np.int32)
        if self._threads > 1:
            numba.set_num_threads(self._threads)
        m = self._masks
        self._step_kernel(
            acts,
            s.units,
            s.heroes,
            s.game,
            self._acc,
            self._scratch,
            s.events,
            s.event_count,
            self._slot_unit,
            m["type"],
            m["move"],
            m["target"],
            illegal,
            rewards,
            comps,
            self._params,
            self._stats,
            self._abilities,
            self._tower_rewards,
            self._waypoints,
            self._structures,
            self._fountains,
        )
        self.illegal_actions += int(illegal.sum())
        done_games = np.flatnonzero(s.game[:, G_DONE] > 0)
        per_game = 2 * self._hps
        dones = np.zeros(rows, dtype=np.bool_)
        win = np.zeros(rows, dtype=np.float32)
        for g in done_games:
            winner = int(s.game[g, G_WINNER])
            steps = int(s.game[g, G_STEP])
            rows_g = slice(g * per_game, (g + 1) * per_game)
            dones[rows_g] = True
            team = np.repeat(np.arange(2), self._hps)
            win[rows_g] = np.where(winner < 0, 0.5, (team == winner).astype(np.float32))
            reason = "ancient" if self._ancient_fell(int(g)) else "time_limit"
            self.results.append(
                {"game": int(g), "winner": winner, "steps": steps, "reason": reason, **self.game_stats(int(g))}
            )
            self._reset_game(int(g))
        obs, masks = self._observe()
        infos: dict[str, np.ndarray] = {f"reward/{name}": comps[:, c] for c, name in enumerate(REWARD_NAMES)}
        infos["win"] = win
        infos["illegal"] = illegal
        return Step(obs=obs, masks=masks, rewards=rewards, dones=dones, infos=infos)

    def _ancient_fell(self, g: int) -> bool:
        u, nh, sb = self.state.units, 2 * self._hps, self._sb
        return bool(u[g, nh + sb - 1, ALIVE] == 0 or u[g, nh + 2 * sb - 1, ALIVE] == 0)

    def game_stats(self, game: int) -> dict[str, Any]:
        """Per-team totals of a game so far: kills, deaths, last hits, denies, towers destroyed, mean level."""
        h = self.state.heroes[game]
        hps = self._hps
        out: dict[str, Any] = {}
        alive = self.state.units[game, 2 * hps :, ALIVE]
        towers = self._sb - 1
        # A team's count is the enemy towers it destroyed.
        out["towers"] = [int((alive[self._sb : self._sb + towers] == 0).sum()), int((alive[:towers] == 0).sum())]
        for name, col in (("kills", H_KILLS), ("deaths", H_DEATHS), ("last_hits", H_LASTHITS), ("denies", H_DENIES)):
            out[name] = [int(h[:hps, col].sum()), int(h[hps:, col].sum())]
        out["mean_level"] = [float(h[:hps, H_LEVEL].mean()), float(h[hps:, H_LEVEL].mean())]
        return out

    def units_frame(self, game: int) -> np.ndarray:
        """The units of one game for a replay frame: float32 `[n, 8]` in FRAME_COLUMNS order, in map
        units with team 0's corner at (0, 0); heroes (alive or not), standing structures, living creeps."""
        u = self.state.units[game]
        h = self.state.heroes[game]
        nh = 2 * self._hps
        keep = np.ones(u.shape[0], dtype=bool)
        keep[nh:] = u[nh:, ALIVE] > 0
        idx = np.flatnonzero(keep)
        frame = np.zeros((idx.size, len(FRAME_COLUMNS)), dtype=np.float32)
        frame[:, 0] = u[idx, X]
        frame[:, 1] = u[idx, Y]
        frame[:, 2] = u[idx, TEAM]
        frame[:, 3] = u[idx, KIND]
        heroes = idx < nh
        frame[heroes, 4] = h[idx[heroes], H_TYPE]
        frame[:, 5] = np.clip(u[idx, HP] / u[idx, MAXHP], 0.0, 1.0)
        frame[:, 6] = u[idx, ALIVE]
        frame[heroes, 7] = h[idx[heroes], H_LEVEL]
        return frame

    def events(self, game: int) -> list[dict[str, Any]]:
        """The events of one game's last step: dicts with kind, x, y and who was involved (unit
        indices; heroes are 0..9 = team * 5 + hero, -1 is nobody)."""
        out = []
        for e in self.state.events[game, : self.state.event_count[game]]:
            kind = EVENT_KINDS[int(e[0])]
            a, b = int(e[3]), int(e[4])
            event: dict[str, Any] = {"kind": kind, "x": round(float(e[1]), 2), "y": round(float(e[2]), 2)}
            event.update(_EVENT_FIELDS[kind](a, b))
            out.append(event)
        return out
