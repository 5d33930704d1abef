"""Transport benchmark: node links against a bare aiohttp websocket + msgpack echo, two processes.

One server process runs a Node (a sink and an echo actor) and, on a second port, a bare
aiohttp websocket endpoint that does the same with plain msgpack. This process measures both
in one run over loopback: tell throughput, ask round trip, and 1 MiB float32 array
throughput, and reports medians over repeats beside the bare figure; also the CPU time both
processes spend per tell and per ask round trip, which a busy machine disturbs less than
wall-clock figures. `ratio` is ours as a fraction of the bare speed: ours / bare for
throughputs, bare / ours for latencies and CPU times, so above 1 means faster than bare and
the aim is >= 0.8.

`ask_stages_us` splits our ask round trip into what the actor model adds to the bare one,
each measured in this process on its own, as CPU time (steady on a busy machine): encoding
the ask and its reply, decoding both (envelope, message build, field-type checks), the
mailbox (a local ask: mailbox, the actor's task hop, the reply future); and `links_us`, the
rest of our p50 over the bare p50 (the send batching, the reply's writer hop, the pending-ask
table, the watch an ask takes out, and the processes' wake-ups between them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import time
from typing import Any

import aiohttp
import msgpack
import numpy as np
from aiohttp import web

from five_actors.logs import configure_logging
from five_actors.runtime import wire
from five_actors.runtime.actor import Actor, ActorSystem, message
from five_actors.runtime.config import NodeConfig
from five_actors.runtime.node import Node
from five_actors.runtime.node import run as run_on_uvloop

ARRAY_FLOATS = 1024 * 1024 // 4


@message
class BenchTell:
    """One counted tell."""

    n: int


@message
class BenchArray:
    """One array for the throughput test."""

    data: np.ndarray


@message
class BenchFlush:
    """Asks the sink how many tells it has seen (after every earlier tell on the link) and the
    server's CPU seconds so far."""


@message
class BenchEcho:
    """Echoed back."""

    n: int


class Sink(Actor):
    """Counts what it is told; the Flush reply proves every earlier tell arrived."""

    mailbox_size = 4096

    def __init__(self) -> None:
        self.count = 0

    async def on_bench_tell(self, msg: BenchTell) -> None:
        self.count += 1

    async def on_bench_array(self, msg: BenchArray) -> None:
        self.count += 1

    async def on_bench_flush(self, msg: BenchFlush) -> list[float]:
        return [self.count, time.process_time()]

    async def on_bench_echo(self, msg: BenchEcho) -> BenchEcho:
        return msg


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The benchmark's options."""
    parser.add_argument("--tells", type=int, default=20_000, help="tells per repeat (default 20000)")
    parser.add_argument("--asks", type=int, default=2_000, help="sequential asks per repeat (default 2000)")
    parser.add_argument("--arrays", type=int, default=100, help="1 MiB float32 arrays per repeat (default 100)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats; medians are reported (default 5)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the server process, measure both transports, and return the figures."""
    for name in ("tells", "asks", "arrays", "repeats"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name} must be at least 1")
    configure_logging("bench-client", None, level="warning")  # stderr: stdout is for the one JSON result
    token = secrets.token_hex(16)
    server = subprocess.Popen(
        [sys.executable, "-m", "five_actors.bench.transport", "--serve", token],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ),
    )
    try:
        assert server.stdout is not None
        line = ""
        while not line.startswith("READY "):
            line = server.stdout.readline()
            if not line:
                raise SystemExit(f"benchmark server exited early (code {server.wait()})")
        urls = json.loads(line.removeprefix("READY "))
        return run_on_uvloop(_measure(args, token, urls["node"], urls["bare"]))
    finally:
        server.terminate()
        server.wait()


