"""`five-actors bench surgery --smoke`: both arms run on real `up` trees, the live swap is timed.

Skill is not asserted (a smoke budget is seconds); what a user reads is: one JSON object with
both arms, the same env-step budget, a pause measured from the request until versions advance,
and the counters the swap moved.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.supervisor.cluster import cli_json

pytestmark = pytest.mark.timeout(900)


def test_smoke_bench_reports_both_arms_and_the_pause(tmp_path: Path) -> None:
    args = ["bench", "surgery", "--smoke", "--game-version", "1", "--run-dir", str(tmp_path)]
    result, _ = cli_json(args, timeout=840)
    budget = result["budget"]["env_steps_per_arm"]
    assert result["operations"] == "widen-lstm 48" and budget >= 2 * result["budget"]["operated_at_env_steps"] > 0
    surgery, scratch = result["arms"]["surgery"], result["arms"]["scratch"]
    for arm in (surgery, scratch):
        assert arm["final_version"] >= 1 and arm["env_steps"] > 0
        assert arm["env_steps"] >= budget or arm["stopped_on"] == "time"
        assert isinstance(arm["table"], list)
    swap = surgery["swap"]
    assert swap["architecture"]["from"] != swap["architecture"]["to"]
    assert swap["pause_s"] > 0 and swap["request_to_answer_s"] > 0
    assert 0 < swap["param_server_pause_s"] <= swap["param_server_in_play_s"] <= swap["param_server_surgery_s"]
    assert surgery["final_version"] > swap["version_to"] > swap["version_from"]
    assert swap["max_prob_diff"] <= 1e-6
    assert swap["counters"]["game_arch_switches"]["since_request"] >= 1
    # Both runs were kept where --run-dir said, logs included.
    assert (tmp_path / "surgery" / "logs").is_dir() and (tmp_path / "scratch" / "logs").is_dir()
