"""The live surgery on a running `five-actors up --config smoke`: POST /surgery and `surgery --url`.

One run is shared (starting the processes is the slow part): a refused surgery (bad token,
shrink) changes nothing; widen-lstm through HTTP and add-observation through the CLI change
the architecture everywhere, and training goes on (versions advance, chunks of the new arch
are trained on, no actor crashes); the game switches at chunk boundaries and every chunk it
made is accounted for; a game-version surgery's new version and action come into use in a
growing share of games; a game-size surgery restarts the games at the larger size.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from five_actors.actors.ledger import FATES
from tests.supervisor.cluster import REPO, Proc, get, log_events, wait_until

pytestmark = pytest.mark.timeout(600)

START = 240.0
"""Seconds for the tree's processes to start on a busy 2-core machine."""

GAME, LEARNER = "/root/rollouts/game-0", "/root/learners/learner-0"

ANNEAL_VERSIONS = 4
"""Versions over which a surgery's new action types and game version come into use. (The smoke tree rates
each version on a few games only, too noisy for the revert rule: it is tested on its own in test_handover.)"""


def post(url: str, body: dict[str, Any], token: str | None) -> tuple[int, Any]:
    """POST JSON with a timeout long enough for a surgery."""
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def metric(url: str, path: str, name: str, part: str = "metrics") -> Any:
    """A number (or, with part="progress", a progress field) the actor at `path` reports in /actors."""
    view = get(f"{url}/actors")[1]
    entry = next((a for a in view["actors"] if a["path"] == path), None)
    return None if entry is None else (entry.get("status") or {}).get(part, {}).get(name)


class Run:
    def __init__(self, proc: Proc, url: str, run_dir: Path) -> None:
        self.proc, self.url, self.run_dir = proc, url, run_dir
        self.token = (run_dir / "token").read_text().strip()

    def version(self) -> int:
        return int(metric(self.url, "/root/params", "version") or 0)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    where = tmp_path_factory.mktemp("live")
    run_dir = where / "run"
    settings = {
        "surgery_anneal_versions": ANNEAL_VERSIONS,
        "surgery_revert_trueskill": 100,
        "pool_max_versions": 4,
    }  # 4: short surgeries
    sets = [word for key, value in settings.items() for word in ("--set", f"training.{key}={value}")]
    proc = Proc(["up", "--port", "0", "--config", "smoke", "--run-dir", str(run_dir), *sets], where, "up")
    try:
        port = proc.wait_for_output(r"serving http://127\.0\.0\.1:(\d+)", timeout=START).group(1)
        running = Run(proc, f"http://127.0.0.1:{port}", run_dir)
        wait_until(lambda: running.version() >= 2, timeout=START, what="training under way")
        yield running
    finally:
        proc.kill()


def test_a_refused_surgery_changes_nothing(run: Run) -> None:
    stats_before = metric(run.url, "/root/params", "surgeries")
    for token in (None, "not-the-token"):
        status, body = post(f"{run.url}/surgery", {"ops": ["widen-lstm", "64"]}, token)
        assert status == 401 and body["error"] == "unauthorized"
    status, body = post(f"{run.url}/surgery", {"ops": []}, run.token)
    assert status == 400 and "ops" in body["message"], body
    status, body = post(f"{run.url}/surgery", {"ops": ["widen-lstm", "16"]}, run.token)
    assert status == 400 and "widen-lstm 16" in body["message"], body
    status, body = post(
        f"{run.url}/surgery", {"ops": ["widen-lstm", "64"], "dry_run": True, "probe_steps": 32}, run.token
    )
    assert status == 200 and body["dry_run"] and body["changes"]["widths"]["lstm_size"] == [32, 64]
    assert metric(run.url, "/root/params", "surgeries") == stats_before == 0
    assert log_events(run.run_dir, "surgery_rejected")


def test_widen_lstm_then_add_observation_and_training_goes_on(run: Run) -> None:
    status, report = post(f"{run.url}/surgery", {"ops": ["widen-lstm", "48"], "probe_steps": 32}, run.token)
    assert status == 200, report
    new_arch = report["changes"]["architecture"]["to"]
    swapped_at = report["version_to"]
    assert metric(run.url, "/root/params", "arch", "progress") == new_arch
    wait_until(
        lambda: metric(run.url, LEARNER, "arch", "progress") == new_arch,
        timeout=120,
        what="the learner on the new arch",
    )
    wait_until(lambda: metric(run.url, GAME, "game_arch_switches") == 1, timeout=120, what="the game on the new arch")
    wait_until(lambda: run.version() >= swapped_at + 2, timeout=120, what="versions advancing after the swap")

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "five_actors",
            "surgery",
            "add-observation",
            "all",
            "--url",
            run.url,
            "--token-file",
            str(run.run_dir / "token"),
            "--probe-steps",
            "32",
            "--json",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "surgery: probes, then the latest version (training pauses), then the opponent pool" in done.stderr
    second = json.loads(done.stdout)
    assert second["changes"]["architecture"]["from"] == new_arch and second["changes"]["features_added"]
    wait_until(lambda: metric(run.url, GAME, "game_arch_switches") == 2, timeout=120, what="the game's second switch")
    wait_until(
        lambda: run.version() >= second["version_to"] + 2, timeout=120, what="versions advancing after the second swap"
    )

    rounds = metric(run.url, "/root/eval", "eval_rounds") or 0
    wait_until(
        lambda: (metric(run.url, "/root/eval", "eval_rounds") or 0) > rounds,
        timeout=120,
        what="an eval round on the new arch",
    )
    view = get(f"{run.url}/actors")[1]
    assert all(a.get("restarts", 0) == 0 for a in view["actors"]), [
        (a["path"], a.get("restarts")) for a in view["actors"]
    ]
    assert not log_events(run.run_dir, "actor_crashed")
    # The game switched at chunk boundaries: of its old-arch steps it dropped at most the one after its
    # last chunk (the bootstrap value's step) per switch; the old-arch chunks were converted, not refused.
    assert metric(run.url, GAME, "game_steps_dropped_arch") <= 2
    assert metric(run.url, LEARNER, "chunks_converted") > 0
    # At a moment when no chunk is in flight every chunk the game made is exactly one of these.
    counts = settled_chunk_counts(run.url)
    assert counts["made"] == counts["accounted"] > 0, counts


