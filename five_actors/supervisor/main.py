"""The three processes a tree runs in: the head (`up`), a process child (`node`), a joined host (`join`).

Each is one node: a five_actors.runtime Node with the health routes, a NodeAgent at `/_node`,
logs in `RUN_DIR/logs/NODE.jsonl`, and a clean stop on SIGINT/SIGTERM (or
POST /control/shutdown): the tree's children stopped in reverse, then the node.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import secrets
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TextIO

import orjson
import structlog
from aiohttp import web

from five_actors.config import RUN_CONFIG, Config, from_mapping, read_run_config, write_run_config
from five_actors.envs import check_env
from five_actors.errors import ConfigError, FiveActorsError
from five_actors.logs import configure_logging
from five_actors.runtime.actor import NORMAL_EXITS, Actor
from five_actors.runtime.config import NodeConfig
from five_actors.runtime.node import Node
from five_actors.supervisor import health
from five_actors.supervisor.agent import AGENT_PATH, NodeAgent
from five_actors.supervisor.child import TreeContext
from five_actors.supervisor.config import ChildSpec, SupervisorSpec, check_importable, import_class
from five_actors.supervisor.hosts import REGISTRY_PATH, HostAgent, HostRegistry
from five_actors.supervisor.processes import TOKEN_ENV, lower_priority, report
from five_actors.supervisor.progress import ProgressLine
from five_actors.supervisor.sizing import size_tree
from five_actors.supervisor.tree import Supervisor
from five_actors.supervisor.watchdog import watch

log = structlog.get_logger("five_actors.supervisor")

ROOT_PATH = "/root"
"""The path of the root supervisor on the head node."""
HEAD_NODE = "head"
"""The node id of the process `five-actors up` runs in."""
PLAIN_LINE_EVERY_S = 10.0
"""Seconds between live lines when stdout is not a terminal (CI, nohup, a log file); a terminal repaints every
second."""


def default_run_dir(name: str) -> Path:
    """`runs/<UTC time>-<name>/` under the current directory."""
    return Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{name}"


def write_token(run_dir: Path) -> str:
    """A fresh random cluster token in RUN_DIR/token, readable by this user only."""
    token = secrets.token_urlsafe(32)
    path = run_dir / "token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)
    return token


def read_token(path: Path) -> str:
    """The cluster token from a token file."""
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"--token-file {path}: cannot read it: {exc.strerror}") from None
    if not token:
        raise ConfigError(f"--token-file {path}: the file is empty")
    return token


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def resolve_run_config(config: Config) -> Config:
    """The config as the run uses it: a learner rendezvous port of 0 becomes a free port."""
    training = config.training
    if training.rendezvous_port == 0:
        training = dataclasses.replace(training, rendezvous_port=free_port(training.rendezvous_host))
    return dataclasses.replace(config, training=training)


def _shutdown_timeout(spec: SupervisorSpec) -> float:
    """Long enough to stop every child of `spec` one after the other, with their subtrees."""
    return sum(c.shutdown_timeout + (_shutdown_timeout(c) if c.children else 0.0) for c in spec.children) + 5.0


async def _start_node(
    node_id: str, token: str, node_config: NodeConfig, agent_factory: Any, extra: HeadExtra | None = None
) -> tuple[Node, NodeAgent, asyncio.Event]:
    node = Node(node_id, token, node_config)
    agent = agent_factory(node)
    shutdown = asyncio.Event()
    health.install(node.app, agent, shutdown)
    if extra is not None:
        extra.install(node.app)
    try:
        await node.start()
    except OSError as exc:
        raise ConfigError(f"node.host/node.port: {exc.strerror} (use --port 0 for any free port)") from None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, shutdown.set)
    log.info("node_started", url=node.url)
    return node, agent, shutdown


async def _stop_node(node: Node) -> None:
    await node.stop()
    log.info("node_stopped")


async def _first(*aws: Any) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


class HeadExtra(Protocol):
    """Something more the head serves (the dashboard): routes on its app, and every view the live line sees."""

    def install(self, app: web.Application) -> None:
        """Add routes to the head's app (before it starts)."""

    def observe(self, view: dict[str, Any], elapsed: float) -> None:
        """Take one view of the tree, `elapsed` seconds into the run."""

    def close(self) -> None:
        """The head is stopping: finish what is written."""


