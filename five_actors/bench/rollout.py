"""`five-actors bench rollout`: GameActors and one InferenceActor in their own OS processes.

This process runs a node with the real ParamServerActor (version 0, no checkpoints) and a
learner sink that counts the Rollouts it is told; one child process runs the InferenceActor,
`--game-actors` more run one GameActor each, all linked over websockets on 127.0.0.1. After a
warm-up (every game actor has shipped a chunk) the figures are measured over `--seconds`:
env steps/s (game steps, all game actors), inference rows per forward, request latency
p50/p99 (ask arrival to reply, as the inference actor sees it), rollout chunks/s received.

`python -m five_actors.bench.rollout worker JOB_JSON` runs one child (inference or game).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import time
from dataclasses import replace
from typing import Any

from five_actors.actors.game import GameActor
from five_actors.actors.inference import InferenceActor
from five_actors.actors.messages import GetStats, Rollout
from five_actors.actors.param_server import ParamServerActor
from five_actors.config import Config, load_config
from five_actors.logs import configure_logging
from five_actors.runtime.actor import Actor
from five_actors.runtime.config import NodeConfig
from five_actors.runtime.node import Node
from five_actors.runtime.node import run as run_on_uvloop

READY = "READY "


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options."""
    parser.add_argument(
        "--config", default="", help="config file or bundled name (default: built-in defaults, small model)"
    )
    parser.add_argument("--game-actors", type=int, default=2, help="GameActor processes (default 2)")
    parser.add_argument("--games", type=int, default=16, help="games per GameActor (default 16)")
    parser.add_argument("--heroes", type=int, default=5, help="heroes per side (default 5)")
    parser.add_argument(
        "--batch-rows", type=int, default=0, help="inference_batch_rows (default: all game actors' rows)"
    )
    parser.add_argument("--deadline-ms", type=float, default=5.0, help="inference_deadline_ms (default 5)")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds after the warm-up (default 10)")


def bench_config(args: argparse.Namespace) -> Config:
    """The run's config: `--config` or defaults with a small model, and the benchmark's overrides."""
    config = load_config(args.config) if args.config else Config()
    if not args.config:
        config = replace(
            config,
            model=replace(config.model, entity_hidden=32, entity_embed=32, core_input=64, lstm_size=64, pointer_key=16),
        )
    rows = args.game_actors * args.games * 2 * args.heroes
    training = replace(
        config.training,
        games_per_actor=args.games,
        inference_batch_rows=args.batch_rows or rows,
        inference_deadline_ms=args.deadline_ms,
    )
    return replace(config, game=replace(config.game, heroes_per_side=args.heroes), training=training)