def test_game_version_and_its_new_action_are_annealed_in(run: Run) -> None:
    status, report = post(f"{run.url}/surgery", {"ops": ["game-version", "2"], "probe_steps": 32}, run.token)
    assert status == 200, report
    assert report["changes"]["action_types_added"] == ["recall"] and report["changes"]["game_version"] == {
        "from": 1,
        "to": 2,
    }
    wait_until(
        lambda: metric(run.url, GAME, "game_anneal_share_game_version") == 1.0,
        timeout=120,
        what="the game version in every game",
    )
    heard = [e["shares"] for e in log_events(run.run_dir, "anneal_shares") if "game_version" in e["shares"]]
    shares = [s["game_version"] for s in heard]
    assert shares[0] == 0.0 and shares[-1] == 1.0 and shares == sorted(shares) and len(set(shares)) >= 3, (
        shares
    )  # a version at a time
    assert all(s["recall"] == s["game_version"] for s in heard)
    assert metric(run.url, "/root/params", "anneal_share_recall") == 1.0
    wait_until(lambda: metric(run.url, GAME, "game_annealed_taken_recall"), timeout=60, what="recall played once legal")
    assert not log_events(run.run_dir, "actor_crashed")


def test_game_size_restarts_the_games_larger_and_the_eval_plays_the_larger_game(run: Run) -> None:
    """The curriculum's step on a live run: the smoke config's 2v2 one-lane game grows to 3 heroes a side on two
    lanes; the game actor plays it from its next chunk boundary, the eval's rounds say which game they played, the
    learner converts the chunks of the small game, and training goes on."""
    switches = metric(run.url, GAME, "game_arch_switches")
    status, report = post(f"{run.url}/surgery", {"ops": ["game-size", "3", "2"], "probe_steps": 32}, run.token)
    assert status == 200, report
    assert report["changes"]["slots"] == {"allies": [1, 2], "enemies": [2, 3], "structures": [6, 10]}
    assert report["changes"]["parameters"]["from"] == report["changes"]["parameters"]["to"]
    wait_until(lambda: metric(run.url, GAME, "game_arch_switches") == switches + 1, timeout=120, what="the switch")
    assert (metric(run.url, GAME, "game_heroes_per_side"), metric(run.url, GAME, "game_lanes")) == (3, 2)
    wait_until(lambda: run.version() >= report["version_to"] + 2, timeout=120, what="versions after the growth")
    wait_until(
        lambda: any(e.get("heroes_per_side") == 3 for e in log_events(run.run_dir, "eval_result")),
        timeout=180,
        what="an eval round on the larger game",
    )
    larger = [e for e in log_events(run.run_dir, "eval_result") if e.get("heroes_per_side") == 3]
    assert {e["lanes"] for e in larger} == {2} and {e["opponent"] for e in larger} >= {"random", "scripted"}
    refused = [e["reason"] for e in log_events(run.run_dir, "rollout_refused") if "converted" in e.get("reason", "")]
    assert not refused, refused  # the small game's chunks read in the larger layout, targets moved with their slots
    assert not log_events(run.run_dir, "actor_crashed")
    counts = settled_chunk_counts(run.url)
    assert counts["made"] == counts["accounted"] > 0, counts


def chunk_counts(url: str, learners: tuple[str, ...] = (LEARNER,)) -> dict[str, int]:
    """From one /actors view: the game's ledger (chunks made, by reported fate, lost) and the chunks the `learners`
    hold unused by their own count (`waiting`)."""
    view = {a["path"]: (a.get("status") or {}).get("metrics", {}) for a in get(f"{url}/actors")[1]["actors"]}
    counts = {f"chunks_{name}": view[GAME][f"game_chunks_{name}"] for name in FATES}
    counts["waiting"] = sum(view[path]["chunks_waiting"] for path in learners)
    counts["lost"] = view[GAME]["game_chunks_lost"]
    return {"made": view[GAME]["game_chunks_made"], "accounted": sum(counts.values()), **counts}


def settled_chunk_counts(url: str, learners: tuple[str, ...] = (LEARNER,), timeout: float = 120.0) -> dict[str, int]:
    """chunk_counts at a moment no chunk and no report of fates is in flight (made == accounted: the chunks the
    ledger has no fate for are the ones the learners hold), or the last seen after `timeout` seconds. Such moments
    are short while rollouts flow (in one full suite none came in 60 s of looks 0.1 s apart), so it looks often."""
    deadline = time.monotonic() + timeout
    while (counts := chunk_counts(url, learners))["made"] != counts["accounted"] and time.monotonic() < deadline:
        time.sleep(0.02)
    return counts