async def _measure(args: argparse.Namespace, token: str, node_url: str, bare_url: str) -> dict[str, Any]:
    config = NodeConfig(port=0, max_message_bytes=8 * 1024 * 1024)
    node = Node("bench-client", token, config)
    await node.start()
    await node.connect(node_url)
    sink = node.ref("bench-server/sink")
    array = np.random.default_rng(0).standard_normal(ARRAY_FLOATS).astype(np.float32)
    names = ("tell", "tell_cpu", "p50", "p99", "ask_cpu", "array")
    results: dict[str, list[float]] = {f"{k}{side}": [] for k in names for side in ("", "_bare")}
    async with aiohttp.ClientSession() as session:
        bare = await session.ws_connect(f"{bare_url}/bare", max_msg_size=config.max_message_bytes, compress=0)
        for _ in range(args.repeats):
            _record(
                results,
                "",
                await _ours_tells(sink, args.tells),
                await _ours_asks(sink, args.asks),
                await _ours_arrays(sink, array, args.arrays),
            )
            _record(
                results,
                "_bare",
                await _bare_tells(bare, args.tells),
                await _bare_asks(bare, args.asks),
                await _bare_arrays(bare, array, args.arrays),
            )
        await bare.close()
    await node.stop()
    stages = await _ask_stages(args.asks, args.repeats)
    med = {k: statistics.median(v) for k, v in results.items()}
    stages["links_us"] = med["p50"] - med["p50_bare"] - sum(stages.values())
    return {
        "benchmark": "transport",
        "repeats": args.repeats,
        "tell_msgs_per_s": _pair(med["tell"], med["tell_bare"], higher_is_better=True),
        "ask_rtt_p50_us": _pair(med["p50"], med["p50_bare"], higher_is_better=False),
        "ask_rtt_p99_us": _pair(med["p99"], med["p99_bare"], higher_is_better=False),
        "array_1mib_mb_per_s": _pair(med["array"], med["array_bare"], higher_is_better=True),
        "tell_cpu_us_per_msg": _pair(med["tell_cpu"], med["tell_cpu_bare"], higher_is_better=False),
        "ask_cpu_us_per_round_trip": _pair(med["ask_cpu"], med["ask_cpu_bare"], higher_is_better=False),
        "ask_stages_us": {k: round(v, 1) for k, v in stages.items()},
        "params": {"tells": args.tells, "asks": args.asks, "arrays": args.arrays, "array_bytes": ARRAY_FLOATS * 4},
    }


async def _ask_stages(n: int, repeats: int) -> dict[str, float]:
    """Median microseconds per ask round trip of each stage the actor model adds (see the module docstring)."""
    ask, reply = _ask_frames(1)
    system = ActorSystem("bench-stages")
    sink = system.spawn(Sink(), "/sink")
    samples: dict[str, list[float]] = {"encode_us": [], "decode_us": [], "mailbox_us": []}
    for _ in range(repeats):
        start = time.process_time()
        for i in range(n):
            _ask_frames(i)
        samples["encode_us"].append((time.process_time() - start) / n * 1e6)
        start = time.process_time()
        for _ in range(n):
            list(wire.decode_batch(ask))
            list(wire.decode_batch(reply))
        samples["decode_us"].append((time.process_time() - start) / n * 1e6)
        start = time.process_time()
        for i in range(n):
            await sink.ask(BenchEcho(i))
        samples["mailbox_us"].append((time.process_time() - start) / n * 1e6)
    await system.stop(sink)
    return {k: statistics.median(v) for k, v in samples.items()}


def _ask_frames(i: int) -> tuple[bytes, bytes]:
    """The frames of ask `i` to the sink and of its reply."""
    ask = wire.encode("ask", to="bench-server/sink", sender="bench-client/x", id=i, body=BenchEcho(i))
    return ask, wire.encode("reply", id=i, body=BenchEcho(i))


def _record(
    results: dict[str, list[float]], side: str, tells: tuple[float, ...], asks: tuple[float, ...], array: float
) -> None:
    for key, value in zip(("tell", "tell_cpu", "p50", "p99", "ask_cpu", "array"), (*tells, *asks, array)):
        results[key + side].append(value)


def _pair(ours: float, bare: float, higher_is_better: bool) -> dict[str, float]:
    ratio = ours / bare if higher_is_better else bare / ours
    return {"five_actors": round(ours, 1), "bare": round(bare, 1), "ratio": round(ratio, 3)}


async def _ours_tells(sink: Any, n: int) -> tuple[float, float]:
    """(tells/s, CPU us per tell of both processes)."""
    before, server_cpu = await sink.ask(BenchFlush())
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        await sink.tell(BenchTell(i))
    count, server_cpu_after = await sink.ask(BenchFlush(), timeout=120)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert count - before == n, f"sink saw {count - before} of {n} tells"
    return n / elapsed, (cpu + server_cpu_after - server_cpu) / n * 1e6