class LearnerSink(Actor):
    """Counts the Rollouts it is told, in chunks and in chunk steps."""

    def __init__(self) -> None:
        self.rollouts = 0
        self.chunks = 0
        self.sources: set[str] = set()

    async def on_rollout(self, msg: Rollout) -> None:
        self.rollouts += 1
        self.chunks += len(msg.versions)
        self.sources.add(msg.source)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the processes, warm up, measure, stop; returns the figures."""
    return run_on_uvloop(_measure(args, bench_config(args)))


async def _measure(args: argparse.Namespace, config: Config) -> dict[str, Any]:
    configure_logging("head", None, level="warning")
    token = secrets.token_hex(16)
    node = Node("head", token, NodeConfig(port=0))
    await node.start()
    node.system.spawn(ParamServerActor(config=config), "/params")
    sink = LearnerSink()
    node.system.spawn(sink, "/learner")
    config_json = _config_dict(config)
    procs: list[asyncio.subprocess.Process] = []
    try:
        inference_url = await _start(
            procs, {"role": "inference", "node": "inf", "token": token, "connect": [node.url], "config": config_json}
        )
        for i in range(args.game_actors):
            job = {
                "role": "game",
                "node": f"game{i}",
                "seed": i,
                "token": token,
                "connect": [node.url, inference_url],
                "config": config_json,
            }
            await _start(procs, job)
        games = [f"game{i}/game" for i in range(args.game_actors)]
        deadline = time.monotonic() + 300
        while len(sink.sources) < args.game_actors:
            if time.monotonic() > deadline or any(p.returncode is not None for p in procs):
                raise RuntimeError("the game actors did not ship their first chunks (a child exited or 300 s passed)")
            await asyncio.sleep(0.1)
        before = await _stats(node, games)
        chunks_before, started = sink.chunks, time.perf_counter()
        await asyncio.sleep(args.seconds)
        after = await _stats(node, games)
        elapsed = time.perf_counter() - started
    finally:
        for proc in procs:
            proc.kill()
            await proc.wait()
        await node.stop()
    inf0, inf1 = before["inference"], after["inference"]
    forwards = inf1["forwards"] - inf0["forwards"]
    env_steps = sum(after[g]["env_steps"] - before[g]["env_steps"] for g in games)
    return {
        "benchmark": "rollout",
        "game_actors": args.game_actors,
        "games_per_actor": args.games,
        "rows_per_game_actor": args.games * 2 * args.heroes,
        "inference_batch_rows": config.training.inference_batch_rows,
        "inference_deadline_ms": config.training.inference_deadline_ms,
        "lstm_size": config.model.lstm_size,
        "seconds": round(elapsed, 2),
        "env_steps_per_s": round(env_steps / elapsed, 1),
        "samples_per_s": round(env_steps * 2 * args.heroes / elapsed, 1),
        "forwards_per_s": round(forwards / elapsed, 1),
        "mean_inference_batch_rows": round((inf1["rows"] - inf0["rows"]) / max(forwards, 1), 1),
        "latency_p50_ms": round(inf1["latency_p50_ms"], 2),
        "latency_p99_ms": round(inf1["latency_p99_ms"], 2),
        "chunks_per_s": round((sink.chunks - chunks_before) / elapsed, 1),
        "lost_steps": sum(after[g]["lost_steps"] for g in games),
        "chunks_lost": sum(after[g]["chunks_lost"] for g in games),
    }


async def _stats(node: Node, games: list[str]) -> dict[str, dict[str, Any]]:
    addresses = {"inference": "inf/inference", **{g: g for g in games}}
    replies = await asyncio.gather(*(node.ask(a, GetStats(), timeout=30) for a in addresses.values()))
    return dict(zip(addresses, replies, strict=True))


def _config_dict(config: Config) -> dict[str, Any]:
    """The sections the children need, as plain values (they rebuild the same Config)."""
    from dataclasses import asdict

    return {k: asdict(getattr(config, k)) for k in ("game", "model", "ppo", "training")}


async def _start(procs: list[asyncio.subprocess.Process], job: dict[str, Any]) -> str:
    """Start one child; wait (without blocking this node's loop) for its READY line; return its node's URL."""
    command = [sys.executable, "-m", "five_actors.bench.rollout", "worker", json.dumps(job)]
    proc = await asyncio.create_subprocess_exec(*command, stdout=asyncio.subprocess.PIPE)
    procs.append(proc)
    assert proc.stdout is not None
    while line := (await proc.stdout.readline()).decode():
        if line.startswith(READY):
            return str(json.loads(line.removeprefix(READY))["url"])
    raise RuntimeError(f"bench child {job['node']} exited with code {await proc.wait()} before it was ready")


async def _worker(job: dict[str, Any]) -> None:
    """One child: a node linked to the others, running one InferenceActor or one GameActor until killed."""
    from five_actors.config import from_mapping

    configure_logging(job["node"], None, level="warning")
    config = from_mapping(Config, job["config"])
    node = Node(job["node"], job["token"], NodeConfig(port=0))
    await node.start()
    for url in job["connect"]:
        await node.connect(url)
    if job["role"] == "inference":
        actor: Actor = InferenceActor("head/params", config=config)
        path = "/inference"
    else:
        actor = GameActor("inf/inference", ["head/learner"], "head/params", config=config, seed=job["seed"])
        path = "/game"
    node.system.spawn(actor, path)
    print(READY + json.dumps({"url": node.url}), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        from five_actors.cli import keep_freed_memory

        keep_freed_memory()  # as every process of an `up` tree does
        run_on_uvloop(_worker(json.loads(sys.argv[2])))
    else:
        sys.exit("usage: python -m five_actors.bench.rollout worker JOB_JSON")
