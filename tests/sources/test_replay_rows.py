"""File replay shares finished partition rows between seeks (sources/replay.py): a seek must
still land on exactly the state a full fold gives, even when a finished row is reported again
(the one in-place change the reducer makes to a finished row) and seeks go back and forth."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from provetop.recordings.state import State
from provetop.recordings.writer import RecordingWriter
from provetop.sources import replay
from provetop.sources.replay import FileReplaySource, open_replay
from provetop.sources.synthetic import generate


def _current(state: State) -> dict:
    snap = state.snapshot()
    snap.pop("events")  # a seek folds fewer events than a full replay
    return snap


def _with_repeated_reports(events: list[dict], rng: random.Random) -> list[dict]:
    """Insert, late in the run, repeated partition_done reports (same attempt, other
    figures) of partitions that finished early, so they hit rows a snapshot already holds."""
    done = [e for e in events if e["k"] == "partition_done" and e["t"] < events[-1]["t"] // 3]
    out = list(events)
    for original in rng.sample(done, min(4, len(done))):
        at = rng.randrange(len(out) * 2 // 3, len(out) - 1)
        t = out[at]["t"]
        repeat = {**original, "t": t, "gpu_total_ms": original["gpu_total_ms"] + 1.5}
        repeat["verified"] = not original.get("verified")
        out.insert(at + 1, repeat)
    return out


@pytest.mark.parametrize("mark_spacing_s", [None, 0.7])
def test_seeks_with_shared_rows_equal_the_full_fold(tmp_path: Path, monkeypatch, mark_spacing_s):
    if mark_spacing_s is not None:  # prepare() lays checkpoints between the snapshots
        monkeypatch.setattr(replay, "MARK_SPACING_NS", int(mark_spacing_s * 1e9))
    rng = random.Random()
    events = generate(devices=2, duration_s=40, seed=rng.randrange(1 << 30))
    events = _with_repeated_reports(events, rng)
    path = tmp_path / "run.pvtrec"
    with RecordingWriter(path, snapshot_every_s=2, background_flush=False) as writer:
        for event in events:
            writer.write(event)
    source = open_replay(path)
    assert isinstance(source, FileReplaySource) and len(source.snapshots) >= 4
    source.prepare()  # shares the rows of the last snapshot
    assert source._rows
    assert bool(source._marks) == (mark_spacing_s is not None)
    repeats = [e["t"] for e in events if e["k"] == "partition_done"][-4:]
    positions = [rng.randrange(source.start, source.end) for _ in range(8)]
    positions += [source.end, *repeats, source.start + (source.end - source.start) // 4]
    for position in positions + positions[::-1]:  # back and forth over the same rows
        window = int(rng.choice([1, 3, 10]) * 1e9)
        state, offset = source.state_at(position, window)
        expect = State().fold(e for e in events if e["t"] <= position)
        assert _current(state) == _current(expect)
        later = min(source.end, position + int(5e9))
        source.advance(state, offset, later)
        expect.fold(e for e in events if position < e["t"] <= later)
        assert _current(state) == _current(expect)
    assert source._marks  # the later seeks started from checkpoints of the earlier ones
    source.close()