async def up(
    config: Config,
    run_dir: Path,
    host: str | None,
    port: int | None,
    duration: float | None,
    out: TextIO,
    progress: Callable[[dict[str, Any], float], str] | None = None,
    extra: HeadExtra | None = None,
) -> int:
    """Run the head: the root supervisor and its tree, HTTP, a live progress line, until stopped.

    `progress` builds the live line from the tree's view and the seconds elapsed (default: ProgressLine);
    `extra` (the dashboard) adds routes to the head's app and sees the same views.
    """
    config = dataclasses.replace(config, tree=size_tree(config.tree, HEAD_NODE, ROOT_PATH))
    check_importable(config.tree)
    check_env(config.env)  # an unknown environment or unsupported space stops the run here (exit 2), not in a child
    run_dir.mkdir(parents=True, exist_ok=True)
    token = write_token(run_dir)
    config = resolve_run_config(config)
    write_run_config(config, run_dir)
    configure_logging(HEAD_NODE, run_dir / "logs")
    try:
        node_config = dataclasses.replace(
            config.node,
            host=config.node.host if host is None else host,
            port=config.node.port if port is None else port,
        )
    except ValueError as exc:
        raise ConfigError(f"--host/--port: {exc}") from None
    out.write(f"run dir: {run_dir}\n")
    registry = HostRegistry()
    node, agent, shutdown = await _start_node(HEAD_NODE, token, node_config, NodeAgent, extra)
    node.system.spawn(agent, AGENT_PATH)
    out.write(f"serving http://{node_config.host}:{node.port} (/health /actors /metrics), links at {node.url}/ws\n")
    if extra is not None:
        out.write(f"dashboard: http://{node_config.host}:{node.port}/\n")
    out.flush()
    node.system.spawn(registry, REGISTRY_PATH)
    context = TreeContext(node.system, run_dir, node, hosts=registry, config=config)
    root = node.system.spawn(Supervisor(config.tree, context), ROOT_PATH)
    started = asyncio.ensure_future(node.system.wait_started(root))
    ticker = asyncio.get_running_loop().create_task(_print_progress(agent, out, progress or ProgressLine(), extra))
    stall_s, restart = config.training.stall_s, config.training.stall_restart
    watchdog = asyncio.get_running_loop().create_task(watch(agent, node.system, stall_s, restart)) if stall_s else None
    root_exit = asyncio.ensure_future(node.system.wait(root))
    deadline = asyncio.sleep(duration) if duration is not None else asyncio.Event().wait()
    try:
        await _first(shutdown.wait(), asyncio.shield(root_exit), deadline)
    finally:
        ticker.cancel()
        if watchdog is not None:
            watchdog.cancel()
        if extra is not None:
            extra.close()
        out.write("\n")
    if root_exit.done():
        reason = root_exit.result()
        await _stop_node(node)
        if reason in NORMAL_EXITS:
            return 0
        sys.stderr.write(f"five-actors: the root supervisor exited abnormally: {reason}\n")
        return 1
    out.write("stopping: children in reverse order...\n")
    out.flush()
    if started.done():
        await node.system.stop(root, _shutdown_timeout(config.tree))
    else:
        node.system.kill(root)  # still starting (waiting for a host, say): cut the start short
        await root_exit
    await _stop_node(node)
    out.write("stopped cleanly\n")
    return 0


async def _print_progress(
    agent: NodeAgent, out: TextIO, progress_line: Callable[[dict[str, Any], float], str], extra: HeadExtra | None
) -> None:
    """Every second: a view for `extra`, and the live line (repainted on a terminal, else one every
    PLAIN_LINE_EVERY_S)."""
    started = time.monotonic()
    live = out.isatty()
    written = -PLAIN_LINE_EVERY_S
    while True:
        await asyncio.sleep(1.0)
        try:
            view = await agent.view()
            elapsed = time.monotonic() - started
            if extra is not None:
                extra.observe(view, elapsed)
            line = progress_line(view, elapsed)
        except FiveActorsError:
            continue  # the view is incomplete while a child restarts; the next second will do
        except Exception:  # a broken line must not end the live line for the run
            log.exception("progress_line_failed")
            continue
        if live:
            out.write(f"\r{line}\x1b[K")
        elif elapsed - written >= PLAIN_LINE_EVERY_S:
            out.write(f"{line}\n")
            written = elapsed
        out.flush()


