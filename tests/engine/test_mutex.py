"""The device mutex: never two workers of one device in the GPU region; waits accounted."""

from __future__ import annotations

from collections import defaultdict

from provetop.engine.partition.testing import GatedBackend
from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.kernels.backends import get_backend
from provetop.recordings.schema import PHASES

DELAY = 0.05  # seconds each h_step holds the GPU region, so workers really contend


def _run(**overrides):
    cfg = from_preset("ci", partitions=4, workers_per_device=2, **overrides)
    engine = Engine(cfg, listen=False, backend=GatedBackend(get_backend("cpu"), delay_s=DELAY))
    sub = engine.subscribe()
    engine.start()
    assert engine.wait(60)
    engine.close()
    return engine, [e for e in sub.drain() if e["k"] != "snapshot"]


def _overlaps(intervals):
    intervals = sorted(intervals)
    return [(a, b) for a, b in zip(intervals, intervals[1:], strict=False) if b[0] < a[1]]


def test_one_worker_at_a_time_in_the_gpu_region_and_waits_add_up():
    engine, events = _run(devices=(0, 1), proofs=2, concurrency=2)
    assert engine.ok
    held = defaultdict(list)  # device -> [(acquire t, release t, worker)]
    gpu = defaultdict(list)  # device -> [(begin t, end t, worker)]
    opened, begun = {}, {}
    for e in events:
        if e["k"] == "mutex":
            key = (e["device"], e["worker"])
            if e["action"] == "acquire":
                assert key not in opened
                opened[key] = e
            else:
                acq = opened.pop(key)
                held[e["device"]].append((acq["t"], e["t"], e["worker"]))
                assert e["wait_ns"] == acq["wait_ns"]
                assert e["hold_ns"] == e["t"] - acq["t"]
        elif e["k"] in ("phase_begin", "phase_end") and PHASES[e["phase"]].gpu:
            key = (e["device"], e["worker"], e["phase"])
            if e["k"] == "phase_begin":
                begun[key] = e["t"]
            else:
                gpu[e["device"]].append((begun.pop(key), e["t"], e["worker"]))
    assert not opened and not begun
    assert set(held) == {0, 1}, "both devices worked"
    for device in held:
        assert not _overlaps(held[device]), f"two workers held device {device}'s mutex"
        assert not _overlaps(gpu[device]), f"two workers in device {device}'s GPU region"
        assert {w for *_, w in held[device]} == {0, 1}

    # accounting: partition_done carries the mutex figures of its acquire/release
    done = [e for e in events if e["k"] == "partition_done"]
    acquires = {
        (e["proof"], e["partition"]): e
        for e in events
        if e["k"] == "mutex" and e["action"] == "acquire"
    }
    releases = {
        (e["proof"], e["partition"]): e
        for e in events
        if e["k"] == "mutex" and e["action"] == "release"
    }
    for d in done:
        key = (d["proof"], d["partition"])
        assert d["mutex_wait_ms"] == acquires[key]["wait_ns"] / 1e6
        assert d["gpu_total_ms"] == releases[key]["hold_ns"] / 1e6
        assert d["gpu_total_ms"] >= DELAY * 1e3 * 0.9  # the h_step delay is inside the hold
        # the wait is inside the mutex_wait phase
        assert d["mutex_wait_ms"] <= d["phases_ms"]["mutex_wait"] + 1e-6
    # workers of one device contended: somebody waited for most of a hold
    assert max(d["mutex_wait_ms"] for d in done) >= DELAY * 1e3 * 0.5


def test_reducer_sees_the_same_waits():
    engine, events = _run()
    state = engine.state
    rows = list(state.partitions.values())
    assert len(rows) == 4 and all(r.ok and r.verified for r in rows)
    by_key = {(e["proof"], e["partition"]): e for e in events if e["k"] == "partition_done"}
    for r in rows:
        assert r.mutex_wait_ms == by_key[(r.proof, r.partition)]["mutex_wait_ms"]
    # GPU-lane busy fraction is between 0 and 1 and the lane exists
    lanes = state.lanes()
    assert ("gpu", 0) in lanes
    assert 0 < state.busy_fraction(0, state.first_t, state.t) <= 1
