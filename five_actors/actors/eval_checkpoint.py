"""`five-actors eval CKPT --vs REF`: a checkpoint against a reference, with win rate and TrueSkill.

CKPT is a checkpoint file or a run directory (its newest `checkpoints/vNNNNNNNNN.ckpt`). The
reference is the random bot, the scripted bot, or another checkpoint. Games are played with the
EvalActor's `play_round` (the checkpoint on team 0 in even games, team 1 in odd ones) and rated
on the EvalActor's TrueSkill scale, where the random bot is pinned at 0: a reference other than
the random bot first plays as many anchor games against the random bot, so its rating (and the
checkpoint's through it) sits on that scale.

The game is the run's: `--config` when given, else the config.json of the run the checkpoint
belongs to (at the size of the model's layout, which a game-size surgery grows), else the default
config; `--set` overrides either.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch

from five_actors.actors.play import GameOutcome, Progress, play_round, summarize
from five_actors.actors.ratings import REFERENCE, Ratings
from five_actors.actors.store import CheckpointStore
from five_actors.config import RUN_CONFIG, Config, config_from_tree, config_to_dict, load_config, read_run_config
from five_actors.errors import CheckpointError, FiveActorsError, GameError
from five_actors.game.bots import RandomBot, ScriptedBot
from five_actors.game.config import GameConfig
from five_actors.game.layout import project_masks, project_obs
from five_actors.game.match import Bot
from five_actors.game.spec import action_spec, obs_spec, sized_config
from five_actors.model.checkpoint import load_into, read_checkpoint
from five_actors.model.policy import Policy, blank_policy

PLAYER = "checkpoint"
"""The evaluated checkpoint's name in the ratings."""
SCALE = (
    "TrueSkill mu minus the random bot's (pinned, never updated): random play is 0; "
    "mu 25, sigma 25/3, beta sigma/2, tau 0, draw 0.02"
)


@dataclass
class Loaded:
    """A checkpoint read for play: its file, run directory (if it lies in one), version and policy."""

    path: Path
    run_dir: Path | None
    version: int | None
    policy: Policy


def checkpoint_file(target: Path) -> tuple[Path, Path | None]:
    """The checkpoint file `target` names and the run directory it belongs to (None if none).

    A directory means its newest checkpoint: RUN_DIR/checkpoints/v*.ckpt, or v*.ckpt in it directly.
    """
    if target.is_dir():
        folder = target / "checkpoints" if (target / "checkpoints").is_dir() else target
        versions = CheckpointStore(folder).versions()
        if not versions:
            raise CheckpointError(f"{target}: no checkpoints (v*.ckpt) in {folder}")
        target = CheckpointStore(folder).path(versions[-1])
    elif not target.exists():
        raise CheckpointError(f"{target}: no such checkpoint file or run directory")
    run_dir = target.parent.parent
    return target, run_dir if (run_dir / RUN_CONFIG).is_file() else None


def load_checkpoint(target: Path, device: str) -> Loaded:
    """Read a checkpoint (file or run directory) into a policy in eval mode on `device`."""
    path, run_dir = checkpoint_file(target)
    checkpoint = read_checkpoint(path)
    policy = blank_policy(checkpoint.spec)
    load_into(checkpoint, policy)
    return Loaded(path, run_dir, checkpoint.counters.get("version"), policy.to(device).eval())


def game_config(loaded: Loaded, config: str | None, overrides: Sequence[str]) -> tuple[GameConfig, str]:
    """The game to play (see the module docstring) and where it came from."""
    if config is None and loaded.run_dir is not None:
        tree = config_to_dict(read_run_config(loaded.run_dir))
        source = str(loaded.run_dir / RUN_CONFIG)
        game = config_from_tree(tree, overrides, source).game
        try:  # a curriculum's game-size surgery grew the run's game past what its config.json says
            return sized_config(loaded.policy.spec.obs, game), source
        except GameError:
            return game, source  # not a lane-game layout: check_fits says why
    name = config or "default"
    run_config: Config = load_config(name, overrides)
    return run_config.game, f"config {name}"


