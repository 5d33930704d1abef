"""A `five-actors up` subprocess driven by a benchmark: started, read through /actors, stopped.

The benchmarks that measure the real actor system (`bench system`, `bench surgery`) start the
tree exactly as a user would, read its counters from `GET /actors` and send control requests
(`POST /surgery`) with the run's cluster token.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from five_actors.errors import FiveActorsError
from five_actors.supervisor.processes import stop_with_parent


class UpProcess:
    """`five-actors up --config CONFIG --set ... --port 0 --run-dir RUN_DIR` as a context manager.

    Entering starts it and waits up to `address_timeout` seconds for its HTTP address (imports
    alone take tens of seconds on a busy machine); leaving stops it with SIGTERM (its clean
    stop: final checkpoint, logs flushed), killing it if that takes over `stop_timeout` seconds.
    """

    def __init__(
        self,
        config: str,
        overrides: Sequence[str],
        run_dir: Path,
        address_timeout: float = 60.0,
        stop_timeout: float = 120.0,
    ) -> None:
        self.config = config
        self.overrides = list(overrides)
        self.run_dir = run_dir
        self.address_timeout = address_timeout
        self.stop_timeout = stop_timeout
        self.out_path = run_dir.parent / f"{run_dir.name}.out"
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> UpProcess:
        command = [
            sys.executable,
            "-m",
            "five_actors",
            "up",
            "--config",
            self.config,
            "--port",
            "0",
            "--run-dir",
            str(self.run_dir),
        ]
        command += [f"--set={s}" for s in self.overrides]
        self.run_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.out_path, "wb") as out:
            self._proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, preexec_fn=stop_with_parent)
        try:
            self.url = self._wait_for_url(self.address_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds so far of the tree's processes (`tree_cpu_seconds`)."""
        return tree_cpu_seconds(self._proc.pid) if self._proc is not None else {}

    @property
    def running(self) -> bool:
        """Whether the process is still alive."""
        return self._proc is not None and self._proc.poll() is None

    def output_tail(self, chars: int = 2000) -> str:
        """The end of what `up` printed (its live line, or the error that stopped it)."""
        return self.out_path.read_text(errors="replace")[-chars:]

    def _wait_for_url(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.out_path.read_text(errors="replace").splitlines():
                if line.startswith("serving http://"):
                    return line.split()[1]
            if not self.running:
                raise FiveActorsError(
                    f"`up` exited {self._proc.returncode if self._proc else None}:\n{self.output_tail()}"
                )
            time.sleep(0.2)
        raise FiveActorsError(f"`up` did not print its address within {timeout:g}s")

    def view(self) -> dict[str, Any]:
        """The tree as `GET /actors` shows it."""
        with urllib.request.urlopen(f"{self.url}/actors", timeout=30) as response:
            return dict(orjson.loads(response.read()))

    def post(self, route: str, body: dict[str, Any], timeout: float = 660.0) -> tuple[int, dict[str, Any]]:
        """POST `body` as JSON to `route` with the run's cluster token: (HTTP status, the JSON answer)."""
        token = (self.run_dir / "token").read_text().strip()
        request = urllib.request.Request(
            f"{self.url}{route}",
            data=orjson.dumps(body),
            method="POST",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, dict(orjson.loads(response.read()))
        except urllib.error.HTTPError as exc:
            return exc.code, dict(orjson.loads(exc.read() or b"{}"))

    def stop(self) -> None:
        """SIGTERM and wait for the clean stop; kill after `stop_timeout` seconds."""
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(self.stop_timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def running_metrics(view: dict[str, Any], cls: str) -> dict[str, dict[str, Any]]:
    """Path -> `status.metrics` of every running actor of class `cls` in a /actors view."""
    return {
        a["path"]: dict((a.get("status") or {}).get("metrics") or {})
        for a in view["actors"]
        if a.get("class") == cls and a.get("state") == "running"
    }


def tree_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds (user and system) so far of the process `pid`, a `five-actors up`, and of every process under it,
    by what each runs: "up" for the head (its supervisors, the parameter server, HTTP), the hosted actor's path
    (`/root/learners/learner-0`) for a process child, a child's own children folded into it. Read from Linux's /proc;
    empty elsewhere."""
    if not Path("/proc/self/stat").exists():
        return {}
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = defaultdict(list)
    cpu: dict[int, float] = {}
    paths: dict[int, str] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # exited while read, or not ours to read
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ... utime is the 12th
        process = int(entry.name)
        children[int(fields[1])].append(process)
        cpu[process] = (int(fields[11]) + int(fields[12])) / ticks
        if b"--path" in args[:-1]:
            paths[process] = args[args.index(b"--path") + 1].decode(errors="replace")
    totals: dict[str, float] = {}
    todo = [(pid, "up")]
    while todo:
        process, label = todo.pop()
        label = paths.get(process, label)
        totals[label] = totals.get(label, 0.0) + cpu.get(process, 0.0)
        todo += [(child, label) for child in children[process]]
    return totals


def idle_cpu_seconds() -> float | None:
    """CPU seconds the whole machine has spent idle (or waiting on I/O) since it started, every core summed; None
    where there is no Linux /proc/stat."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")  # "cpu user nice system idle iowait ..."
