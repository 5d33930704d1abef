"""Surgery against training from scratch, on the synchronous baseline (no actors, no live swap).

`five-actors bench surgery --steps 200000 --switch 0.5` runs two arms, each playing team 0 of
the lane game against the scripted bot with the one-process PPO baseline:

1. surgery: train on game v1 with an LSTM of `--lstm-from` for `--switch` of the steps; then
   surgery `game-version 2 + widen-lstm --lstm-to` (verified on recorded v2 games), and
   continue on game v2, the new `recall` action annealed in over `--anneal` of the steps as a
   share of games (masked in the others);
2. scratch: train on game v2 with an LSTM of `--lstm-to` from the start for the same steps.

It prints both arms' win rate and mean return over the last 20 games against steps, the win rate just before
and just after the swap, and the pause the swap caused (probe recording, surgery, check,
rebuild; in this synchronous variant no steps are lost, the games in progress restart).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from five_actors.config import Config, apply_override, from_mapping
from five_actors.game.layout import ActionSpec, ObsSpec, Step
from five_actors.model.baseline import Opponent, Progress, SyncTrainer
from five_actors.model.policy import Policy
from five_actors.model.spec import ModelSpec
from five_actors.surgery.anneal import apply_anneal
from five_actors.surgery.state import ModelState


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options."""
    parser.add_argument("--steps", type=int, default=200_000, help="environment steps per arm (policy rows x steps)")
    parser.add_argument("--switch", type=float, default=0.5, help="share of the steps trained on v1 before the surgery")
    parser.add_argument("--anneal", type=float, default=0.1, help="share of the steps over which recall is annealed in after the surgery")
    parser.add_argument("--lstm-from", type=int, default=64, help="LSTM units before the surgery")
    parser.add_argument("--lstm-to", type=int, default=128, help="LSTM units after the surgery (and of the scratch arm)")
    parser.add_argument("--games", type=int, default=8, help="lane games per batch")
    parser.add_argument("--seed", type=int, default=0, help="seed of both arms")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="config override, repeatable")


