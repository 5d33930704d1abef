"""Structured logs: real processes write them, `five-actors logs replay/summary` reads them back."""

from __future__ import annotations

import datetime
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest

from five_actors.logreplay import parse_time

WRITER = """
import sys, structlog
from pathlib import Path
from five_actors.logs import configure_logging
node, log_dir, *specs = sys.argv[1:]
configure_logging(node, Path(log_dir))
log = structlog.get_logger("five_actors.test")
for spec in specs:
    actor, event, level, *fields = spec.split(",")
    bound = log.bind(actor=actor) if actor != "-" else log
    getattr(bound, level)(event, **dict(f.split("=", 1) for f in fields))
"""


def write_logs(log_dir: Path, node: str, *specs: str) -> None:
    """Run a separate process that logs `ACTOR,EVENT,LEVEL[,key=value...]` specs as `node`."""
    subprocess.run([sys.executable, "-c", WRITER, node, str(log_dir), *specs], check=True, env=os.environ.copy())


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "five_actors", "logs", *args], capture_output=True, text=True, timeout=60
    )


def json_lines(text: str) -> list[dict]:
    return [orjson.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run whose two nodes wrote interleaved lines from four separate processes."""
    run = tmp_path_factory.mktemp("run")
    logs = run / "logs"
    write_logs(
        logs,
        "head",
        "/root,node_started,info,url=http://127.0.0.1:1",
        "/root/ping,actor_started,info,cls=Ping",
        "/root,child_started,info,child=pong,kind=process,node=worker",
    )
    write_logs(logs, "worker", "/root/pong,actor_started,info,cls=Pong", "-,link_up,info,peer=head")
    write_logs(
        logs,
        "head",
        "/root,child_exited,warning,child=pong,reason=killed",
        "/root,child_restarted,info,child=pong,restarts=1",
        "/root,child_started,info,child=pong,kind=process,node=worker",
    )
    write_logs(
        logs,
        "worker",
        "/root/pong,actor_started,info,cls=Pong",
        "/root/pong,actor_crashed,error,reason=ValueError: bad pong,traceback=Traceback (most recent call last):",
    )
    return run


def test_lines_of_all_nodes_are_merged_by_time(run_dir: Path) -> None:
    result = cli("replay", str(run_dir), "--json")
    assert result.returncode == 0, result.stderr
    records = json_lines(result.stdout)
    assert [(r["node"], r["event"]) for r in records] == [
        ("head", "node_started"),
        ("head", "actor_started"),
        ("head", "child_started"),
        ("worker", "actor_started"),
        ("worker", "link_up"),
        ("head", "child_exited"),
        ("head", "child_restarted"),
        ("head", "child_started"),
        ("worker", "actor_started"),
        ("worker", "actor_crashed"),
    ]
    assert [r["ts"] for r in records] == sorted(r["ts"] for r in records)
    assert all(list(r)[:5] == ["ts", "node", "actor", "event", "level"] for r in records)
    assert records[4]["actor"] is None
    # An event's own `node` field does not overwrite the line's node.
    assert records[2]["node"] == "head" and records[2]["node_"] == "worker"


def test_readable_lines_show_time_node_actor_event_and_fields(run_dir: Path) -> None:
    result = cli("replay", str(run_dir))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    first = lines[0].split(" ")
    datetime.datetime.strptime(first[0], "%H:%M:%S.%f")
    assert first[1:4] == ["head", "/root", "node_started"]
    assert "url=http://127.0.0.1:1" in lines[0]
    crash = next(line for line in lines if "actor_crashed" in line)
    assert 'worker /root/pong actor_crashed level=error reason="ValueError: bad pong"' in crash
    assert "    Traceback (most recent call last):" in lines


def test_actor_filter_is_a_glob_on_the_actor_path(run_dir: Path) -> None:
    records = json_lines(cli("replay", str(run_dir), "--json", "--actor", "/root/p*").stdout)
    assert {r["actor"] for r in records} == {"/root/ping", "/root/pong"}
    assert len(records) == 4
    by_address = json_lines(cli("replay", str(run_dir), "--json", "--actor", "worker/root/*").stdout)
    assert {r["node"] for r in by_address} == {"worker"} and len(by_address) == 3


def test_event_filter_repeats_and_globs(run_dir: Path) -> None:
    records = json_lines(cli("replay", str(run_dir), "--json", "--event", "child_*", "--event", "link_up").stdout)
    assert [r["event"] for r in records] == [
        "child_started",
        "link_up",
        "child_exited",
        "child_restarted",
        "child_started",
    ]


def test_level_filter_keeps_that_level_and_above(run_dir: Path) -> None:
    records = json_lines(cli("replay", str(run_dir), "--json", "--level", "warning").stdout)
    assert [(r["event"], r["level"]) for r in records] == [("child_exited", "warning"), ("actor_crashed", "error")]


def test_since_and_until_take_iso_relative_and_clock_times(run_dir: Path) -> None:
    records = json_lines(cli("replay", str(run_dir), "--json").stdout)
    cut = (records[4]["ts"] + records[5]["ts"]) / 2
    iso = datetime.datetime.fromtimestamp(cut).isoformat()
    later = json_lines(cli("replay", str(run_dir), "--json", "--since", iso).stdout)
    earlier = json_lines(cli("replay", str(run_dir), "--json", "--until", iso).stdout)
    assert later == records[5:] and earlier == records[:5]
    assert len(json_lines(cli("replay", str(run_dir), "--json", "--since", "1h").stdout)) == len(records)
    assert json_lines(cli("replay", str(run_dir), "--json", "--until", "1h").stdout) == []
    assert parse_time("10m", now=1000.0) == 400.0
    assert parse_time("1h30s", now=10000.0) == 10000.0 - 3630.0
    clock = datetime.datetime.fromtimestamp(cut).strftime("%H:%M:%S.%f")
    assert abs(parse_time(clock, now=cut) - cut) < 1e-3


def test_summary_counts_starts_crashes_restarts_and_last_error(run_dir: Path) -> None:
    result = cli("summary", str(run_dir), "--json")
    assert result.returncode == 0, result.stderr
    summary = orjson.loads(result.stdout)
    # pong started twice: each start is logged by it (actor_started) and its supervisor (child_started).
    pong = summary["actors"]["/root/pong"]
    assert pong == {"starts": 2, "crashes": 1, "restarts": 1, "last_error": "ValueError: bad pong", "nodes": ["worker"]}
    assert summary["actors"]["/root/ping"] == {
        "starts": 1,
        "crashes": 0,
        "restarts": 0,
        "last_error": None,
        "nodes": ["head"],
    }
    assert summary["events"] == {
        "actor_crashed": 1,
        "actor_started": 3,
        "child_exited": 1,
        "child_restarted": 1,
        "child_started": 2,
        "link_up": 1,
        "node_started": 1,
    }
    text = cli("summary", str(run_dir)).stdout
    row = next(line for line in text.splitlines() if line.startswith("/root/pong"))
    assert row.split()[:5] == ["/root/pong", "worker", "2", "1", "1"] and row.endswith("ValueError: bad pong")
    assert "actor_started    3" in text


def test_truncated_and_malformed_lines_are_skipped_with_a_warning(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_logs(logs, "n1", "/a,first,info", "/a,second,info")
    with open(logs / "n1.jsonl", "ab") as handle:
        handle.write(b"not json\n")
    write_logs(logs, "n1", "/a,third,info")
    with open(logs / "n1.jsonl", "ab") as handle:
        handle.write(b'{"ts": 1.0, "node": "n1", "ev')
    result = cli("replay", str(tmp_path), "--json")
    assert result.returncode == 0
    assert [r["event"] for r in json_lines(result.stdout)] == ["first", "second", "third"]
    warnings = result.stderr.splitlines()
    assert len(warnings) == 2
    assert f"{logs / 'n1.jsonl'}:3" in warnings[0] and "malformed" in warnings[0]
    assert f"{logs / 'n1.jsonl'}:5" in warnings[1] and "truncated" in warnings[1]


def test_missing_run_dir_or_no_log_files_exit_2(tmp_path: Path) -> None:
    missing = cli("replay", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    (tmp_path / "logs").mkdir()
    empty = cli("summary", str(tmp_path))
    assert empty.returncode == 2 and "no *.jsonl log files" in empty.stderr
    bad_time = cli("replay", str(tmp_path), "--since", "yesterday")
    assert bad_time.returncode == 2 and "'yesterday' is not a time" in bad_time.stderr


def test_follow_prints_lines_appended_later_including_new_files(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_logs(logs, "n1", "/a,before,info")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "five_actors",
            "logs",
            "replay",
            str(tmp_path),
            "--follow",
            "--event",
            "before",
            "--event",
            "after*",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as a terminal sends it: a pytest started in the background (`pytest &`) hands its children SIGINT
        # ignored, and Python then never raises KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()  # type: ignore[union-attr]

    def next_line() -> str:
        return lines.get(timeout=30)

    try:
        assert " before" in next_line()
        write_logs(logs, "n1", "/a,after_old_file,info", "/a,ignored,info")
        assert " after_old_file" in next_line()
        write_logs(logs, "n2", "/b,after_new_file,info")
        assert "n2 /b after_new_file" in next_line()
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    assert lines.empty()


CONFIGURE_TWICE = """
import logging, sys, structlog, numpy as np
from pathlib import Path
from five_actors.logs import configure_logging
log_dir = Path(sys.argv[1])
log = structlog.get_logger("five_actors.test")
configure_logging("n1", log_dir, console=True)
configure_logging("n1", log_dir, console=True)
log.bind(actor="/x").info("values", f32=np.float32(1.5), i64=np.int64(7), arr=np.arange(3), path=log_dir, huge=2**70)
log.debug("hidden_debug")
try:
    1 / 0
except ZeroDivisionError:
    log.exception("failed", reason="division")
logging.getLogger("aiohttp.web").warning("stdlib says %s", "hi")
"""


def test_configure_twice_writes_each_event_once_with_sensible_values(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", CONFIGURE_TWICE, str(tmp_path)], capture_output=True, text=True, check=True
    )
    records = json_lines((tmp_path / "n1.jsonl").read_text())
    assert [r["event"] for r in records] == ["values", "failed", "stdlib says hi"]
    values = records[0]
    assert values["actor"] == "/x" and values["node"] == "n1" and values["level"] == "info"
    assert values["f32"] == 1.5 and values["i64"] == 7 and values["arr"] == [0, 1, 2]
    assert values["path"] == str(tmp_path) and values["huge"] == str(2**70)
    assert "ZeroDivisionError: division by zero" in records[1]["traceback"] and records[1]["level"] == "error"
    assert records[2]["logger"] == "aiohttp.web" and records[2]["level"] == "warning"
    console = result.stderr.splitlines()
    assert sum(" failed level=error" in line for line in console) == 1
    assert not any("values" in line for line in console)


def test_without_log_dir_lines_go_to_stderr_and_bad_arguments_are_refused(tmp_path: Path) -> None:
    code = (
        "import structlog; from five_actors.logs import configure_logging; "
        "configure_logging('solo', None, level='debug');"
        "structlog.get_logger().debug('tiny_detail', n=1)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "solo - tiny_detail n=1" in result.stderr and result.stdout == ""
    bad = "from five_actors.logs import configure_logging; configure_logging('n', None, level='loud')"
    refused = subprocess.run([sys.executable, "-c", bad], capture_output=True, text=True)
    assert refused.returncode != 0 and "log level 'loud'" in refused.stderr
    assert list(tmp_path.iterdir()) == []


ACTOR_RUN = """
import asyncio, sys
from pathlib import Path
from five_actors.logs import configure_logging
from five_actors.runtime.actor import Actor, ActorSystem, message

@message
class Explode:
    why: str

class Fragile(Actor):
    async def on_explode(self, msg):
        raise ValueError(msg.why)

async def main():
    system = ActorSystem("n1")
    ref = system.spawn(Fragile(), "/fragile")
    await ref.tell(Explode("bad input"))
    await system.wait(ref)

configure_logging("n1", Path(sys.argv[1]))
asyncio.run(main())
"""


def test_an_actor_crash_is_logged_with_its_traceback_and_summarised(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-c", ACTOR_RUN, str(tmp_path / "logs")], check=True, timeout=60)
    records = json_lines(cli("replay", str(tmp_path), "--json", "--actor", "/fragile").stdout)
    assert [r["event"] for r in records] == ["actor_started", "actor_crashed"]
    crash = records[1]
    assert crash["node"] == "n1" and crash["reason"] == "ValueError: bad input"
    assert "in on_explode" in crash["traceback"] and crash["traceback"].endswith("ValueError: bad input\n")
    summary = orjson.loads(cli("summary", str(tmp_path), "--json").stdout)
    assert summary["actors"]["/fragile"] == {
        "starts": 1,
        "crashes": 1,
        "restarts": 0,
        "last_error": "ValueError: bad input",
        "nodes": ["n1"],
    }


def _line(ts: float, node: str, event: str, **fields: object) -> bytes:
    return orjson.dumps({"ts": ts, "node": node, "actor": None, "event": event, "level": "info", **fields}) + b"\n"


def test_rollouts_show_each_reward_component_per_1000_agent_steps_per_window(tmp_path: Path) -> None:
    """Two game actors' chunks in the first two minutes and one in minute 6: with 5-minute windows the first row
    pools the two (weighted by their agent-steps), the second holds the third; --window 1 splits them further."""
    logs = tmp_path / "logs"
    logs.mkdir()
    t0 = 1_800_000_000.0
    (logs / "head.jsonl").write_bytes(_line(t0, "head", "training_progress", version=0, env_steps=0))
    (logs / "head.game-0.jsonl").write_bytes(
        _line(t0 + 30, "game-0", "rollout_chunk", chunks=100, steps=16, version=3, reward=8.0, reward_xp=4.0)
        + _line(t0 + 370, "game-0", "rollout_chunk", chunks=50, steps=16, version=40, reward=-1.6, reward_xp=0.0)
    )
    (logs / "head.game-1.jsonl").write_bytes(
        _line(t0 + 90, "game-1", "rollout_chunk", chunks=25, steps=16, version=7, reward=2.0, reward_xp=1.0)
    )
    rows = json_lines(cli("rollouts", str(tmp_path), "--json").stdout)
    assert rows == [
        {"minutes": 0.0, "version": 7, "agent_steps": 2000, "reward": 5.0, "reward_xp": 2.5},
        {"minutes": 5.0, "version": 40, "agent_steps": 800, "reward": -2.0, "reward_xp": 0.0},
    ]
    assert [r["minutes"] for r in json_lines(cli("rollouts", str(tmp_path), "--json", "--window", "1").stdout)] == [
        0.0,
        1.0,
        6.0,
    ]
    table = cli("rollouts", str(tmp_path)).stdout.splitlines()
    assert table[1].split() == ["min", "version", "agent", "steps", "total", "xp"]
    assert table[2].split() == ["0.0", "7", "2,000", "5.00", "2.50"]
    refused = cli("rollouts", str(tmp_path), "--window", "0")
    assert refused.returncode == 2 and "the window must be a positive number of minutes" in refused.stderr
    (logs / "head.game-0.jsonl").unlink()
    (logs / "head.game-1.jsonl").unlink()
    empty = cli("rollouts", str(tmp_path))
    assert empty.returncode == 2 and "no rollout_chunk events" in empty.stderr
