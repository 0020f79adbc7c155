"""Recording files: round trip, seek, truncation recovery, corruption, crash safety."""

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import msgpack
import pytest

from provetop.recordings.format import END_MAGIC, PREFIX, TRAILER_SIZE
from provetop.recordings.framing import encode_checked_frame
from provetop.recordings.reader import RecordingError, open_recording, read_state, seek_state
from provetop.recordings.schema import SchemaError
from provetop.recordings.state import State, Window
from provetop.recordings.writer import (
    RecordingWriter,
    default_recording_dir,
    default_recording_path,
)
from tests.recordings.fixtures import hello, make_run

ROOT = Path(__file__).resolve().parents[2]


def _plain(obj):
    """What msgpack gives back (tuples become lists): the form read-back events take."""
    return msgpack.unpackb(msgpack.packb(obj), raw=False)


def _write(path, events, **kw):
    kw.setdefault("snapshot_every_s", 0.1)
    with RecordingWriter(path, **kw) as w:
        for e in events:
            w.write(e)
    return w


def _prefix_until(events, t):
    out = []
    for e in events:
        if e["t"] > t:
            break
        out.append(e)
    return out


@pytest.fixture(scope="module")
def run():
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    events = make_run(
        partitions=rng.randrange(2, 6),
        workers=rng.randrange(1, 3),
        devices=rng.randrange(1, 3),
        proofs=rng.randrange(1, 3),
        seed=seed,
    )
    return _plain(events)


@pytest.fixture(scope="module")
def recorded(run, tmp_path_factory):
    path = tmp_path_factory.mktemp("rec") / "run.pvtrec"
    w = _write(path, run)
    return path, w


def test_round_trip(run, recorded):
    path, w = recorded
    rec = open_recording(path)
    assert rec.complete and not rec.truncated and rec.truncation is None
    assert rec.events == run
    assert rec.hello == run[0]
    assert rec.header["format"] == 2 and rec.header["writer"].startswith("provetop")
    assert len(rec.snapshots) >= 3
    assert [(s.t, s.offset) for s in rec.snapshots] == w.snapshots
    assert rec.index["events"] == len(run)
    assert path.read_bytes().startswith(PREFIX)
    assert path.read_bytes().endswith(END_MAGIC)
    full = State().fold(run)
    again = read_state(path)
    assert _plain(again.snapshot()) == _plain(full.snapshot())
    assert again.totals() == full.totals()
    assert [vars(a) for a in again.attempts] == [vars(a) for a in full.attempts]
    assert {k: list(v) for k, v in again.segments.items()} == {
        k: list(v) for k, v in full.segments.items()
    }


def test_snapshots_fold_forward_to_the_full_state(run, recorded):
    """state_at(t) from the nearest snapshot equals the full fold of the events up to t, at
    random times and at every snapshot's own time (both via the loaded file and via seek)."""
    path, _ = recorded
    rec = open_recording(path)
    rng = random.Random()
    end = run[-1]["t"]
    times = [rng.randrange(0, end + 1) for _ in range(8)] + [s.t for s in rec.snapshots]
    times += [0, end, end + 10**9]
    for t in times:
        expected = _plain(State().fold(_prefix_until(run, t)).snapshot())
        assert _plain(rec.state_at(t).snapshot()) == expected, t
        assert _plain(seek_state(path, t).snapshot()) == expected, t


def test_seek_reads_less_than_the_whole_file(recorded, monkeypatch):
    path, _ = recorded
    rec = open_recording(path)
    target = rec.snapshots[-1].t
    folded = []
    original = State.apply

    def counting(self, event):
        folded.append(event)
        original(self, event)

    monkeypatch.setattr(State, "apply", counting)
    seek_state(path, target)
    assert len(folded) < len(rec.events) / 2


def _frame_bounds(path):
    """Byte offsets where each frame after the prefix starts, and the trailer start."""
    data = path.read_bytes()
    pos, starts = len(PREFIX), []
    end = len(data) - TRAILER_SIZE
    while pos < end:
        starts.append(pos)
        pos += 4 + int.from_bytes(data[pos : pos + 4], "big")
    return data, starts


