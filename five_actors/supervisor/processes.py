"""OS-process children: a child that runs in its own node, started as a new Python process.

The parent starts `python -m five_actors node --parent URL --host H ...` (a hidden command; the
child listens on the parent's interface H and advertises the parent's address) with the
cluster token in the environment and, for a `cuda:N` device, CUDA_VISIBLE_DEVICES=N set before
the child imports anything (the child then sees that GPU as `cuda:0`; `cpu` hides every GPU).
The child starts its node, links back to the parent's node, starts the hosted actor or
subtree at the child's path, and reports on its stdout, one JSON line each:

    {"ready": {"node": ..., "url": ..., "pid": ...}}    once the hosted actor runs
    {"exit": "REASON"}                                  when the hosted actor has exited

The child's exit is the process's exit (whatever killed it, `kill -9` included): the reason is
the reported one, else "killed by SIGKILL" or "exit code N". A child whose link is lost while
its process lives on (hung, stopped) is killed after LINK_LOST_GRACE seconds, with the reason
"link_lost". Stopping it is SIGTERM, up to the shutdown timeout, then SIGKILL. The child watches its stdin: when the
parent dies the pipe
closes and the child shuts down, so no process outlives its supervisor.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import structlog

from five_actors.errors import SupervisorError
from five_actors.supervisor.child import Incarnation, TreeContext
from five_actors.supervisor.config import ChildSpec

log = structlog.get_logger("five_actors.supervisor")

TOKEN_ENV = "FIVE_ACTORS_TOKEN"
"""The environment variable carrying the cluster token to a child (never its command line)."""
DEVICE_ENV = "FIVE_ACTORS_DEVICE"
"""The torch device a child process should use, as the child sees it (`cpu` or `cuda:0`)."""
LINK_LOST_GRACE = 2.0
"""Seconds a child's process may take to exit on its own after its link is lost, before it is killed."""


def current_device(default: str = "cpu") -> str:
    """The torch device this process was given by its supervisor (`default` when started otherwise): an actor's
    process child's `device` pin wins over `model.device`."""
    return os.environ.get(DEVICE_ENV) or default


def child_env(device: str, token: str) -> dict[str, str]:
    """The environment of a child process pinned to `device`."""
    env = dict(os.environ)
    env[TOKEN_ENV] = token
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
        env[DEVICE_ENV] = "cpu"
    elif device.startswith("cuda:"):
        env["CUDA_VISIBLE_DEVICES"] = device.removeprefix("cuda:")
        env[DEVICE_ENV] = "cuda:0"
    else:
        env[DEVICE_ENV] = "cuda"
    return env


def lower_priority(nice: int) -> None:
    """Run this process (a process child, started as a session of its own) `nice` steps below its parent.

    With Linux's autogroup scheduling (on by default on desktops and many VMs) the CPU is shared
    fairly between sessions first, and a process's own nice value only ranks it inside its
    session: the session's autogroup must be lowered too, which is safe here because the child
    leads a session of its own (its children, the only others in it, should run lower too).
    """
    os.nice(nice)
    if os.getsid(0) == os.getpid():
        with contextlib.suppress(OSError):  # no autogroup scheduling on this kernel: os.nice was enough
            Path("/proc/self/autogroup").write_text(f"{nice}\n")