def check_fits(loaded: Loaded, game: GameConfig, source: str) -> None:
    """Refuse a checkpoint whose model cannot read the game's observations (other slots, blocks or heads)."""
    spec = loaded.policy.spec
    obs, actions = (
        obs_spec(spec.obs.version, game),
        action_spec(spec.obs.version, game),
    )  # play_round plays the model's version
    try:
        project_obs(np.zeros((0, obs.size), np.float32), obs, spec.obs)
        project_masks({}, actions, spec.actions)
    except GameError as exc:
        raise FiveActorsError(
            f"{loaded.path}: its model does not fit the game of {source} ({exc}); pass the run's --config"
        ) from None


def device_of(name: str, setting: str = "--device") -> str:
    """A torch device name checked against this machine; errors name the `setting` it came from."""
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise FiveActorsError(f"{setting} {name!r}: {exc}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise FiveActorsError(f"{setting} {name}: this machine has no CUDA GPU that torch can use")
    return name


def reference_of(vs: str, game: GameConfig, seed: int, device: str, anchor: Loaded) -> tuple[str, Policy | Bot]:
    """The reference's rating name and player: a bot, or a checkpoint (refused if its model does not fit)."""
    if vs == "random":
        return REFERENCE, RandomBot(seed=seed + 1)
    if vs == "scripted":
        return "scripted", ScriptedBot(game)
    if not Path(vs).exists():
        raise FiveActorsError(f"--vs {vs!r}: expected 'random', 'scripted', or a checkpoint file or run directory")
    other = load_checkpoint(Path(vs), device)
    check_fits(other, game, f"the game of {anchor.path}")
    return "reference", other.policy


def evaluate(
    target: Path,
    vs: str,
    games: int,
    seed: int,
    device: str,
    replay: Path | None,
    config: str | None = None,
    overrides: Sequence[str] = (),
    err: TextIO | None = None,
) -> dict[str, Any]:
    """Play the checkpoint at `target` against `vs` and return the report; progress lines go to `err` (stderr)."""
    err = err or sys.stderr
    started = time.monotonic()
    loaded = load_checkpoint(target, device_of(device))
    game, source = game_config(loaded, config, overrides)
    check_fits(loaded, game, source)
    name, reference = reference_of(vs, game, seed, device, loaded)
    ratings = Ratings()
    report: dict[str, Any] = {"checkpoint": str(loaded.path), "version": loaded.version, "vs": vs, "game": source}
    if name != REFERENCE:
        anchor = play_round(
            game,
            reference,
            RandomBot(seed=seed + 2),
            games,
            seed + 1,
            progress=_printer(err, "anchor: reference vs random", games),
        )
        _rate(ratings, name, REFERENCE, anchor)
        report["anchor"] = {"vs": "random", **summarize(anchor)}
    outcomes = play_round(
        game, loaded.policy, reference, games, seed, replay, _printer(err, f"checkpoint vs {vs}", games)
    )
    _rate(ratings, PLAYER, name, outcomes)
    report.update(summarize(outcomes))
    report["trueskill"] = _rating(ratings, PLAYER)
    report["reference_trueskill"] = _rating(ratings, name)
    report.update(
        scale=SCALE,
        seed=seed,
        device=device,
        replay=None if replay is None else str(replay),
        seconds=round(time.monotonic() - started, 2),
    )
    return report


def _rate(ratings: Ratings, player: str, opponent: str, outcomes: list[GameOutcome]) -> None:
    for outcome in outcomes:
        ratings.record(player, opponent, outcome.score)


def _rating(ratings: Ratings, name: str) -> dict[str, float]:
    return {k: v for k, v in ratings.table()[name].items() if k != "games"}


def _printer(err: TextIO, what: str, games: int, every_s: float = 1.0) -> Progress:
    """A progress callback writing `what: F/N games done, step S` to `err` at most every `every_s` seconds."""
    last = [0.0]

    def progress(steps: int, finished: int) -> None:
        now = time.monotonic()
        if now - last[0] >= every_s or finished == games:
            last[0] = now
            err.write(f"{what}: {finished}/{games} games done, step {steps}\n")
            err.flush()

    return progress