def test_truncated_tail_at_every_offset_of_the_last_frames(run, tmp_path):
    path = tmp_path / "short.pvtrec"
    events = run[:80]
    _write(path, events, snapshot_every_s=0.05)
    data, starts = _frame_bounds(path)
    whole = open_recording(path)
    target = tmp_path / "cut.pvtrec"
    # every offset of the small frames; inside large ones (a snapshot) every 17th byte plus
    # the bytes around each boundary
    bounds = starts[-6:] + [len(data) - TRAILER_SIZE, len(data)]
    cuts: set[int] = set()
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        step = 1 if hi - lo <= 256 else 17
        cuts |= set(range(lo, hi, step)) | {lo + i for i in range(6)} | {hi - 1}
    for cut in sorted(cuts):
        target.write_bytes(data[:cut])
        rec = open_recording(target)
        assert rec.truncated and not rec.complete, cut
        # every event whose frame ends before the cut is there, nothing else
        n = sum(1 for off in whole.offsets if _frame_end(data, off) <= cut)
        assert rec.events == events[:n], cut
        assert rec.truncation.offset <= cut and rec.truncation.file_size == cut
        assert "truncated at byte" in str(rec.truncation)
        if cut % 7 == 0:
            assert rec.state().events == n
            assert _plain(rec.state_at(events[-1]["t"]).snapshot()) == _plain(
                State().fold(events[:n]).snapshot()
            )


def _frame_end(data, off):
    return off + 4 + int.from_bytes(data[off : off + 4], "big")


def test_file_cut_inside_the_header(tmp_path, recorded):
    path, _ = recorded
    data = path.read_bytes()
    target = tmp_path / "h.pvtrec"
    for cut in range(1, 40):
        target.write_bytes(data[:cut])
        rec = open_recording(target)
        assert rec.truncated and rec.events == [] and rec.hello is None


def test_an_empty_file_is_not_a_recording(tmp_path):
    """Zero bytes hold not even a cut magic: a file given by mistake, refused in one line."""
    target = tmp_path / "empty.pvtrec"
    target.write_bytes(b"")
    with pytest.raises(RecordingError, match="empty file"):
        open_recording(target)


def test_zero_filled_tail_is_a_truncation(run, recorded, tmp_path):
    path, _ = recorded
    data, starts = _frame_bounds(path)
    target = tmp_path / "z.pvtrec"
    target.write_bytes(data[: starts[-3]] + b"\x00" * 5000)
    rec = open_recording(target)
    assert rec.truncated and "zero-filled" in str(rec.truncation)
    assert rec.truncation.offset == starts[-3]


def test_not_a_recording(tmp_path):
    p = tmp_path / "x.pvtrec"
    p.write_bytes(b"GIF89a" + os.urandom(100))
    with pytest.raises(RecordingError, match="not a provetop recording"):
        open_recording(p)
    p.write_bytes(PREFIX[:-1] + b"\x07" + os.urandom(10))
    with pytest.raises(RecordingError, match="version 7"):
        open_recording(p)


def test_missing_unreadable_and_directory(tmp_path):
    with pytest.raises(RecordingError, match="No such file"):
        open_recording(tmp_path / "nope.pvtrec")
    with pytest.raises(RecordingError, match="directory"):
        open_recording(tmp_path)
    if os.geteuid() != 0:
        p = tmp_path / "locked.pvtrec"
        p.write_bytes(PREFIX)
        p.chmod(0)
        with pytest.raises(RecordingError, match="Permission"):
            open_recording(p)


