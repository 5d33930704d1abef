"""Match replays: recorded synthetic matches round-trip, damaged files are refused, players show them."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
import tracemalloc
import zlib
from pathlib import Path

import msgpack
import numpy as np
import orjson
import pytest

from five_actors.errors import GameError
from five_actors.game.replay import (
    KIND_ANCIENT,
    KIND_CREEP,
    KIND_HERO,
    KIND_TOWER,
    UNIT_COLUMNS,
    Recorder,
    load_replay,
)

MAP_SIZE = 100.0
META = {
    "map_size": MAP_SIZE,
    "lanes": [[[10, 10], [10, 90], [90, 90]], [[10, 10], [90, 90]], [[10, 10], [90, 10], [90, 90]]],
    "hero_types": ["Tank", "Nuker", "Healer", "Carry", "Support"],
    "game_version": 1,
    "seed": 7,
    "steps_per_second": 10.0,
    "note": "synthetic",
}


def synthetic_units(step: int) -> np.ndarray:
    """Ten heroes walking the middle lane, a creep per side, a tower and an ancient per side."""
    rows = []
    for team in (0, 1):
        for slot in range(5):
            progress = min(step / 100.0, 1.0) * 30.0
            x = 10.0 + slot * 2 + progress if team == 0 else 90.0 - slot * 2 - progress
            rows.append([x, x, team, KIND_HERO, slot, 1.0 - step / 400.0, 1.0, 1 + step // 50])
        creep_x = 20.0 + step / 10.0 if team == 0 else 80.0 - step / 10.0
        rows.append([creep_x, 10.0 if team == 0 else 90.0, team, KIND_CREEP, 0, 0.5, 1.0, 1])
        rows.append([30.0 if team == 0 else 70.0, 30.0 if team == 0 else 70.0, team, KIND_TOWER, 0, 1.0, 1.0, 1])
        rows.append(
            [
                5.0 if team == 0 else 95.0,
                5.0 if team == 0 else 95.0,
                team,
                KIND_ANCIENT,
                0,
                1.0 - team * step / 200.0,
                1.0,
                1,
            ]
        )
    return np.asarray(rows, dtype=np.float32)


def record_match(path: Path, steps: int = 60) -> Recorder:
    recorder = Recorder(META)
    for step in range(0, steps, 2):
        events = [{"kind": "last_hit", "x": 40.0, "y": 40.0, "team": 0, "hero": np.int64(1)}] if step == 20 else []
        recorder.frame(step, synthetic_units(step), events)
    recorder.save(path, {"winner": 0, "steps": steps, "reason": "ancient_destroyed"})
    return recorder


def test_a_recorded_match_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "match.replay"
    recorder = record_match(path)
    replay = load_replay(path)
    assert replay.meta == {**META, "lanes": META["lanes"]}
    assert replay.result == {"winner": 0, "steps": 60, "reason": "ancient_destroyed"}
    assert [f.step for f in replay.frames] == list(range(0, 60, 2)) and len(replay.frames) == len(recorder)
    for frame in replay.frames:
        np.testing.assert_array_equal(frame.units, synthetic_units(frame.step))
        assert frame.units.dtype == np.float32 and frame.units.shape[1] == len(UNIT_COLUMNS)
    assert replay.frames[10].events == [{"kind": "last_hit", "x": 40.0, "y": 40.0, "team": 0, "hero": 1}]
    assert replay.frame_index(21) == 11
    # Compact: well under the size of the raw float32 frames plus framing.
    assert path.stat().st_size < 30 * 16 * 8 * 4
    assert [p.name for p in tmp_path.iterdir()] == ["match.replay"]


def test_the_recorder_copies_units_and_refuses_bad_frames(tmp_path: Path) -> None:
    recorder = Recorder(META)
    units = synthetic_units(0)
    recorder.frame(0, units, [])
    units[:, 0] = -1.0
    with pytest.raises(GameError, match=r"\[n, 8\]"):
        recorder.frame(1, units[:, :5], [])
    with pytest.raises(GameError, match="lacks x, y"):
        recorder.frame(1, units, [{"kind": "kill"}])
    with pytest.raises(GameError, match="comes before"):
        recorder.frame(-1, units, [])
    recorder.save(tmp_path / "r.replay", {"winner": -1})
    assert load_replay(tmp_path / "r.replay").frames[0].units[0, 0] == synthetic_units(0)[0, 0]
    with pytest.raises(GameError, match="lacks steps_per_second"):
        Recorder({k: v for k, v in META.items() if k != "steps_per_second"})
    with pytest.raises(GameError, match="no frames"):
        Recorder(META).save(tmp_path / "empty.replay", {})


def test_truncated_or_corrupt_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "match.replay"
    record_match(path)
    data = path.read_bytes()
    for cut in (1, len(data) // 3, len(data) - 1):
        (tmp_path / "cut.replay").write_bytes(data[:cut])
        with pytest.raises(GameError, match="truncated or corrupt"):
            load_replay(tmp_path / "cut.replay")
    flipped = bytearray(data)
    middle = data.index(b"units_crc32") - 200
    flipped[middle] ^= 0xFF
    (tmp_path / "flipped.replay").write_bytes(bytes(flipped))
    with pytest.raises(GameError, match="corrupt"):
        load_replay(tmp_path / "flipped.replay")
    (tmp_path / "other.replay").write_bytes(b"\x81\xa1a\x01")
    with pytest.raises(GameError, match="not a five-actors replay"):
        load_replay(tmp_path / "other.replay")
    with pytest.raises(GameError, match="cannot read replay"):
        load_replay(tmp_path / "missing.replay")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "five_actors", "replay", *args], capture_output=True, text=True, timeout=60
    )


def map_rows(output: str) -> list[str]:
    """The map's rows between its two border lines, without the side borders."""
    lines = output.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("+-"))
    bottom = next(i for i in range(top + 1, len(lines)) if lines[i].startswith("+-"))
    return [line[1:-1] for line in lines[top + 1 : bottom]]