def stop_with_parent() -> None:
    """For `subprocess.Popen(preexec_fn=...)`: SIGTERM the new process when the one that started it dies.

    For commands that do not watch a pipe from their parent (`five-actors up` started by a
    benchmark or a test): killing the parent, even with SIGKILL, still stops the tree cleanly.
    Linux only (prctl PR_SET_PDEATHSIG); elsewhere a no-op. The signal fires when the thread
    that started the process exits, so start such processes from a long-lived thread.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)


def child_node_id(parent_node: str, path: str) -> str:
    """The node id of the process child at `path` of `parent_node`: unique across the tree."""
    return parent_node + path.replace("/", ".")


def _exit_reason(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-returncode).name}"
        return f"killed by signal {-returncode}"
    return "normal" if returncode == 0 else f"exit code {returncode}"


class ProcessIncarnation(Incarnation):
    """A child in its own OS process and node on this host."""

    def __init__(self, spec: ChildSpec, path: str, context: TreeContext) -> None:
        super().__init__(spec, path)
        if context.node is None:
            raise SupervisorError(
                f"child {spec.id!r} is a process child, but this tree runs without a node to link it to"
            )
        self.context = context
        self.node_id = child_node_id(context.system.node_id, path)
        self.proc: asyncio.subprocess.Process | None = None
        self.url: str | None = None
        self._reported: str | None = None
        self._killed = False
        self._watcher: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return f"{self.node_id}{self.path}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def node(self) -> str:
        return self.node_id

    def command(self) -> list[str]:
        """The child's command line (the token travels in its environment).

        The child listens on its parent's interface and advertises its parent's address: it runs
        on the same machine, so whoever reaches the parent reaches the child (on its own port).
        """
        spec = orjson.dumps(dataclasses.asdict(self.spec)).decode()
        run_dir = str(self.context.run_dir) if self.context.run_dir else ""
        parent = self.context.node
        return [
            sys.executable,
            "-m",
            "five_actors",
            "node",
            "--node-id",
            self.node_id,
            "--path",
            self.path,
            "--spec",
            spec,
            "--parent",
            parent.url,
            "--run-dir",
            run_dir,
            "--log-level",
            self.context.log_level,
            "--host",
            parent.config.host,
            "--advertise-host",
            urlsplit(parent.url).hostname or "",
        ]

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.command(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=child_env(self.spec.device, self.context.node.token),
            start_new_session=True,  # a Ctrl-C in the terminal reaches the parent, which stops children in order
        )
        try:
            ready = await asyncio.wait_for(self._read_until_ready(), self.spec.start_timeout)
        except TimeoutError:
            self.kill()
            await self.proc.wait()
            raise SupervisorError(
                f"process child {self.spec.id!r} did not report ready within {self.spec.start_timeout:g}s"
            ) from None
        if ready is None:
            returncode = await self.proc.wait()
            self._exit(self._reported or _exit_reason(returncode))
            return
        self.url = ready.get("url")
        self._watcher = asyncio.get_running_loop().create_task(self._watch(), name=f"process:{self.node_id}")
        self.context.system.watch_address(self.address, self._on_down)

    def _on_down(self, reason: str) -> None:
        # Other reasons arrive with the process's own exit report; only a lost link needs acting on.
        if reason == "link_lost" and not self.exited.done():
            task = asyncio.get_running_loop().create_task(self._kill_if_still_running())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _kill_if_still_running(self) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(self.exited), LINK_LOST_GRACE)
        except TimeoutError:
            log.warning("child_link_lost", child=self.spec.id, pid=self.pid)
            self._reported = "link_lost"
            self.kill()

    async def _read_line(self) -> dict[str, Any] | None:
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                return None
            try:
                report = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a library printed to stdout; only our JSON reports matter
            if isinstance(report, dict):
                if "exit" in report:
                    self._reported = str(report["exit"])
                return report

    async def _read_until_ready(self) -> dict[str, Any] | None:
        while (report := await self._read_line()) is not None:
            if "ready" in report:
                return dict(report["ready"])
        return None

    async def _watch(self) -> None:
        assert self.proc is not None
        while await self._read_line() is not None:
            pass
        returncode = await self.proc.wait()
        if self._reported is not None and returncode < 0 and not self._killed:
            # It reported its exit, then a signal ended it while the interpreter shut down (an abort from C++, say).
            log.warning(
                "child_exit_unclean",
                child=self.spec.id,
                pid=self.proc.pid,
                reported=self._reported,
                exit=_exit_reason(returncode),
            )
        self._exit(self._reported or _exit_reason(returncode))

    async def stop(self, timeout: float) -> str:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), timeout)
            except TimeoutError:
                log.warning("child_shutdown_timeout", child=self.spec.id, pid=self.proc.pid, timeout=timeout)
                self.kill()
            await self.proc.wait()
        if self._watcher is not None:
            await self._watcher
        else:
            self._exit("shutdown")
        return await asyncio.shield(self.exited)

    def kill(self) -> None:
        self._killed = True
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "url": self.url}


def report(**fields: Any) -> None:
    """Write one JSON report line for the parent on stdout (see the module docstring)."""
    sys.stdout.write(orjson.dumps(fields).decode() + "\n")
    sys.stdout.flush()
