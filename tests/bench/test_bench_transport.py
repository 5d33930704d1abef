"""`five-actors bench transport`: node links against a bare aiohttp + msgpack echo, two real processes."""

from __future__ import annotations

import subprocess
import sys

from tests.supervisor.cluster import REPO, cli_json


def test_transport_bench_compares_with_bare_and_splits_the_ask_into_stages() -> None:
    args = ["bench", "transport", "--tells", "300", "--asks", "200", "--arrays", "3", "--repeats", "1"]
    report, _ = cli_json(args, timeout=240)
    for name in ("tell_msgs_per_s", "ask_rtt_p50_us", "array_1mib_mb_per_s", "ask_cpu_us_per_round_trip"):
        pair = report[name]
        assert pair["five_actors"] > 0 and pair["bare"] > 0 and pair["ratio"] > 0, (name, pair)
    stages = report["ask_stages_us"]
    assert all(stages[k] > 0 for k in ("encode_us", "decode_us", "mailbox_us")), stages
    # The stages and the rest (`links_us`) add up to what our ask round trip takes over the bare one.
    p50 = report["ask_rtt_p50_us"]
    assert abs(sum(stages.values()) - (p50["five_actors"] - p50["bare"])) <= 0.5, (stages, p50)


def test_transport_bench_refuses_a_count_below_one() -> None:
    args = [sys.executable, "-m", "five_actors", "bench", "transport", "--asks", "0"]
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--asks must be at least 1" in done.stderr
