"""The cuzk converter against a modeled cuzk run whose truth is known (sources/cuzk/sim.py)."""

from __future__ import annotations

import random

import pytest

from provetop.recordings.schema import validate
from provetop.recordings.state import State
from provetop.sources.cuzk import sim
from provetop.sources.cuzk.convert import MS, SYNTH_WORKER_BASE, Converter


def convert(lines, **kw):
    conv = Converter(**kw)
    events = []
    for line in lines:
        events += conv.feed_line(line)
    events += conv.flush()
    return conv, events


def check_stream(events):
    assert events[0]["k"] == "hello" and events[0]["source"] == "cuzk"
    assert events[0]["read_only"] is True and events[0]["modeled"] is False
    last = 0
    for e in events:
        validate(e)
        assert e["t"] >= last, e
        last = e["t"]


def by_key(events, kind):
    return {(e["proof"], e["partition"]): e for e in events if e["k"] == kind}


def random_run(seed, failing=False, workers=2):
    rng = random.Random(seed)
    jobs = rng.randint(2, 3)
    parts = rng.randint(3, 6)
    scenarios = {(j, p): rng.choice(sim.SCENARIOS) for j in range(jobs) for p in range(parts)}
    if failing:
        scenarios[(1, rng.randrange(parts))] = sim.FAIL_OOM
    return sim.simulate(
        rng, jobs=jobs, partitions=parts, workers_per_device=workers, scenarios=scenarios
    )


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_reconstruction_matches_the_modeled_truth(workers):
    seed = random.randrange(1 << 30)
    run = random_run(seed, workers=workers)
    conv, events = convert(run.lines, workers_per_device=workers)
    check_stream(events)
    done = by_key(events, "partition_done")
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
    assert len(done) == len(run.calls), seed
    for c in run.calls:
        key = (c.job, c.partition)
        d = done[key]
        assert d["ok"] and d["worker"] == c.worker and d["device"] == 0, (seed, key)
        assert d["gpu_total_ms"] == c.gpu_total, (seed, key)
        assert d["mutex_wait_ms"] == c.wait, (seed, key)
        assert d["prestage"] == c.prestage, (seed, key, c.scenario)
        assert d["phases_ms"]["synthesis"] == c.synth_ms
        assert d["phases_ms"]["ntt_msm_h"] == c.ntt
        assert d["t"] == c.end * MS
        assert acquires[key]["t"] == c.acquire * MS, (seed, key)
        assert releases[key]["t"] == c.release * MS, (seed, key)
        assert releases[key]["hold_ns"] == c.gpu_total * MS
    state = State().fold(events)
    lane = state.segments[("worker", 0, run.calls[0].worker)]
    assert all(seg.ok for seg in lane)
    ntt = {(s.proof, s.partition): s for s in lane if s.phase == "ntt_msm_h"}
    first = run.calls[0]
    seg = ntt[(first.job, first.partition)]
    assert (seg.start, seg.end) == (first.acquire * MS, (first.acquire + first.ntt) * MS)
    tails = [s for s in lane if s.phase == "tail_msm"]
    assert tails and all(s.end - s.start > 0 for s in tails)
    totals = state.totals()
    assert totals["proofs_done"] == len(run.job_ids) and totals["proofs_failed"] == 0
    assert totals["partitions_ok"] == len(run.calls)
    expected_ooms = sum(c.scenario in (sim.MALLOC_OOM, sim.SETUP_FALLBACK) for c in run.calls)
    assert totals["ooms"] == expected_ooms
    assert totals["fallbacks"] == sum(c.prestage == "fallback" for c in run.calls)
    # the GPU lane never overlaps itself: one mutex per GPU
    gpu = sorted(state.segments[("gpu", 0)], key=lambda s: s.start)
    assert all(a.end <= b.start for a, b in zip(gpu, gpu[1:], strict=False))
    assert conv.stats["unknown"] == 0 and conv.stats["malformed"] == 0


def test_synthesis_lanes_and_proof_numbers():
    run = random_run(random.randrange(1 << 30))
    conv, events = convert(run.lines)
    begins = [e for e in events if e["k"] == "phase_begin" and e["phase"] == "synthesis"]
    assert len(begins) == len(run.calls)
    assert all(e["worker"] >= SYNTH_WORKER_BASE and e["device"] == 0 for e in begins)
    assert conv.proofs == {job_id: i for i, job_id in enumerate(run.job_ids)}
    markers = [e["name"] for e in events if e["k"] == "marker"]
    assert markers == [f"cuzk job {j} = proof {i}" for i, j in enumerate(run.job_ids)]