class AnnealedEnv:
    """A lane game whose policy rows may choose action type `name` only in a `share` of games (the rest mask it)."""

    def __init__(self, env: Any, name: str, policy_rows: np.ndarray) -> None:
        self.env = env
        self.obs_spec: ObsSpec = env.obs_spec
        self.action_spec: ActionSpec = env.action_spec
        self.teams, self.agents_per_team, self.num_games = env.teams, env.agents_per_team, env.num_games
        self.share = 0.0
        self._name = name
        self._rows = policy_rows
        self._game = np.arange(env.num_rows) // (env.teams * env.agents_per_team)

    @property
    def num_rows(self) -> int:
        return int(self.env.num_rows)

    def _mask(self, masks: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = self._rows
        masks["type"][rows] = apply_anneal(masks["type"][rows], self.action_spec.types, {self._name: self.share}, self._game[rows], self.num_games)
        return masks

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        obs, masks = self.env.reset(seed)
        return obs, self._mask(masks)

    def step(self, actions: np.ndarray) -> Step:
        step = self.env.step(actions)
        step.masks = self._mask(step.masks)
        return step


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run both arms and report their curves and the swap."""
    from five_actors.surgery.ops import SurgeryOp
    from five_actors.surgery.verify import operate, record_probes

    from five_actors.logs import configure_logging

    configure_logging("bench", None, level="warning")  # stdout carries the JSON result only
    torch.set_num_threads(args.threads)
    config = _config(args.overrides)
    switch = int(args.steps * args.switch)

    torch.manual_seed(args.seed)
    trainer, _ = _trainer(config, 1, args.lstm_from, args, None)
    surgery_curve: list[dict[str, Any]] = []
    started = time.perf_counter()
    trainer.train(switch, _reporter("surgery v1", surgery_curve, 0, args.steps, started))
    before = surgery_curve[-1]["win_rate"] if surgery_curve else None

    paused = time.perf_counter()
    probes = record_probes(dataclasses.replace(config.game, version=2), steps=128, games=2, seed=args.seed)
    probed = time.perf_counter()
    ops = [SurgeryOp("game-version", ("2",)), SurgeryOp("widen-lstm", (str(args.lstm_to),))]
    new, verification = operate(ops, ModelState.of(trainer.policy, trainer.ppo.optimizer), probes, args.seed)
    operated = time.perf_counter()
    trainer2, annealed = _trainer(config, 2, args.lstm_to, args, new)
    pause = {
        "pause_s": round(time.perf_counter() - paused, 3),
        "probe_recording_s": round(probed - paused, 3),
        "surgery_and_check_s": round(operated - probed, 3),
        "steps_lost": 0,
        "games_restarted": args.games,
        "verification": verification.to_dict(),
        "architecture": {"from": trainer.policy.spec.hash, "to": new.spec.hash},
    }
    anneal_steps = max(1, int(args.steps * args.anneal))
    offset = trainer.steps

    def report_v2(p: Progress) -> None:
        if annealed is not None:
            annealed.share = min(1.0, p.steps / anneal_steps)
        reporter(p)

    reporter = _reporter("surgery v2", surgery_curve, offset, args.steps, started)
    trainer2.train(args.steps - offset, report_v2)
    after = next((c["win_rate"] for c in surgery_curve if c["steps"] > offset and c["win_rate"] is not None), None)

    torch.manual_seed(args.seed)
    scratch, _ = _trainer(config, 2, args.lstm_to, args, None)
    scratch_curve: list[dict[str, Any]] = []
    scratch.train(args.steps, _reporter("scratch v2", scratch_curve, 0, args.steps, time.perf_counter()))
    sys.stderr.write("\n")
    return {
        "benchmark": "surgery",
        "variant": "synchronous baseline (one process; not the live swap through the actors)",
        "steps": args.steps,
        "switch_at_steps": offset,
        "lstm": [args.lstm_from, args.lstm_to],
        "games": args.games,
        "seed": args.seed,
        "swap": pause,
        "win_rate_before_swap": before,
        "first_win_rate_after_swap": after,
        "final_win_rate": {"surgery": _last(surgery_curve), "scratch": _last(scratch_curve)},
        "curves": {"surgery": surgery_curve, "scratch": scratch_curve},
    }


def _config(overrides: list[str]) -> Config:
    tree: dict[str, Any] = {"ppo": {"anneal_learning_rate": False}}
    for assignment in overrides:
        apply_override(tree, assignment)
    return from_mapping(Config, tree)


def _trainer(config: Config, version: int, lstm: int, args: argparse.Namespace, state: ModelState | None) -> tuple[SyncTrainer, AnnealedEnv | None]:
    """A baseline trainer on game `version` vs the scripted bot; from `state` (a ModelState) when given."""
    from five_actors.game.bots import ScriptedBot
    from five_actors.game.env import LaneGame
    from five_actors.game.match import team_rows

    game = LaneGame(dataclasses.replace(config.game, version=version, games_per_batch=args.games, seed=args.seed))
    policy_rows = np.zeros(game.num_rows, bool)
    policy_rows[team_rows(game, 0)] = True
    env: Any = game
    annealed = None
    if state is not None and "recall" in state.anneal:
        env = annealed = AnnealedEnv(game, "recall", policy_rows)
    if state is None:
        spec = ModelSpec.build(game.obs_spec, game.action_spec, dataclasses.replace(config.model, lstm_size=lstm))
        policy = Policy(spec).to(config.model.device)
    else:
        policy = state.build_policy(config.model.device)
    trainer = SyncTrainer(env, policy, config.ppo, config.ppo.gamma(1.0 / config.game.steps_per_second), policy_rows, _opponent(game, ScriptedBot(game.config), team_rows(game, 1)), seed=args.seed)
    if state is not None and state.optimizer is not None:
        trainer.ppo.optimizer.load_state_dict(dict(state.optimizer))
    return trainer, annealed


def _opponent(game: Any, bot: Any, rows: np.ndarray) -> Opponent:
    def act(obs: np.ndarray, masks: dict[str, np.ndarray]) -> np.ndarray:
        actions = np.zeros((game.num_rows, game.action_spec.columns), np.int64)
        actions[rows] = bot.act(obs[rows], {k: v[rows] for k, v in masks.items()})
        return actions

    return act


def _reporter(label: str, curve: list[dict[str, Any]], offset: int, total: int, started: float) -> Callable[[Progress], None]:
    """A progress callback appending (steps, wall seconds since `started`, win rate) to `curve`."""

    def report(p: Progress) -> None:
        curve.append({"steps": offset + p.steps, "wall_s": round(time.perf_counter() - started, 2), "win_rate": p.win_rate, "mean_return": p.mean_return})
        win = "-" if p.win_rate is None else f"{p.win_rate:.2f}"
        sys.stderr.write(f"\rsurgery bench {label}: {offset + p.steps:,}/{total:,} steps, win rate {win}   ")
        sys.stderr.flush()

    return report


def _last(curve: list[dict[str, Any]]) -> float | None:
    return next((c["win_rate"] for c in reversed(curve) if c["win_rate"] is not None), None)