def test_corrupt_frame_in_the_middle_names_its_offset(run, recorded, tmp_path):
    path, _ = recorded
    data, starts = _frame_bounds(path)
    victim = starts[len(starts) // 2]
    bad = bytearray(data)
    bad[victim + 4] = 0xC1  # never-used msgpack type byte
    target = tmp_path / "bad.pvtrec"
    target.write_bytes(bytes(bad))
    with pytest.raises(RecordingError, match=f"byte {victim}"):
        open_recording(target)
    # the same damage in a file without a footer (a crashed run) is still corruption, not a cut
    target.write_bytes(bytes(bad[: starts[-2]]))
    with pytest.raises(RecordingError, match=f"byte {victim}"):
        open_recording(target)


def test_schema_violation_names_its_offset(tmp_path):
    p = tmp_path / "s.pvtrec"
    w = RecordingWriter(p, validate_events=False, background_flush=False)
    w.write(_plain(hello()))
    off = w.offset
    w.write({"k": "marker", "t": 5, "name": 12})
    w.close()
    with pytest.raises(RecordingError, match=f"invalid event at byte {off}.*'name'"):
        open_recording(p)


def test_hello_must_come_first(tmp_path):
    p = tmp_path / "h.pvtrec"
    with RecordingWriter(p) as w:
        with pytest.raises(RecordingError, match="first event"):
            w.write({"k": "marker", "t": 0, "name": "x"})
        with pytest.raises(SchemaError):
            w.write({"k": "marker", "t": 0})
    raw = p.read_bytes()
    assert open_recording(p).events == []
    header_len = 4 + int.from_bytes(raw[8:12], "big")
    forged = raw[: 8 + header_len] + encode_checked_frame({"k": "marker", "t": 0, "name": "x"})
    p.write_bytes(forged)
    with pytest.raises(RecordingError, match="expected the hello"):
        open_recording(p)


def test_index_that_disagrees_with_the_file_is_corruption(run, tmp_path):
    p = tmp_path / "i.pvtrec"
    w = _write(p, run[:200])
    data = bytearray(p.read_bytes())
    index_off = int.from_bytes(data[-16:-8], "big")
    index = msgpack.unpackb(data[index_off + 4 : -20], raw=False)
    index["snapshots"][0][1] += 1
    new = bytes(data[:index_off]) + encode_checked_frame(index)
    new += index_off.to_bytes(8, "big") + END_MAGIC
    p.write_bytes(new)
    assert w.snapshots
    with pytest.raises(RecordingError, match="index"):
        open_recording(p)
    with pytest.raises(RecordingError):
        seek_state(p, index["snapshots"][0][0])


def test_unwritable_paths(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(RecordingError, match="cannot write recording"):
        RecordingWriter(blocker / "sub" / "r.pvtrec")
    with pytest.raises(RecordingError, match="cannot write recording"):
        RecordingWriter(tmp_path)


def test_parent_directories_are_created(tmp_path):
    p = tmp_path / "a" / "b" / "r.pvtrec"
    with RecordingWriter(p) as w:
        w.write(hello())
    assert open_recording(p).complete


def test_default_recording_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_recording_dir() == tmp_path / "provetop" / "recordings"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_recording_dir() == tmp_path / "home" / ".local/share/provetop/recordings"
    p = default_recording_path("eng/../x", tmp_path)
    assert p.parent == tmp_path and p.suffix == ".pvtrec" and ".." not in p.name


def test_background_flush_makes_events_visible_without_close(run, tmp_path):
    p = tmp_path / "live.pvtrec"
    w = RecordingWriter(p, flush_every_s=0.05, snapshot_every_s=1000)
    for e in run[:50]:
        w.write(e)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        rec = open_recording(p)
        if len(rec.events) == 50:
            break
        time.sleep(0.02)
    assert rec.events == run[:50] and rec.truncated and not rec.complete
    assert "did not close" in str(rec.truncation)
    w.close()
    assert open_recording(p).complete


_CHILD = textwrap.dedent(
    """
    import sys, time
    from provetop.recordings.writer import RecordingWriter
    from tests.recordings.fixtures import hello
    w = RecordingWriter(sys.argv[1], flush_every_s=0.5, snapshot_every_s=0.3)
    t0 = time.monotonic_ns()
    w.write(hello(0))
    i = 0
    print("ready", flush=True)
    while True:
        i += 1
        w.write({"k": "marker", "t": time.monotonic_ns() - t0, "name": f"m{i}"})
        time.sleep(0.002)
    """
)


def test_sigkill_loses_at_most_the_flush_interval(tmp_path):
    """A writer killed with SIGKILL leaves a file that reads back up to its last flush (the
    events' own clocks show how much was lost), reports the truncation, and folds."""
    p = tmp_path / "killed.pvtrec"
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(p)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(1.6)
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
    finally:
        proc.kill()
    rec = open_recording(p)
    assert rec.truncated and not rec.complete
    assert len(rec.events) > 100 and rec.snapshots
    last = rec.events[-1]["t"]
    # the child ran ~1.6 s after hello; the recording holds all but at most ~flush interval
    assert last >= 1.6e9 - 1.0e9, last
    assert read_state(p).events == len(rec.events)


def test_disk_full_is_a_clear_error():
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    with pytest.raises(RecordingError, match="No space left"):
        RecordingWriter("/dev/full")


class _FailingFile:
    """A file that accepts ``budget`` bytes, then fails like a full disk."""

    def __init__(self, real, budget):
        self.real, self.budget = real, budget

    def write(self, data):
        if len(data) > self.budget:
            raise OSError(28, "No space left on device")
        self.budget -= len(data)
        return self.real.write(data)

    def fileno(self):
        return self.real.fileno()

    def close(self):
        self.real.close()


def test_disk_full_mid_run_is_raised_by_the_next_write_and_close(run, tmp_path):
    p = tmp_path / "full.pvtrec"
    w = RecordingWriter(p, background_flush=False, flush_every_s=1000)
    w._file = _FailingFile(w._file, 2000)
    with pytest.raises(RecordingError, match="No space left"):
        for e in run:
            w.write(e)
            w.flush()
    with pytest.raises(RecordingError, match="No space left"):
        w.write(run[-1])
    with pytest.raises(RecordingError, match="No space left"):
        w.close()
    rec = open_recording(p)  # what reached the disk still reads, as a cut recording
    assert rec.truncated and rec.events == run[: len(rec.events)]


def test_without_background_thread_the_caller_flushes(run, tmp_path):
    p = tmp_path / "sync.pvtrec"
    w = RecordingWriter(p, background_flush=False, flush_every_s=0.01, snapshot_every_s=1000)
    for e in run[:30]:
        w.write(e)
    time.sleep(0.02)
    w.write(run[30])
    assert open_recording(p).events == run[:31]
    w.close()


def test_state_snapshot_rows_are_exact_copies(run):
    from dataclasses import asdict

    state = State().fold(run[: len(run) // 2])
    snap = state.snapshot()
    assert snap["partitions"] == [asdict(r) for r in state.partitions.values()]
    assert snap["open"] == [asdict(s) for s in state.open.values()]
    for row in state.partitions.values():
        row.phases_ms["synthesis"] = -1.0  # snapshots and attempts hold copies
    assert all(r["phases_ms"].get("synthesis") != -1.0 for r in snap["partitions"])
    assert all(a.phases_ms.get("synthesis") != -1.0 for a in state.attempts)


def test_snapshots_take_at_most_about_half_the_file(tmp_path):
    """However often snapshots are asked for, they never outweigh the events between them."""
    events = _plain(make_run(partitions=6, workers=2, devices=1, proofs=4, seed=5))
    p = tmp_path / "dense.pvtrec"
    w = _write(p, events, snapshot_every_s=0.0)
    data, starts = _frame_bounds(p)
    sizes = {s.offset: _frame_end(data, s.offset) - s.offset for s in open_recording(p).snapshots}
    assert len(sizes) == len(w.snapshots) >= 3
    assert sum(sizes.values()) <= 0.5 * len(data) + max(sizes.values())


def test_index_event_count_must_match(run, tmp_path):
    p = tmp_path / "n.pvtrec"
    _write(p, run[:100])
    data = p.read_bytes()
    index_off = int.from_bytes(data[-16:-8], "big")
    index = msgpack.unpackb(data[index_off + 4 : -20], raw=False)
    index["events"] += 1
    trailer = index_off.to_bytes(8, "big") + END_MAGIC
    p.write_bytes(data[:index_off] + encode_checked_frame(index) + trailer)
    with pytest.raises(RecordingError, match="does not match"):
        open_recording(p)


def test_close_racing_with_writes_leaves_a_complete_file(run, tmp_path):
    import threading

    p = tmp_path / "race.pvtrec"
    w = RecordingWriter(p, flush_every_s=0.01, snapshot_every_s=0.05)
    w.write(run[0])
    accepted = [run[0]]

    def writer():
        for e in run[1:]:
            try:
                w.write(e)
            except RecordingError:
                return
            accepted.append(e)

    thread = threading.Thread(target=writer)
    thread.start()
    time.sleep(0.005)
    w.close()
    thread.join()
    rec = open_recording(p)
    assert rec.complete and rec.events == accepted


def test_fold_recording_streams_the_same_state(run, recorded):
    from provetop.recordings.reader import fold_recording

    path, _ = recorded
    rec, state = fold_recording(path)
    whole = open_recording(path)
    assert rec.events == [] and rec.event_count == len(run) == whole.event_count
    assert rec.duration_ns == whole.duration_ns == max(e["t"] for e in run)
    assert [(s.t, s.offset, s.event_index) for s in rec.snapshots] == [
        (s.t, s.offset, s.event_index) for s in whole.snapshots
    ]
    assert rec.complete and rec.hello == run[0]
    assert _plain(state.snapshot()) == _plain(whole.state().snapshot())
    assert [vars(a) for a in state.attempts] == [vars(a) for a in whole.state().attempts]
    with pytest.raises(RecordingError, match="fold_recording"):
        rec.state()


def test_sample_recordings_read_and_match_their_stored_summaries():
    """recordings/samples holds real GPU runs with their `provetop summary` output: each must
    still read (the format is stable) and fold to the partition counts its summary states."""
    import re
    from pathlib import Path

    from provetop.recordings.summary import build_summary

    samples = sorted((Path(__file__).parents[2] / "recordings" / "samples").glob("*.pvtrec"))
    assert samples
    for rec in samples:
        text = rec.with_suffix(".summary.txt").read_text()
        m = re.search(r"partitions: (\d+) \((\d+) ok, (\d+) failed", text)
        assert m, rec
        totals = build_summary(rec)["totals"]
        got = (totals["partitions"], totals["partitions_ok"], totals["partitions_failed"])
        assert got == tuple(int(x) for x in m.groups()), rec


def test_exclusive_writer_never_truncates_an_existing_path(tmp_path):
    """The engine opens its recording with O_EXCL: a path that exists (or appears after the
    CLI's existence check) is refused, not truncated, and is left as it was."""
    import pytest

    from provetop.recordings.errors import RecordingError
    from provetop.recordings.writer import RecordingWriter

    victim = tmp_path / "precious"
    victim.write_bytes(b"keep me")
    link = tmp_path / "link.pvtrec"
    link.symlink_to(victim)
    for path in (victim, link):
        with pytest.raises(RecordingError, match="exists"):
            RecordingWriter(path, exclusive=True, background_flush=False)
    assert victim.read_bytes() == b"keep me"
    fresh = tmp_path / "fresh.pvtrec"
    RecordingWriter(fresh, exclusive=True, background_flush=False).close()
    assert fresh.stat().st_size > 0


def test_seek_snapshots_carry_the_window_and_totals_and_the_writer_stays_bounded(tmp_path):
    """The writer trims its reducer to a window at each seek snapshot (without it, it kept
    every partition row of the run, ~1.7 KB each): a seek then shows the window's newest rows,
    exactly as the full fold has them, and the run's totals; summary still folds everything."""
    events = _plain(make_run(partitions=30, workers=2, devices=1, proofs=3, seed=7))
    window = Window(rows=4, history_ns=10**9, items=1)
    path = tmp_path / "w.pvtrec"
    most = 0
    with RecordingWriter(path, snapshot_every_s=0.0, window=window) as w:
        for e in events:
            w.write(e)
            most = max(most, len(w.state.partitions))
    assert len(w.snapshots) >= 5
    full = State().fold(events)
    assert len(full.partitions) == 90 and most < 40  # bounded: never every row
    assert len(w.state.partitions) <= window.rows
    rec = open_recording(path)
    assert _plain(read_state(path).totals()) == _plain(full.totals())  # summary: whole run
    for ref in rec.snapshots:
        for seeked in (rec.state_at(ref.t), seek_state(path, ref.t)):
            prefix = State().fold(_prefix_until(events, ref.t))
            assert _plain(seeked.totals()) == _plain(prefix.totals()), ref.t
            assert seeked.partitions.keys() <= prefix.partitions.keys()
            for key, row in seeked.partitions.items():
                assert _plain(vars(row)) == _plain(vars(prefix.partitions[key]))
            newest = sorted(
                (r.t_done, k) for k, r in prefix.partitions.items() if r.ok is not None
            )[-window.rows :]
            assert {k for _, k in newest} <= seeked.partitions.keys()
