"""`five-actors bench system`: the actor system against the synchronous baseline, on one config.

First `five-actors up --config CONFIG` runs as a subprocess (the whole tree: ParamServer,
learners, inference, game actors, eval); once parameters flow (the first published version
after a game actor has shipped chunks) its figures are measured over `--seconds` from the
tree's view (/actors): env steps/s (game steps x games, all game actors), learner samples/s
(optimizer steps x minibatch_chunks x rollout_chunk_steps: row-steps trained on), mean
inference batch (rows per forward), p99 inference latency, mean staleness and sample reuse.
The synchronous baseline (five_actors.model.baseline), with the machine to itself, trains the
same model on the same game with `training.games_per_actor` games in self-play (every row
learned from, `baseline.epochs` times) for `--seconds`: collect, update, repeat. The two arms
alternate `--repeats` times; the figures are medians and the ratios are system / baseline.

Then the machine's ideal for this model, from the policy's own rates on one core
(five_actors.bench.policy: forward rows/s F, update rows/s U): each fresh sample costs a forward
and `sample_reuse` update passes, so all the cores, doing nothing else, would train
`ideal_samples_per_s` = reuse x cores / (1/F + reuse/U); `ideal_fraction` is the system's
samples/s over it (the game's own steps and the actors' messages are what the rest goes to).
Where the cores went: `cpu_cores`, the CPU seconds per second of the window that each of the
tree's processes took ("up": the head, with its supervisors and the parameter server; else the
path of the actor a process hosts), `cpu_cores_total`, their sum, and `idle_cores`, the cores
the machine left idle meanwhile (the rest went to other processes).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from five_actors.actors.eval_checkpoint import device_of
from five_actors.bench.policy import measure as policy_rates
from five_actors.bench.running import UpProcess, idle_cpu_seconds, running_metrics
from five_actors.config import Config, load_config
from five_actors.errors import FiveActorsError
from five_actors.game.env import LaneGame
from five_actors.model.baseline import SyncTrainer
from five_actors.model.policy import Policy
from five_actors.model.spec import ModelSpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options."""
    parser.add_argument("--config", default="default", help="config file or bundled name (default: default)")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    parser.add_argument(
        "--seconds", type=float, default=45.0, help="measured seconds of each arm in each repeat (default 45)"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="rounds of baseline then system; medians are reported (default 3)"
    )
    parser.add_argument(
        "--start-timeout", type=float, default=300.0, help="seconds the tree may take to start training (default 300)"
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure the baseline and the actor system in turn, `--repeats` times; returns the medians and their ratios.

    Alternating the two arms spreads whatever else the machine is doing over both of them."""
    config = load_config(args.config, args.set or ())
    device_of(config.model.device, "model.device")  # the baseline runs here
    rounds: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        baseline = measure_baseline(config, args.seconds)
        system = measure_system(args, config)
        rounds.append({"baseline": baseline, "system": system})
        print(
            f"repeat {repeat + 1}/{args.repeats}: system {system['env_steps_per_s']:,.0f} env steps/s, "
            f"{system['samples_per_s']:,.0f} samples/s;"
            f" baseline {baseline['env_steps_per_s']:,.0f}, {baseline['samples_per_s']:,.0f}",
            file=sys.stderr,
            flush=True,
        )
    system, baseline = _medians([r["system"] for r in rounds]), _medians([r["baseline"] for r in rounds])
    machine = ideal(config, system.get("sample_reuse"))
    return {
        "config": config.name,
        "seconds": args.seconds,
        "repeats": args.repeats,
        "system": system,
        "baseline": baseline,
        "env_steps_ratio": round(system["env_steps_per_s"] / max(baseline["env_steps_per_s"], 1e-9), 3),
        "samples_ratio": round(system["samples_per_s"] / max(baseline["samples_per_s"], 1e-9), 3),
        **machine,
        "ideal_fraction": round(system["samples_per_s"] / machine["ideal_samples_per_s"], 3)
        if machine["ideal_samples_per_s"]
        else None,
        "rounds": rounds,
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def ideal(config: Config, reuse: float | None, seconds: float = 3.0) -> dict[str, Any]:
    """The policy's one-core forward and update rates (each timed for `seconds`), and the samples/s all cores would
    train at `reuse`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rates = policy_rates(config, 320, config.training.minibatch_chunks, seconds)
    finally:
        torch.set_num_threads(threads)
    forward, update = rates["forward_rows_per_s"], rates["update_rows_per_s"]
    samples = None if not reuse else reuse * (os.cpu_count() or 1) / (1.0 / forward + reuse / update)
    return {
        "policy_forward_rows_per_s": forward,
        "policy_update_rows_per_s": update,
        "ideal_samples_per_s": None if samples is None else round(samples, 1),
    }


def _medians(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Each numeric figure's median over the repeats (within a dict of figures too: `cpu_cores`)."""
    medians: dict[str, Any] = {}
    for k, v in results[0].items():
        values: list[Any] = [r.get(k) for r in results]
        if isinstance(v, dict) and all(isinstance(x, dict) for x in values):
            medians[k] = _medians(values)
        elif isinstance(v, (int, float)) and all(x is not None for x in values):
            medians[k] = round(float(np.median(values)), 3)
    return medians


def _view(up: UpProcess) -> dict[str, Any]:
    """The tree's /actors view; a tree that stopped answering is an error with the end of its output."""
    try:
        return up.view()
    except OSError as exc:
        state = "running" if up.running else "exited"
        raise FiveActorsError(
            f"the actor system ({state}) did not answer {up.url}/actors: {exc}\n{up.output_tail()}"
        ) from None


def _metrics(view: dict[str, Any], cls: str) -> list[dict[str, Any]]:
    return list(running_metrics(view, cls).values())


def _totals(view: dict[str, Any], config: Config) -> tuple[float, float, float]:
    """(env steps so far, samples trained so far, latest version) summed over the tree's actors."""
    env_steps = sum(float(m.get("game_env_steps", 0.0)) for m in _metrics(view, "GameActor"))
    steps = sum(float(m.get("steps", 0.0)) for m in _metrics(view, "LearnerActor"))
    samples = steps * config.training.minibatch_chunks * config.training.rollout_chunk_steps
    version = max((float(m.get("version", 0.0)) for m in _metrics(view, "ParamServerActor")), default=0.0)
    return env_steps, samples, version


def measure_system(args: argparse.Namespace, config: Config) -> dict[str, Any]:
    """Run `up` in a subprocess and measure it over `args.seconds` once training flows."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-system-") as tmp,
        UpProcess(args.config, args.set or (), Path(tmp) / "run", args.start_timeout) as up,
    ):
        deadline = time.monotonic() + args.start_timeout
        while True:
            view = _view(up)
            env_steps, _, version = _totals(view, config)
            if env_steps > 0 and version >= 1:
                break
            if time.monotonic() > deadline or not up.running:
                raise FiveActorsError(
                    f"the actor system did not start training within {args.start_timeout:g}s:\n{up.output_tail()}"
                )
            time.sleep(1.0)
        started, first, cpu, idle = time.monotonic(), _totals(view, config), up.cpu_seconds(), idle_cpu_seconds()
        staleness: list[float] = []
        while time.monotonic() - started < args.seconds:
            time.sleep(min(2.0, max(0.0, args.seconds - (time.monotonic() - started))))
            view = _view(up)
            staleness += [float(m["staleness_mean"]) for m in _metrics(view, "LearnerActor") if "staleness_mean" in m]
        idle_now, cpu_now, elapsed = idle_cpu_seconds(), up.cpu_seconds(), time.monotonic() - started
        cores = {k: (v - cpu.get(k, 0.0)) / elapsed for k, v in cpu_now.items()}
        last = _totals(view, config)
        inference = _metrics(view, "InferenceActor")
        learners = _metrics(view, "LearnerActor")
    return {
        "env_steps_per_s": round((last[0] - first[0]) / elapsed, 1),
        "samples_per_s": round((last[1] - first[1]) / elapsed, 1),
        "versions": int(last[2] - first[2]),
        "mean_inference_batch": round(float(np.mean([m.get("inference_mean_batch_rows", 0.0) for m in inference])), 1)
        if inference
        else None,
        "p99_inference_latency_ms": round(max(float(m.get("inference_latency_p99_ms") or 0.0) for m in inference), 2)
        if inference
        else None,
        "mean_staleness": round(float(np.mean(staleness)), 3) if staleness else None,
        "sample_reuse": round(float(np.mean([m.get("sample_reuse", 0.0) for m in learners])), 3) if learners else None,
        "game_actors": len(_metrics(view, "GameActor")),
        "learners": len(learners),
        "cpu_cores": {k: round(v, 3) for k, v in sorted(cores.items())},
        "cpu_cores_total": round(sum(cores.values()), 3),
        "idle_cores": None if idle is None or idle_now is None else round((idle_now - idle) / elapsed, 3),
    }


def measure_baseline(config: Config, seconds: float) -> dict[str, Any]:
    """The synchronous baseline on the same game and model, self-play, for `seconds` after one warm-up update."""
    games = config.training.games_per_actor
    env = LaneGame(dataclasses.replace(config.game, games_per_batch=games))
    torch.manual_seed(config.training.seed)
    policy = Policy(ModelSpec.build(env.obs_spec, env.action_spec, config.model)).to(config.model.device)
    loop, chunk_steps = config.baseline, config.training.rollout_chunk_steps
    gamma = config.ppo.gamma(1.0 / config.game.steps_per_second)
    trainer = SyncTrainer(env, policy, config.ppo, loop, chunk_steps, gamma, seed=config.training.seed)
    trainer.update()  # warm-up: first-call costs are not throughput
    length = chunk_steps * loop.rollout_chunks
    updates, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        trainer.update()
        updates += 1
    elapsed = time.monotonic() - started
    return {
        "env_steps_per_s": round(updates * length * games / elapsed, 1),
        "samples_per_s": round(updates * length * env.num_rows * loop.epochs / elapsed, 1),
        "updates": updates,
    }