async def _ours_asks(sink: Any, n: int) -> tuple[float, float, float]:
    """(p50 us, p99 us, CPU us per round trip of both processes)."""
    _, server_cpu = await sink.ask(BenchFlush())
    cpu = time.process_time()
    times = []
    for i in range(n):
        start = time.perf_counter()
        await sink.ask(BenchEcho(i))
        times.append(time.perf_counter() - start)
    cpu = time.process_time() - cpu
    _, server_cpu_after = await sink.ask(BenchFlush())
    return (*_percentiles(times), (cpu + server_cpu_after - server_cpu) / n * 1e6)


async def _ours_arrays(sink: Any, array: np.ndarray, n: int) -> float:
    await sink.ask(BenchFlush())
    start = time.perf_counter()
    for _ in range(n):
        await sink.tell(BenchArray(array))
    await sink.ask(BenchFlush(), timeout=120)
    return n * array.nbytes / (time.perf_counter() - start) / 1e6


async def _bare_call(ws: aiohttp.ClientWebSocketResponse, request: list[Any]) -> Any:
    await ws.send_bytes(msgpack.packb(request))
    return msgpack.unpackb((await ws.receive()).data)


async def _bare_tells(ws: aiohttp.ClientWebSocketResponse, n: int) -> tuple[float, float]:
    before, server_cpu = await _bare_call(ws, ["flush"])
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        await ws.send_bytes(msgpack.packb(["tell", i]))
    count, server_cpu_after = await _bare_call(ws, ["flush"])
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert count - before == n
    return n / elapsed, (cpu + server_cpu_after - server_cpu) / n * 1e6


async def _bare_asks(ws: aiohttp.ClientWebSocketResponse, n: int) -> tuple[float, float, float]:
    _, server_cpu = await _bare_call(ws, ["flush"])
    cpu = time.process_time()
    times = []
    for i in range(n):
        start = time.perf_counter()
        await _bare_call(ws, ["echo", i])
        times.append(time.perf_counter() - start)
    cpu = time.process_time() - cpu
    _, server_cpu_after = await _bare_call(ws, ["flush"])
    return (*_percentiles(times), (cpu + server_cpu_after - server_cpu) / n * 1e6)


async def _bare_arrays(ws: aiohttp.ClientWebSocketResponse, array: np.ndarray, n: int) -> float:
    await _bare_call(ws, ["flush"])
    start = time.perf_counter()
    for _ in range(n):
        await ws.send_bytes(msgpack.packb(["array", array.dtype.str, array.shape, array.tobytes()]))
    await _bare_call(ws, ["flush"])
    return n * array.nbytes / (time.perf_counter() - start) / 1e6


def _percentiles(seconds: list[float]) -> tuple[float, float]:
    us = np.array(seconds) * 1e6
    return float(np.percentile(us, 50)), float(np.percentile(us, 99))


async def _bare_endpoint(request: web.Request) -> web.WebSocketResponse:
    """The baseline: decode each msgpack frame, count tells, echo asks."""
    ws = web.WebSocketResponse(max_msg_size=8 * 1024 * 1024, compress=False)
    await ws.prepare(request)
    count = 0
    async for msg in ws:
        kind, *rest = msgpack.unpackb(msg.data)
        if kind == "tell":
            count += 1
        elif kind == "array":
            np.frombuffer(rest[2], dtype=np.dtype(rest[0])).reshape(rest[1])
            count += 1
        elif kind == "echo":
            await ws.send_bytes(msgpack.packb(rest[0]))
        elif kind == "flush":
            await ws.send_bytes(msgpack.packb([count, time.process_time()]))
    return ws


async def _serve(token: str) -> None:
    node = Node("bench-server", token, NodeConfig(port=0, max_message_bytes=8 * 1024 * 1024))
    await node.start()
    node.system.spawn(Sink(), "/sink")
    bare = web.Application()
    bare.router.add_get("/bare", _bare_endpoint)
    runner = web.AppRunner(bare, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    bare_url = f"ws://127.0.0.1:{runner.addresses[0][1]}"
    sys.stdout.write("READY " + json.dumps({"node": node.url, "bare": bare_url}) + "\n")
    sys.stdout.flush()
    await asyncio.Event().wait()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        configure_logging("bench-server", None, level="warning")  # stderr: stdout is for the READY line
        run_on_uvloop(_serve(sys.argv[2]))