def test_terminal_once_shows_units_where_they_stand(tmp_path: Path) -> None:
    path = tmp_path / "match.replay"
    record_match(path)
    result = cli(str(path), "--once", "--from", "20", "--width", "41")
    assert result.returncode == 0, result.stderr
    rows = map_rows(result.stdout)
    assert len(rows) == 20 and all(len(row) == 41 for row in rows)

    def at(x: float, y: float) -> str:
        # 41 columns span the map's 100 units; 20 rows span it top (y=100) to bottom (y=0).
        return rows[round((1 - y / MAP_SIZE) * 19)][round(x / MAP_SIZE * 40)]

    assert at(5, 5) == "@" and at(95, 95) == "&"  # the ancients
    assert at(30, 30) == "#" and at(70, 70) == "%"  # the towers
    units = synthetic_units(20)
    tank0, tank1 = units[0], units[8]
    assert at(tank0[0], tank0[1]) == "T" and at(tank1[0], tank1[1]) in "tnhcs"
    assert at(40, 40) == "*"  # the step's last_hit event
    assert "step 20/58" in result.stdout and "00:02.0" in result.stdout
    assert "team 1  90%" in result.stdout
    assert "last_hit team=0 hero=1 at (40, 40)" in result.stdout


def test_terminal_player_runs_to_the_result_and_refuses_bad_options(tmp_path: Path) -> None:
    path = tmp_path / "match.replay"
    record_match(path)
    played = cli(str(path), "--speed", "100", "--from", "40")
    assert played.returncode == 0, played.stderr
    assert played.stdout.count("ancients ") == 10
    assert "result  winner=0 steps=60 reason=ancient_destroyed" in played.stdout
    late = cli(str(path), "--once", "--from", "999")
    assert late.returncode == 2 and "step 999 is after the last frame" in late.stderr
    slow = cli(str(path), "--speed", "0")
    assert slow.returncode == 2 and "--speed must be > 0" in slow.stderr
    (tmp_path / "bad.replay").write_bytes(path.read_bytes()[:100])
    broken = cli(str(tmp_path / "bad.replay"), "--once")
    assert broken.returncode == 2 and "truncated or corrupt" in broken.stderr


