"""Match replays: recorded synthetic matches round-trip, damaged files are refused, players show them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from five_actors.errors import GameError
from five_actors.game.replay import (
    KIND_ANCIENT, KIND_CREEP, KIND_HERO, KIND_TOWER, UNIT_COLUMNS, Recorder, load_replay,
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
        rows.append([5.0 if team == 0 else 95.0, 5.0 if team == 0 else 95.0, team, KIND_ANCIENT, 0, 1.0 - team * step / 200.0, 1.0, 1])
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
