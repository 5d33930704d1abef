"""The dashboard on a real `five-actors up --config smoke`: its JSON routes, and the page in a real headless
Chromium."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser import CHROMIUM, Browser
from tests.supervisor.cluster import REPO, Proc, actor, get, wait_until
from tests.supervisor.test_up import Head


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    where = tmp_path_factory.mktemp("dashboard")
    run_dir = where / "run"
    # A small opponent pool keeps the dry-run surgeries short (each pool version is operated and verified).
    args = [
        "up",
        "--config",
        "smoke",
        "--run-dir",
        str(run_dir),
        "--port",
        "0",
        "--set",
        "training.pool_max_versions=4",
    ]
    proc = Proc(args, where, "up")
    try:
        head = Head(proc, run_dir)
        wait_until(lambda: get(f"{head.url}/health")[0] == 200, timeout=150, what="the smoke tree up")
        yield head
    finally:
        proc.kill()


def tree_paths(head: Head) -> set[str]:
    return {a["path"] for a in head.view()["actors"] if not a["path"].startswith("/_")}


def test_up_help_says_where_the_dashboard_is() -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "five_actors", "up", "--help"], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert "dashboard is at http://HOST:PORT/" in " ".join(shown.stdout.split())


def test_up_prints_the_dashboard_url_and_serves_a_self_contained_page(smoke: Head) -> None:
    assert f"dashboard: {smoke.url}/" in smoke.proc.out
    status, page = get(f"{smoke.url}/")
    assert status == 200 and "<title>five-actors dashboard</title>" in page
    # Nothing is fetched from elsewhere: the one absolute URL is the SVG namespace, a name, not a fetch.
    assert set(re.findall(r"https?://[^\"' )]+", page)) == {"http://www.w3.org/2000/svg"}


def test_series_route_returns_points_after_since(smoke: Head) -> None:
    points = wait_until(
        lambda: (b := get(f"{smoke.url}/api/series?since=0")[1]) and len(b["points"]) >= 3 and b["points"],
        timeout=120,
        what="three points",
    )
    assert all(a["t"] < b["t"] for a, b in zip(points, points[1:]))
    later = get(f"{smoke.url}/api/series?since={points[-2]['t']}")[1]["points"]
    assert later and later[0]["t"] == points[-1]["t"]
    assert {"env_steps_per_s", "samples_per_s", "staleness", "reuse", "trueskill", "version"} <= set(points[-1])
    status, body = get(f"{smoke.url}/api/series?since=yesterday")
    assert status == 400 and "since" in body["message"]


def test_eval_rounds_link_replays_and_logs_filter_by_actor(smoke: Head) -> None:
    rounds = wait_until(lambda: get(f"{smoke.url}/api/evals")[1]["rounds"], timeout=120, what="an eval round")
    assert rounds[0]["replay"].startswith("eval-r00001-")
    status, player = get(f"{smoke.url}/replays/{rounds[0]['replay']}")
    assert status == 200 and "<canvas" in player
    assert get(f"{smoke.url}/replays/..%2Ftoken")[0] == 404
    status, lines = get(f"{smoke.url}/logs?actor=/root/eval&event=eval_result&limit=2")
    assert (
        status == 200
        and len(lines.splitlines()) == 2
        and all(" /root/eval eval_result " in line for line in lines.splitlines())
    )


@pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (apt-get install chromium)")
@pytest.mark.timeout(420)
async def test_the_page_in_headless_chromium(smoke: Head, tmp_path: Path) -> None:
    async with Browser.launch(tmp_path / "profile") as browser:
        await browser.open(f"{smoke.url}/")
        expected = sorted(tree_paths(smoke))
        shown = await browser.until(
            f"(r => r.length === {len(expected)} && r)"
            "([...document.querySelectorAll('#tree tbody tr')].map(tr => tr.dataset.path).sort())",
            30,
        )
        assert shown == expected

        chart = "Number(document.querySelector('.chart[data-key=env_steps_per_s]')?.dataset.points || 0)"
        before = await browser.until(chart, 60)
        await browser.until(f"{chart} > {before + 2}", 60)
        assert (
            await browser.eval("document.querySelector('.chart[data-key=env_steps_per_s] polyline').points.length")
            > before
        )

        game = actor(smoke.view(), "/root/rollouts/game-0")
        row = "document.querySelector('#tree tr[data-path=\"/root/rollouts/game-0\"]')"
        os.kill(game["pid"], signal.SIGKILL)
        await browser.until(f"{row}.classList.contains('problem')", 30, every=0.05)
        assert await browser.eval("document.getElementById('status').textContent.startsWith('degraded')")
        await browser.until(f"!{row}.classList.contains('problem') && {row}.dataset.state === 'running'", 120)
        assert await browser.eval(f"{row}.querySelector('td.restarts').textContent") == str(game["restarts"] + 1)

        await browser.eval("document.getElementById('surgery-ops').value = 'widen-lstm 48'")
        await browser.eval(f"document.getElementById('surgery-token').value = '{smoke.token}'")
        await browser.eval("document.getElementById('surgery-send').click()")
        report = await browser.until(
            "(t => t.startsWith('200') && t)(document.getElementById('surgery-report').textContent)", 180
        )
        assert '"dry_run": true' in report and "verification" in report
        assert await browser.eval("document.getElementById('surgery-token').value") == ""
        assert smoke.token not in await browser.eval("document.documentElement.outerHTML + location.href")
        await browser.until("document.querySelector('#surgeries tbody tr')?.textContent.includes('dry run')", 30)
        assert (
            await browser.eval("document.querySelectorAll('#surgeries tbody tr').length") == 1
        )  # one surgery, one row
        assert browser.errors == []


def test_tensorboard_files_read_back_with_tensorboards_own_reader(smoke: Head) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    body = json.dumps({"ops": ["widen-lstm", "40"], "dry_run": True, "probe_steps": 16}).encode()
    request = urllib.request.Request(
        f"{smoke.url}/surgery", data=body, headers={"Authorization": f"Bearer {smoke.token}"}
    )
    with urllib.request.urlopen(
        request, timeout=240
    ) as answer:  # a dry run verifies every pool version: can take a while here
        assert answer.status == 200

    def loaded() -> EventAccumulator:
        events = EventAccumulator(str(smoke.run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
        events.Reload()
        return events

    def ready() -> EventAccumulator | None:
        events = loaded()
        texts = [t for t in events.Tags()["tensors"] if t.startswith("surgery")]
        return events if texts and len(events.Scalars("progress/env_steps_per_s")) >= 5 else None

    events = wait_until(ready, timeout=60, what="scalars and a surgery text event in RUN_DIR/tensorboard")
    scalars = events.Tags()["scalars"]
    assert {
        "progress/samples_per_s",
        "progress/staleness",
        "progress/trueskill",
        "five_actors_eval_trueskill",
        "five_actors_sample_reuse",
        "five_actors_policy_loss",
        "five_actors_game_reward_xp",
    } <= set(scalars)
    versions = [e.step for e in events.Scalars("progress/version")]
    assert versions == sorted(versions) and versions[-1] > 0
    assert [e.value for e in events.Scalars("progress/version")] == [
        float(v) for v in versions
    ]  # the step is the version
    text = (
        events.Tensors(next(t for t in events.Tags()["tensors"] if t.startswith("surgery")))[-1]
        .tensor_proto.string_val[0]
        .decode()
    )
    assert "widen-lstm" in text and '"dry_run": true' in text