async def child_node(
    node_id: str,
    path: str,
    spec_json: str,
    parent: str,
    run_dir: str,
    log_level: str,
    host: str = "127.0.0.1",
    advertise_host: str = "",
) -> int:
    """Run a process child: its own node on `host` (advertised as `advertise_host`), linked to `parent`,
    hosting one actor or subtree at `path`."""
    configure_logging(node_id, Path(run_dir) / "logs" if run_dir else None, log_level)
    token = os.environ.get(TOKEN_ENV, "")
    spec = from_mapping(ChildSpec, orjson.loads(spec_json), path)
    if spec.nice:
        lower_priority(spec.nice)
    config = read_run_config(Path(run_dir)) if run_dir and (Path(run_dir) / RUN_CONFIG).is_file() else None
    # The run's [node] settings (link limits, heartbeat) hold for its process children too; each listens on a free port.
    node_config = dataclasses.replace(
        config.node if config else NodeConfig(), host=host, advertise_host=advertise_host, port=0
    )
    node, agent, shutdown = await _start_node(node_id, token, node_config, NodeAgent)
    node.system.spawn(agent, AGENT_PATH)
    try:
        await node.connect(parent)
        context = TreeContext(node.system, Path(run_dir) if run_dir else None, node, log_level=log_level, config=config)
        hosted: Actor = (
            Supervisor(spec, context) if spec.is_tree else import_class(spec.actor, f"{spec.id}.actor")(**spec.args)
        )
        hosted.context = context  # before it starts, as in the parent's supervisor
        ref = node.system.spawn(hosted, path)
        reason = await node.system.wait_started(ref)
    except Exception as exc:  # noqa: BLE001 - whatever stops the start is the child's exit reason
        reason = f"{type(exc).__name__}: {exc}"
        ref = None
    if reason is None and ref is not None:
        report(ready={"node": node_id, "url": node.url, "pid": os.getpid()})
        await _first(shutdown.wait(), node.system.wait(ref), _stdin_closed())
        if node.system.is_alive(path):
            reason = await node.system.stop(ref, spec.shutdown_timeout * 0.8)
        else:
            reason = await node.system.wait(ref)
    report(exit=reason)
    await _stop_node(node)
    return 0 if reason in NORMAL_EXITS else 1


async def _stdin_closed() -> None:
    """Returns when stdin reaches EOF: the parent holding the pipe has died."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.read(4096):
        pass


async def join(
    url: str, token: str, name: str | None, host: str, port: int, run_dir: Path, out: TextIO, advertise_host: str = ""
) -> int:
    """Run a host supervisor that joins the head at `url` and runs the subtrees it assigns.

    It listens on `host` and tells peers to reach it at `advertise_host` (default: `host`, or the
    hostname for a wildcard); its process children do the same on ports of their own.
    """
    name = name or socket.gethostname()
    run_dir.mkdir(parents=True, exist_ok=True)
    configure_logging(name, run_dir / "logs")

    def make_agent(node: Node) -> HostAgent:
        return HostAgent(node, "", name, TreeContext(node.system, run_dir, node))  # the head's id is known once linked

    node_config = NodeConfig(host=host, port=port, advertise_host=advertise_host)
    node, agent, shutdown = await _start_node(name, token, node_config, make_agent)
    try:
        assert isinstance(agent, HostAgent)
        agent.head = await node.connect(url)
        node.system.spawn(agent, AGENT_PATH)
        out.write(
            f"joined {agent.head} at {url} as {name}; serving http://{host}:{node.port}, links at {node.url}/ws, run "
            f"dir {run_dir}\n"
        )
        out.flush()
        await shutdown.wait()
        for path, sub in reversed([(c.path, c.actor) for c in node.system.cells() if isinstance(c.actor, Supervisor)]):
            await node.system.stop(path, _shutdown_timeout(sub.spec))
    finally:
        await _stop_node(node)
    return 0
