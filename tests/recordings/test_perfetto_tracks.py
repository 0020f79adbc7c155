"""The Perfetto export keeps every slice: each lane on a thread of its own, named, with a
stable, non-zero tid, and no two slices of one thread partially overlapping. Checked on the
sample recordings and on a fault-injected engine run, by counting here and by loading the
files in Perfetto's own trace processor (the UI's WASM build in headless Chromium).

Why both: Perfetto reads ``tid`` 0 as the process itself and keys threads by ``tid`` alone, so
a lane on ``tid`` 0, or one ``tid`` in two processes, lands on another lane's track, where the
trace processor drops every slice that partially overlaps one already there (it says so only in
its ``stats`` table). The count here states that rule; the real trace processor checks it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from provetop.recordings.export_perfetto import (
    GPU_LANE,
    UPLOAD_LANE,
    export_perfetto,
    lane_tid,
    write_perfetto,
)
from provetop.recordings.reader import open_recording
from provetop.recordings.schema import PHASES
from tests.recordings import perfetto_ui

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "recordings" / "samples").glob("*.pvtrec"))


@pytest.fixture(scope="module")
def recordings(fault_run: Path) -> list[Path]:
    return [*SAMPLES, fault_run]


def _ns(us: float) -> int:
    return round(us * 1000)


def overlapping_slices(trace: dict[str, Any]) -> dict[tuple[int, int], int]:
    """(pid, tid) -> slices that partially overlap an earlier one of the same thread, with
    threads keyed as Perfetto keys them: by ``tid`` alone (so one ``tid`` in two processes is
    one thread here, under the first pid seen)."""
    spans: dict[int, list[tuple[int, int]]] = {}
    pid_of: dict[int, int] = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            pid_of.setdefault(e["tid"], e["pid"])
            start = _ns(e["ts"])
            spans.setdefault(e["tid"], []).append((start, start + _ns(e["dur"])))
    out: dict[tuple[int, int], int] = {}
    for tid, items in spans.items():
        items.sort(key=lambda s: (s[0], -s[1]))
        open_ends: list[int] = []  # the ends of the slices that enclose the current one
        bad = 0
        for start, end in items:
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            if open_ends and end > open_ends[-1]:
                bad += 1  # starts inside a slice and ends after it: not nested
                continue
            open_ends.append(end)
        out[(pid_of[tid], tid)] = bad
    return out


def _threads(trace: dict[str, Any]) -> dict[tuple[int, int], str]:
    return {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }


def test_overlapping_slices_are_counted():
    """The count itself: nested slices are fine, a partial overlap is one, as Perfetto has it."""
    trace = {
        "traceEvents": [
            {"ph": "X", "pid": 1, "tid": 5, "ts": 0, "dur": 10},
            {"ph": "X", "pid": 1, "tid": 5, "ts": 2, "dur": 3},  # nested
            {"ph": "X", "pid": 1, "tid": 5, "ts": 10, "dur": 5},  # adjacent
            {"ph": "X", "pid": 1, "tid": 5, "ts": 12, "dur": 9},  # partial
            {"ph": "X", "pid": 2, "tid": 5, "ts": 13, "dur": 1},  # same tid, other pid: nested
            {"ph": "X", "pid": 2, "tid": 5, "ts": 14, "dur": 3},  # partial with (10, 15)
        ]
    }
    assert overlapping_slices(trace) == {(1, 5): 2}


@pytest.mark.parametrize(
    "index", range(len(SAMPLES) + 1), ids=[p.stem for p in SAMPLES] + ["faults"]
)
def test_every_lane_has_a_named_thread_of_its_own_and_keeps_every_slice(recordings, index):
    path = recordings[index]
    trace = export_perfetto(path)
    events = open_recording(path).events
    evs = trace["traceEvents"]
    named = _threads(trace)
    placed = [e for e in evs if e["ph"] in ("X", "i")]
    assert all(e["tid"] != 0 for e in evs if "tid" in e), "tid 0 is the process in Perfetto"
    pids_of_tid: dict[int, set[int]] = {}
    for e in evs:
        if "tid" in e:
            pids_of_tid.setdefault(e["tid"], set()).add(e["pid"])
    assert all(len(p) == 1 for p in pids_of_tid.values()), "a tid in two processes"
    assert all((e["pid"], e["tid"]) in named for e in placed)
    per_process = [(pid, name) for (pid, _), name in named.items()]
    assert len(per_process) == len(set(per_process)), "two threads of a process, one name"
    assert set(overlapping_slices(trace).values()) <= {0}
    # nothing left out: a slice per phase begun, an instant per fault
    assert sum(1 for e in evs if e["ph"] == "X" and e["name"] in PHASES) == sum(
        1 for e in events if e["k"] == "phase_begin"
    )
    assert sum(1 for e in evs if e["ph"] == "i" and e["name"].startswith("fault:")) == sum(
        1 for e in events if e["k"] == "fault"
    )
    # stable ids: a worker's lane is a function of its device and worker number alone
    base = (open_recording(path).hello or {}).get("config", {}).get("synth_worker_base")
    for e in events:
        if e["k"] == "phase_begin" and (base is None or e["worker"] < base):
            tid = lane_tid(e["device"], 1 + e["worker"])
            assert named[(e["device"] + 1, tid)] == f"worker {e['worker']}"
    for d in {e["device"] for e in events if e["k"] == "phase_begin"}:
        assert named.get((d + 1, lane_tid(d, GPU_LANE))) == "GPU (mutex held)"
        if (d + 1, lane_tid(d, UPLOAD_LANE)) in named:
            assert named[(d + 1, lane_tid(d, UPLOAD_LANE))] == "upload"


def test_perfetto_keeps_every_slice_of_the_samples_and_a_fault_injected_run(recordings, tmp_path):
    """The files loaded in Perfetto's own trace processor: every slice on the thread it was
    written on, every thread named as written, nothing reported lost."""
    try:
        perfetto_ui.require()
    except perfetto_ui.PerfettoUnavailable as exc:
        pytest.skip(str(exc))
    files = []
    for path in recordings:
        out = tmp_path / f"{path.stem}.json"
        write_perfetto(path, out)
        files.append(out)
    for out, loaded in zip(files, perfetto_ui.load_all(files), strict=True):
        trace = json.loads(out.read_text())
        total = sum(1 for e in trace["traceEvents"] if e["ph"] in ("X", "i"))
        assert loaded.stats == [], out.name
        assert loaded.slices == total, out.name
        assert loaded.thread_slices == perfetto_ui.expected(trace), out.name
        assert {k: loaded.threads.get(k) for k in _threads(trace)} == _threads(trace), out.name
        values = sum(len(e["args"]) for e in trace["traceEvents"] if e["ph"] == "C")
        assert loaded.counters == values, out.name