def test_failure_fails_the_partition_and_the_proof():
    seed = random.randrange(1 << 30)
    run = random_run(seed, failing=True)
    conv, events = convert(run.lines)
    check_stream(events)
    failed = next(c for c in run.calls if c.failed)
    done = by_key(events, "partition_done")
    d = done[(failed.job, failed.partition)]
    assert not d["ok"] and "out of memory" in d["failure"] and d["will_retry"] is False
    assert d["prestage"] == "fallback"
    assert d["mutex_wait_ms"] == failed.wait, seed
    faults = [e for e in events if e["k"] == "fault" and e.get("partition") == failed.partition]
    assert any(f["kind"] == "oom" and f.get("proof") == failed.job for f in faults)
    proofs = {e["proof"]: e["ok"] for e in events if e["k"] == "proof_done"}
    assert proofs[failed.job] is False
    assert all(proofs[j] for j in range(len(run.job_ids)) if j != failed.job)
    for c in run.calls:
        if c.skipped:
            assert not done[(c.job, c.partition)]["ok"]
            assert "skipped" in done[(c.job, c.partition)]["failure"]
    state = State().fold(events)
    assert state.totals()["proofs_failed"] == 1
    failed_segments = [
        s
        for lane in state.segments.values()
        for s in lane
        if not s.ok and s.proof == failed.job and s.partition == failed.partition
    ]
    assert failed_segments and failed_segments[-1].end == failed.release * MS


def test_garbage_lines_are_counted_and_change_nothing():
    seed = random.randrange(1 << 30)
    clean = sim.simulate(random.Random(seed), jobs=2, partitions=3)
    noisy = sim.simulate(random.Random(seed), jobs=2, partitions=3, noise=True)
    garbage = [line for line in noisy.lines if line.startswith("garbage")]
    _, a = convert(clean.lines)
    conv, b = convert(noisy.lines)
    assert conv.stats["unknown"] == len(garbage) > 0
    assert list(conv.unknown_samples)[-1].startswith("unknown: garbage")
    strip = [{k: v for k, v in e.items() if k not in ("wall_ns", "engine_id")} for e in a]
    assert strip == [{k: v for k, v in e.items() if k not in ("wall_ns", "engine_id")} for e in b]


def test_truncated_and_malformed_lines_are_counted_never_trusted():
    run = sim.simulate(random.Random(random.randrange(1 << 30)), jobs=1, partitions=2)
    conv = Converter()
    events = []
    for line in run.lines:
        events += conv.feed_line(line)
    events += conv.feed_line("TIMELINE,123,GPU_E")  # cut short mid-file
    events += conv.feed_line("CUZK_TIMING: gpu_tid=0 tail_msm_ms=", truncated=True)
    events += conv.feed_line("TIMELINE,notanumber,GPU_END,job,worker=0")
    events += conv.feed_line("CUZK_TIMING: ###")
    events += conv.flush()
    assert conv.stats["malformed"] == 3 and conv.stats["truncated"] == 1
    assert sum(e["k"] == "partition_done" for e in events) == 2
    check_stream(events)


def test_worker_to_gpu_map_from_status_and_default():
    conv = Converter(workers_per_device=2)
    lines = [
        "TIMELINE,10,GPU_PICKUP,j,worker=3,partition=0",
        "TIMELINE,11,GPU_START,j,worker=3,partition=0",
        "TIMELINE,900,GPU_END,j,worker=3,partition=0,gpu_ms=889",
    ]
    events = [e for line in lines for e in conv.feed_line(line)] + conv.flush()
    d = next(e for e in events if e["k"] == "partition_done")
    assert (d["device"], d["worker"]) == (1, 1)  # 3 = device 1, second worker
    assert d["gpu_total_ms"] == 889.0 and d["prestage"] == "skip"
    assert any(e["k"] == "phase_begin" and e["phase"] == "gpu_prove" for e in events)

    conv = Converter(workers_per_device=2)
    conv.learn_status(
        {
            "gpu_workers": [
                {"worker_id": 0, "gpu_ordinal": 2},
                {"worker_id": 3, "gpu_ordinal": 2},
                {"worker_id": 1, "gpu_ordinal": 5},
            ]
        }
    )
    events = [e for line in lines for e in conv.feed_line(line)] + conv.flush()
    d = next(e for e in events if e["k"] == "partition_done")
    assert (d["device"], d["worker"]) == (2, 1)
    assert [dev["index"] for dev in events[0]["devices"]] == [0, 2, 5]


def test_timing_only_log_becomes_sequential_partitions():
    run = sim.simulate(random.Random(random.randrange(1 << 30)), jobs=1, partitions=4, trace=False)
    timing = [line for line in run.lines if line.startswith("CUZK_TIMING")]
    conv, events = convert(timing)
    check_stream(events)
    done = sorted((e for e in events if e["k"] == "partition_done"), key=lambda e: e["partition"])
    assert [d["gpu_total_ms"] for d in done] == [
        c.gpu_total for c in sorted(run.calls, key=lambda c: c.start)
    ]
    assert [d["t"] for d in done] == sorted(d["t"] for d in done)


def test_status_only_mode_drives_partitions():
    seed = random.randrange(1 << 30)
    run = random_run(seed)
    end = max(c.end for c in run.calls)
    conv = Converter()
    events = []
    for t in range(0, end + 1000, 250):
        events += conv.feed_status(sim.status_snapshot(run, t))
    events += conv.flush()
    check_stream(events)
    done = by_key(events, "partition_done")
    assert len(done) == len(run.calls)
    for c in run.calls:
        d = done[(c.job, c.partition)]
        assert d["ok"] and d["worker"] == c.worker
        assert d["phases_ms"]["synthesis"] == c.synth_ms
        assert d["gpu_total_ms"] == c.end - c.start
    proofs = [e for e in events if e["k"] == "proof_done"]
    assert len(proofs) == len(run.job_ids) and all(p["ok"] for p in proofs)


