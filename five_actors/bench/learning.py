"""`five-actors bench learner`: learner samples/s and the cost of the gradient allreduce.

Learners in real OS processes (a real gloo group on 127.0.0.1 for a world of 2) train on
synthetic Rollout chunks of the right shapes, as fast as they can, for a few seconds each;
the figures are optimizer steps, samples (chunk steps) per second, and the milliseconds each
step spends in the allreduce.

`python -m five_actors.bench.learning worker SPEC_JSON` runs one learner rank; the tests use it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from five_actors.actors.messages import Rollout
from five_actors.actors.params import model_spec, state_arrays
from five_actors.config import Config
from five_actors.game.config import GameConfig
from five_actors.model.config import ModelConfig
from five_actors.model.spec import ModelSpec


def tiny_config(**training: Any) -> Config:
    """A small lane game and model, with `training` settings overridden (tests and the bench)."""
    config = Config(
        game=GameConfig(games_per_batch=1, heroes_per_side=2, creep_slots=4),
        model=ModelConfig(entity_hidden=16, entity_embed=16, core_input=32, lstm_size=32, pointer_key=8),
    )
    return replace(config, training=replace(config.training, **training))


def synthetic_rollout(
    spec: ModelSpec, chunk_steps: int, chunks: int, version: int, seed: int, source: str = "synthetic"
) -> Rollout:
    """A Rollout of `chunks` random chunks that are valid for `spec` (every choice legal)."""
    rng = np.random.default_rng(seed)
    t, b = chunk_steps, chunks
    obs = rng.normal(size=(t, b, spec.obs.size)).astype(np.float32)
    for block in spec.obs.blocks:
        if block.slots > 1:
            start = spec.obs.offset(block.name)
            obs[..., start : start + block.size : block.width] = rng.integers(0, 2, size=(t, b, block.slots))
    types = len(spec.actions.types)
    masks = {
        "type": np.ones((t, b, types), bool),
        **{h.name: np.ones((t, b, types, h.size), bool) for h in spec.actions.heads},
    }
    sizes = [types] + [h.size for h in spec.actions.heads]
    actions = np.stack([rng.integers(0, n, size=(t, b)) for n in sizes], axis=-1).astype(np.int64)

    def floats(scale: float = 1.0) -> np.ndarray:
        return (rng.normal(size=(t, b)) * scale).astype(np.float32)

    dones = rng.random((t, b)) < 0.05
    starts = np.zeros((t, b), bool)
    starts[1:] = dones[:-1]
    return Rollout(
        source=source,
        arch=spec.hash,
        versions=np.full(b, version, np.int64),
        obs=obs,
        masks=masks,
        actions=actions,
        logp=-np.abs(floats(2.0)),
        values=floats(),
        rewards=floats(0.1),
        dones=dones,
        starts=starts,
        advantages=floats(),
        returns=floats(),
        h=(rng.normal(size=(b, spec.lstm_size)) * 0.1).astype(np.float32),
        c=(rng.normal(size=(b, spec.lstm_size)) * 0.1).astype(np.float32),
        made_at=time.time(),
    )


async def run_worker(job: dict[str, Any]) -> None:
    """One learner rank: feed it rollouts, wait for `steps` steps (or `seconds`), write its results to `out`."""
    from five_actors.actors.learner import LearnerActor
    from five_actors.runtime.actor import ActorSystem

    config = tiny_config(**job.get("training", {}))
    config = replace(config, ppo=replace(config.ppo, **job.get("ppo", {})))
    spec = model_spec(config)
    system = ActorSystem(f"learner{job['rank']}")
    learner = LearnerActor(
        job["rank"], job["world_size"], master_addr="127.0.0.1", master_port=job.get("port", 0), config=config
    )
    ref = system.spawn(learner, "/learner")
    reason = await system.wait_started(ref)
    if reason is not None:
        raise RuntimeError(f"the learner did not start: {reason}")
    for seed in job["rollout_seeds"]:
        await ref.tell(
            synthetic_rollout(spec, config.training.rollout_chunk_steps, job["chunks"], job.get("version", 0), seed)
        )
    for bad in job.get("bad_rollouts", []):
        await ref.tell(_bad_rollout(spec, config, bad))
    started = time.perf_counter()
    deadline = started + job.get("seconds", 60.0)
    first_step = None
    trainer = learner.trainer
    while trainer.steps < job.get("steps", 1 << 60) and time.perf_counter() < deadline and system.is_alive("/learner"):
        if first_step is None and trainer.steps > 0:
            # The clock starts at the first step, when every rank has joined: start-up skew is not throughput.
            first_step = (time.perf_counter(), trainer.steps)
            deadline = first_step[0] + job.get("seconds", 60.0)
        await asyncio.sleep(0.01)
    first_step = first_step or (started, 0)
    elapsed, steps_timed = time.perf_counter() - first_step[0], trainer.steps - first_step[1]
    alive = system.is_alive("/learner")
    await system.stop(ref, timeout=10.0)  # its last round has run: nothing changes the model any more
    result = _snapshot(learner)
    result.update(elapsed_s=elapsed, steps_timed=steps_timed, alive=alive)
    out = Path(job["out"])
    np.savez(
        out.with_suffix(".npz"),
        **{f"param/{k}": v for k, v in result.pop("state").items()},
        **{f"grad/{k}": v for k, v in result.pop("grads").items()},
    )
    out.with_suffix(".json").write_text(json.dumps(result))


def _snapshot(learner: Any) -> dict[str, Any]:
    policy = learner.trainer.policy
    grads = {n: p.grad.detach().cpu().numpy().copy() for n, p in policy.named_parameters() if p.grad is not None}
    return {"state": state_arrays(policy), "grads": grads, "stats": learner.stats()}


def _bad_rollout(spec: ModelSpec, config: Config, kind: str) -> Rollout:
    good = synthetic_rollout(spec, config.training.rollout_chunk_steps, 2, 0, 99, source=f"bad-{kind}")
    if kind == "arch":
        return replace(good, arch="0" * 16)
    return replace(good, obs=good.obs[..., :-1])


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_world(jobs: list[dict[str, Any]], directory: Path, timeout: float = 120.0) -> list[dict[str, Any]]:
    """Run one worker process per job (ranks of one world) and return each rank's results."""
    procs = []
    for job in jobs:
        job = {**job, "out": str(directory / f"rank{job['rank']}")}
        procs.append(subprocess.Popen([sys.executable, "-m", "five_actors.bench.learning", "worker", json.dumps(job)]))
    try:
        for proc in procs:
            if proc.wait(timeout) != 0:
                raise RuntimeError(f"learner worker exited with code {proc.returncode}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    results = []
    for job in jobs:
        base = directory / f"rank{job['rank']}"
        result = json.loads(base.with_suffix(".json").read_text())
        with np.load(base.with_suffix(".npz")) as arrays:
            result["params"] = {k.removeprefix("param/"): arrays[k] for k in arrays.files if k.startswith("param/")}
            result["grads"] = {k.removeprefix("grad/"): arrays[k] for k in arrays.files if k.startswith("grad/")}
        results.append(result)
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options."""
    parser.add_argument("--seconds", type=float, default=5.0, help="training time per world size (default 5)")
    parser.add_argument(
        "--minibatch-chunks", type=int, default=16, help="chunks of 16 steps per minibatch (default 16)"
    )
    parser.add_argument("--worlds", default="1,2", help="learner world sizes to measure, comma-separated (default 1,2)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Learners of each world size train on synthetic chunks for `seconds`; steps, samples/s, allreduce cost."""
    chunks = args.minibatch_chunks
    training = {"minibatch_chunks": chunks, "buffer_chunks": 4 * chunks, "max_sample_reuse": 1e9, "publish_every": 1000}
    report: dict[str, Any] = {
        "benchmark": "learner",
        "minibatch_chunks": chunks,
        "chunk_steps": 16,
        "seconds": args.seconds,
        "model": "tiny (lstm 32)",
        "device": "cpu",
    }
    for world in (int(w) for w in args.worlds.split(",")):
        port = free_port()
        jobs = [
            {
                "rank": r,
                "world_size": world,
                "port": port,
                "training": training,
                "chunks": 4 * chunks,
                "rollout_seeds": [r],
                "seconds": args.seconds,
            }
            for r in range(world)
        ]
        with tempfile.TemporaryDirectory() as tmp:
            results = run_world(jobs, Path(tmp), timeout=args.seconds + 120)
        stats = results[0]["stats"]
        report[f"world_{world}"] = {
            "steps_per_rank": [r["stats"]["steps"] for r in results],
            "samples_per_s": round(sum(r["steps_timed"] * chunks * 16 / r["elapsed_s"] for r in results), 1),
            "step_ms_mean": stats["step_ms_mean"],
            "allreduce_ms_mean": stats["allreduce_ms_mean"],
            "allreduce_share": stats["allreduce_share"],
        }
    return report


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        asyncio.run(run_worker(json.loads(sys.argv[2])))
        sys.stdout.flush()
        # The results are written. A learner whose last round timed out may leave its torch thread inside
        # a gloo collective, and interpreter teardown would then abort: skip it.
        os._exit(0)
    else:
        sys.exit("usage: python -m five_actors.bench.learning worker JOB_JSON")
