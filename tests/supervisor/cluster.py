"""Running real `five-actors` processes in tests: start, read their address, query HTTP, stop."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from five_actors.supervisor.processes import stop_with_parent

REPO = Path(__file__).resolve().parents[2]

REMOTE = """
[[tree.children]]
id = "remote"
kind = "supervisor"
max_restarts = 100
max_seconds = 60.0
backoff = 0.5

[[tree.children.children]]
id = "worker"
kind = "host"
start_timeout = 3600.0

[[tree.children.children.children]]
id = "game-1"
kind = "actor"
actor = "five_actors.actors.game:GameActor"
args.inference = "head.root.inference/root/inference"
args.learners = ["head.root.learners.learner-0/root/learners/learner-0"]
args.params = "head/root/params"
"""
"""conf/smoke.toml's tree plus this: a GameActor on a joined host named `worker`, training the head's learner."""


class Proc:
    """A `python -m five_actors ...` process whose stdout and stderr go to files in `where`.

    `prefix` runs it through another command (`ip netns exec NS`)."""

    def __init__(self, args: list[str], where: Path, name: str, prefix: list[str] | None = None) -> None:
        self.out_path = where / f"{name}.out"
        self.err_path = where / f"{name}.err"
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            # A test process killed mid-test (a timeout) takes its `up` tree with it.
            self.proc = subprocess.Popen(
                [*(prefix or []), sys.executable, "-m", "five_actors", *args],
                cwd=REPO,
                stdout=out,
                stderr=err,
                env=env,
                preexec_fn=stop_with_parent,
            )

    @property
    def out(self) -> str:
        return self.out_path.read_text()

    @property
    def err(self) -> str:
        return self.err_path.read_text()

    def wait_for_output(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        """Wait until stdout matches `pattern`; fails early if the process exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.out)
            if match:
                return match
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"exited {self.proc.returncode} before printing {pattern!r}:\n{self.out}\n{self.err}"
                )
            time.sleep(0.05)
        raise AssertionError(f"no {pattern!r} within {timeout}s:\n{self.out}\n{self.err}")

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM, then its exit code."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def cli_json(args: list[str], timeout: float) -> tuple[Any, str]:
    """Run `python -m five_actors ARGS` from the repository, assert it exits 0 (showing its stderr's end if not),
    and return the JSON it printed and its stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "five_actors", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), done.stderr


def get(url: str, token: str | None = None, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    """GET (or POST `body` as JSON) -> (status, parsed JSON or text)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST" if body is not None else "GET")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


def wait_until(check: Any, timeout: float = 60.0, what: str = "condition") -> Any:
    """Poll `check()` until it returns something truthy; returns that."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (OSError, KeyError, IndexError) as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached within {timeout}s (last: {last!r})")


def actor(view: dict[str, Any], path: str) -> dict[str, Any]:
    """The /actors entry at `path`."""
    return next(a for a in view["actors"] if a["path"] == path)


def log_events(run_dir: Path, event: str) -> list[dict[str, Any]]:
    """Every log line of `event` across the run's node files."""
    lines = []
    for path in sorted((run_dir / "logs").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") == event:
                lines.append(record)
    return lines