def test_html_player_is_self_contained_and_embeds_every_frame(tmp_path: Path) -> None:
    path = tmp_path / "match.replay"
    record_match(path)
    out = tmp_path / "player.html"
    result = cli(str(path), "--html", str(out))
    assert result.returncode == 0, result.stderr
    page = out.read_text()
    assert "http://" not in page and "https://" not in page and "src=" not in page and "<link" not in page
    assert "<canvas" in page and 'id="play"' in page and 'id="seek"' in page and 'id="speed"' in page
    data = orjson.loads(
        re.search(r'<script type="application/json" id="replay-data">(.*?)</script>', page, re.S).group(1)
    )
    replay = load_replay(path)
    assert data["steps"] == [frame.step for frame in replay.frames]
    units = np.frombuffer(zlib.decompress(base64.b64decode(data["units"])), dtype="<f4").reshape(-1, len(UNIT_COLUMNS))
    np.testing.assert_array_equal(units, np.concatenate([frame.units for frame in replay.frames]))
    assert data["counts"] == [len(frame.units) for frame in replay.frames]
    assert data["events"][10] == [{"kind": "last_hit", "x": 40.0, "y": 40.0, "team": 0, "hero": 1}]
    assert data["meta"]["lanes"] == META["lanes"] and data["result"]["winner"] == 0


def test_html_embedding_survives_script_closing_tags(tmp_path: Path) -> None:
    recorder = Recorder({**META, "note": "</script><script>alert(1)</script>"})
    recorder.frame(0, synthetic_units(0), [])
    recorder.save(tmp_path / "odd.replay", {"winner": -1})
    out = tmp_path / "odd.html"
    assert cli(str(tmp_path / "odd.replay"), "--html", str(out)).returncode == 0
    page = out.read_text()
    assert page.count("</script>") == 2 and "alert(1)" in page


def headless_dom(url: str) -> str:
    """The page's DOM after three seconds of (virtual) time in headless chromium."""
    return subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--virtual-time-budget=3000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs chromium (apt-get install chromium)")
def test_html_player_draws_and_plays_in_a_headless_browser(tmp_path: Path) -> None:
    path = tmp_path / "match.replay"
    record_match(path, steps=200)
    out = tmp_path / "player.html"
    assert cli(str(path), "--html", str(out)).returncode == 0
    still = headless_dom(f"{out.as_uri()}#step=120")
    assert '<div id="clock">00:12.0</div>' in still
    assert '<span id="hp1t">40%</span>' in still
    assert "step 120 / 198" in still and "last_hit team=0 hero=1" in still
    playing = headless_dom(f"{out.as_uri()}#step=0&speed=2&play")
    clock = re.search(r'<div id="clock">(\d\d):(\d\d\.\d)</div>', playing)
    assert clock is not None and 1.0 < float(clock.group(2)) < 19.8
    assert '<button id="play">Pause</button>' in playing


def test_units_that_inflate_past_their_counts_are_refused_without_inflating_them(tmp_path: Path) -> None:
    # A file of under a MB whose units inflated to 256 MiB (and 1 GiB more) before its checksum refused it (issue 14).
    path = tmp_path / "match.replay"
    record_match(path)
    document = msgpack.unpackb(path.read_bytes(), raw=False, strict_map_key=False)
    packer, chunk = zlib.compressobj(9), b"\0" * (1 << 20)
    bomb = b"".join(packer.compress(chunk) for _ in range(256)) + packer.flush()
    (tmp_path / "bomb.replay").write_bytes(msgpack.packb({**document, "units": bomb}, use_bin_type=True))
    tracemalloc.start()
    try:
        with pytest.raises(GameError, match=r"corrupt: more than \d+ bytes of units, counts say"):
            load_replay(tmp_path / "bomb.replay")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, peak
    counts = np.frombuffer(document["counts"], dtype="<i4").copy()
    counts[0] = 2**31 - 1  # counts that claim more than a replay may hold are refused before any inflating
    (tmp_path / "claims.replay").write_bytes(msgpack.packb({**document, "counts": counts.tobytes()}, use_bin_type=True))
    with pytest.raises(GameError, match="at most 268435456 are read"):
        load_replay(tmp_path / "claims.replay")