def test_status_outage_is_one_fault_and_recovery_is_logged():
    conv = Converter()
    events = conv.feed_status_error("connection refused")
    events += conv.feed_status_error("connection refused")
    events += conv.feed_status_error("invalid JSON")
    events += conv.feed_status({"uptime_secs": 5.0, "pipelines": [], "gpu_workers": []})
    events += conv.feed_status([1, 2])
    events += conv.flush()
    faults = [e for e in events if e["k"] == "fault"]
    assert [f["kind"] for f in faults] == ["source", "source"]
    assert "connection refused" in faults[0]["message"]
    assert any(e["k"] == "engine_state" and "again" in (e.get("reason") or "") for e in events)
    assert conv.stats["status_errors"] == 4 and conv.stats["status_ok"] == 1


def test_damaged_logs_never_break_the_stream():
    """Dropped, duplicated and swapped lines, garbage and status snapshots mixed in: the
    converter never raises and its output stays valid and ordered."""
    for _ in range(40):
        rng = random.Random(random.randrange(1 << 30))
        scen = {
            (j, p): rng.choice(sim.SCENARIOS + (sim.FAIL_OOM,)) for j in range(2) for p in range(4)
        }
        workers = rng.randint(1, 3)
        run = sim.simulate(
            rng, jobs=2, partitions=4, workers_per_device=workers, scenarios=scen, noise=True
        )
        lines = list(run.lines)
        for _ in range(rng.randint(0, 8)):
            j = rng.randrange(len(lines))
            op = rng.random()
            if op < 0.4:
                del lines[j]
            elif op < 0.7:
                lines.insert(j, lines[j])
            else:
                k = min(len(lines) - 1, j + 1)
                lines[j], lines[k] = lines[k], lines[j]
        conv = Converter(workers_per_device=workers)
        events = []
        for i, line in enumerate(lines):
            events += conv.feed_line(line)
            if i == len(lines) // 2:
                events += conv.feed_status(sim.status_snapshot(run, 3000))
        events += conv.flush()
        check_stream(events)
        State().fold(events).totals()


def test_a_dropped_pickup_does_not_hold_the_stream():
    """A worker that picks a partition up and then picks another one never started the first
    (cuzk skipped it: its INFO line may be filtered out): it must not hold events back."""
    conv = Converter()
    lines = [
        "TIMELINE,1,GPU_PICKUP,i,worker=1,partition=0",
        "TIMELINE,2,GPU_START,i,worker=1,partition=0",
        "TIMELINE,3,GPU_END,i,worker=1,partition=0,gpu_ms=1",
        "TIMELINE,10,SYNTH_START,j,partition=0",
        "TIMELINE,20,SYNTH_END,j,partition=0,synth_ms=10",
        "TIMELINE,30,GPU_PICKUP,j,worker=0,partition=0",
        "TIMELINE,40,SYNTH_START,k,partition=0",
        "TIMELINE,50,SYNTH_END,k,partition=0,synth_ms=10",
        "TIMELINE,60,GPU_PICKUP,k,worker=0,partition=0",
        "TIMELINE,61,GPU_START,k,worker=0,partition=0",
        "TIMELINE,900,GPU_END,k,worker=0,partition=0,gpu_ms=839",
        "TIMELINE,5000,SYNTH_START,k,partition=1",
    ]
    events = [e for line in lines for e in conv.feed_line(line)]
    done = [e for e in events if e["k"] == "partition_done"]  # released before any flush
    assert [(d["proof"], d["ok"]) for d in done] == [(0, True), (1, False), (2, True)]
    assert "never started" in done[1]["failure"]


def test_a_build_without_gpu_start_lines():
    """Older engines log GPU_PICKUP but no GPU_START: the pickup starts the call."""
    run = sim.simulate(random.Random(random.randrange(1 << 30)), jobs=2, partitions=3)
    lines = [line for line in run.lines if ",GPU_START," not in line]
    conv, events = convert(lines)
    check_stream(events)
    done = by_key(events, "partition_done")
    for c in run.calls:
        d = done[(c.job, c.partition)]
        assert d["ok"] and d["gpu_total_ms"] == c.gpu_total
        assert abs(d["mutex_wait_ms"] - c.wait) <= c.start - c.pickup  # pickup is 1 ms early


def test_synthesis_lanes_are_capped():
    lanes = random.randint(0, 3)
    lines = [f"TIMELINE,{i},SYNTH_START,j,partition={i}" for i in range(6)]
    lines += [
        f"TIMELINE,{100 + i},SYNTH_END,j,partition={i},synth_ms={100 + i - i}" for i in range(6)
    ]
    conv, events = convert(lines, synth_lanes=lanes)
    begins = [e for e in events if e["k"] == "phase_begin"]
    assert len(begins) == lanes
    assert sorted({e["worker"] for e in begins}) == list(range(100, 100 + lanes))
