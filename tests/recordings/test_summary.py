"""``summary`` and the Perfetto export agree with the events, computed here independently."""

import json
import random

import msgpack
import pytest

from provetop.recordings.export_perfetto import export_perfetto, lane_tid, write_perfetto
from provetop.recordings.prometheus.fold import MetricsFold
from provetop.recordings.reader import open_recording
from provetop.recordings.schema import PHASES, make
from provetop.recordings.summary import build_summary, format_summary
from provetop.recordings.writer import RecordingWriter
from tests.recordings.fixtures import MS, hello, make_run


def _plain(obj):
    return msgpack.unpackb(msgpack.packb(obj), raw=False)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    events = _plain(
        make_run(
            partitions=rng.randrange(2, 6),
            workers=rng.randrange(1, 3),
            devices=rng.randrange(1, 3),
            proofs=rng.randrange(1, 4),
            seed=seed,
        )
    )
    path = tmp_path_factory.mktemp("sum") / "run.pvtrec"
    with RecordingWriter(path, snapshot_every_s=0.1) as w:
        for e in events:
            w.write(e)
    return events, path, seed


def _union(intervals):
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + ((cur_e - cur_s) if cur_e is not None else 0)


def _gpu_intervals(events, device):
    open_, out = {}, []
    for e in events:
        if e["k"] in ("phase_begin", "phase_end") and e["device"] == device:
            if not PHASES[e["phase"]].gpu:
                continue
            key = (e["worker"], e["phase"])
            if e["k"] == "phase_begin":
                open_[key] = e["t"]
            else:
                out.append((open_.pop(key), e["t"]))
    return out


def test_summary_rows_and_totals_match_the_events(case):
    events, path, seed = case
    s = build_summary(path)
    done = [e for e in events if e["k"] == "partition_done"]
    expected_rows = sorted(
        (
            {
                "proof": e["proof"],
                "partition": e["partition"],
                "attempt": e["attempt"],
                "worker": e["worker"],
                "device": e["device"],
                "ok": e["ok"],
                "prestage": e["prestage"],
                "prestage_reason": e.get("prestage_reason"),
                "forced": bool(e.get("forced")),
                "mutex_wait_ms": e["mutex_wait_ms"],
                "phases_ms": e["phases_ms"],
                "gpu_total_ms": e["gpu_total_ms"],
                "verified": e.get("verified"),
                "failure": e.get("failure"),
                "status": "done" if e["ok"] else "failed",
            }
            for e in done
        ),
        key=lambda r: (r["proof"], r["partition"]),
    )
    assert s["attempts"] == expected_rows, seed
    t = s["totals"]
    assert t["ooms"] == sum(1 for e in events if e["k"] == "fault" and e["kind"] == "oom")
    assert t["retries"] == sum(1 for e in done if e["attempt"] > 0)
    # every attempt's pre-stage outcome, failed attempts included
    assert t["fallbacks"] == sum(1 for e in done if e["prestage"] == "fallback")
    assert t["prestage_skip"] == sum(1 for e in done if e["prestage"] == "skip")
    assert t["prestage_ok"] == sum(1 for e in done if e["prestage"] == "ok")
    last = {}
    for e in done:
        last[(e["proof"], e["partition"])] = e
    assert t["partitions"] == len(last)
    assert t["partitions_verified"] == sum(1 for e in last.values() if e.get("verified"))
    proofs = [e for e in events if e["k"] == "proof_done" and e["ok"]]
    first = min(e["t"] for e in events if e["k"] == "phase_begin")
    assert t["proofs_done"] == len(proofs)
    assert t["s_per_proof"] == pytest.approx((proofs[-1]["t"] - first) / 1e9 / len(proofs))
    end = max(e["t"] for e in events)
    devices = sorted({e["device"] for e in done})
    for d in devices:
        busy = _union(_gpu_intervals(events, d)) / (end - first)
        assert t["gpu_busy_fraction_by_device"][str(d)] == pytest.approx(busy), (seed, d)
    assert s["modeled"] is True and s["complete"] is True and s["truncated"] is False
    json.dumps(s, allow_nan=False)  # valid JSON


def test_summary_text(case):
    events, path, _ = case
    s = build_summary(path)
    text = format_summary(s)
    rows = [line for line in text.splitlines() if line.lstrip()[:1].isdigit()]
    assert len(rows) == len(s["attempts"])
    assert "device memory modeled" in text and "OOMs: 1 (modeled memory)" in text
    assert "TRUNCATED" not in text
    assert "oom in msm_h" in text and "retry after OOM" in text
    assert f"s/proof: {s['totals']['s_per_proof']:.3f}" in text


def test_summary_of_a_truncated_recording(case, tmp_path):
    events, path, _ = case
    data = path.read_bytes()
    rec = open_recording(path)
    # cut in the middle of the first partition_done after the first third of the events
    i = next(i for i in range(len(events) // 3, len(events)) if events[i]["k"] == "partition_done")
    cut = rec.offsets[i] + 5
    short = tmp_path / "short.pvtrec"
    short.write_bytes(data[:cut])
    s = build_summary(short)
    assert s["truncated"] and "truncated at byte" in s["truncation"]
    assert len([r for r in s["attempts"] if r["status"] != "unfinished"]) == sum(
        1 for e in events[:i] if e["k"] == "partition_done"
    )
    assert any(r["status"] == "unfinished" for r in s["attempts"])
    assert s["totals"]["unfinished"] >= 1
    assert "TRUNCATED" in format_summary(s)


def test_perfetto_structure(case, tmp_path):
    events, path, seed = case
    out = tmp_path / "trace.json"
    n = write_perfetto(path, out)
    trace = json.loads(out.read_text())
    assert set(trace) >= {"traceEvents", "displayTimeUnit"} and len(trace["traceEvents"]) == n
    _no_partial_overlap(trace)
    evs = trace["traceEvents"]
    named_threads = {
        (e["pid"], e["tid"]) for e in evs if e["ph"] == "M" and e["name"] == "thread_name"
    }
    named_procs = {e["pid"] for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
    xs = [e for e in evs if e["ph"] == "X"]
    for e in xs:
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float))
        assert e["dur"] >= 0 and isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert (e["pid"], e["tid"]) in named_threads and e["pid"] in named_procs
    phase_x = [e for e in xs if e["name"] in PHASES]
    ends = [e for e in events if e["k"] == "phase_end"]
    assert len(phase_x) == len(ends)
    for e in phase_x:
        assert set(e["args"]) >= {"proof", "partition", "ok"}
    # slices of a worker lane: one (pid, tid) per (device, worker), with exact times
    expected = sorted(
        (e["device"] + 1, lane_tid(e["device"], 1 + e["worker"]), e["t"]) for e in ends
    )
    got = sorted((e["pid"], e["tid"], round((e["ts"] + e["dur"]) * 1000)) for e in phase_x)
    assert got == expected
    # GPU lane: non-overlapping spans whose total is the union of GPU phases
    for d in {e["device"] for e in ends}:
        spans = sorted(
            (e["ts"], e["ts"] + e["dur"])
            for e in xs
            if e["pid"] == d + 1 and e["name"] == "gpu busy"
        )
        assert all(a[1] <= b[0] + 1e-6 for a, b in zip(spans, spans[1:], strict=False))
        union_us = _union(_gpu_intervals(events, d)) / 1000
        assert sum(b - a for a, b in spans) == pytest.approx(union_us), seed
    counters = [e for e in evs if e["ph"] == "C"]
    samples = [e for e in events if e["k"] == "memory"]
    assert counters and all(
        all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in e["args"].values())
        for e in counters
    )
    sync = [e for e in counters if e["name"].startswith("sync pool")]
    assert len(sync) == len(samples) and all("modeled" in e["name"] for e in counters)
    assert sorted(
        (e["pid"], e["ts"], e["args"]["used"], e["args"]["cached"]) for e in sync
    ) == sorted((m["device"] + 1, m["t"] / 1000, m["sync_used"], m["sync_cached"]) for m in samples)
    instants = [e for e in evs if e["ph"] == "i"]
    faults = [e for e in instants if e["name"].startswith("fault:")]
    assert len(faults) == sum(1 for e in events if e["k"] == "fault")
    first = next(e for e in events if e["k"] == "fault")
    assert faults[0]["args"]["requested"] > 0
    assert faults[0]["tid"] == lane_tid(first["device"], 1 + first["worker"])
    assert sum(1 for e in instants if e["name"].startswith("marker:")) == 1
    assert sum(1 for e in instants if e["name"].startswith("control:")) == 2
    assert all(e["s"] in ("g", "p", "t") for e in instants)


def test_perfetto_open_phases_at_a_cut(case, tmp_path):
    events, path, _ = case
    rec = open_recording(path)
    i = next(i for i in range(len(events) // 2, len(events)) if events[i]["k"] == "phase_begin")
    short = tmp_path / "short.pvtrec"
    short.write_bytes(path.read_bytes()[: rec.offsets[i + 1]])
    trace = export_perfetto(short)
    unfinished = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["args"].get("unfinished")]
    assert unfinished and trace["otherData"]["truncation"]


def _no_partial_overlap(trace):
    by_thread = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_thread.values():
        spans.sort()
        for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False):
            assert b_start >= a_end - 1e-6
    return by_thread


def test_overlapping_phases_of_one_worker_go_to_an_overflow_thread(tmp_path):
    from provetop.recordings.export_perfetto import trace_from_state
    from provetop.recordings.schema import make
    from provetop.recordings.state import State
    from tests.recordings.fixtures import hello

    where = {"proof": 0, "partition": 0, "worker": 1, "device": 0}
    rng = random.Random()
    a, b, c, d = sorted(rng.sample(range(1, 10**9), 4))
    events = [
        hello(),
        make("phase_begin", a, phase="upload", **where),
        make("phase_begin", b, phase="mutex_wait", **where),
        make("phase_end", c, phase="upload", ok=True, **where),
        make("phase_end", d, phase="mutex_wait", ok=True, **where),
    ]
    trace = trace_from_state(State().fold(events))
    threads = _no_partial_overlap(trace)
    assert sorted(len(v) for v in threads.values() if v) == [1, 1, 1]  # worker, overflow, upload
    names = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in trace["traceEvents"]
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    slices = {e["name"]: e for e in trace["traceEvents"] if e["ph"] == "X"}
    assert names[(1, lane_tid(0, 2))] == "worker 1"
    assert names[(1, slices["mutex_wait"]["tid"])] == "worker 1 (overlap 1)"
    assert slices["upload"]["tid"] == lane_tid(0, 2) and slices["upload"]["dur"] == pytest.approx(
        (c - a) / 1000
    )
    assert slices["mutex_wait"]["ts"] == b / 1000


def _lost_run() -> list[dict]:
    """A run that lost every partition: each first attempt skipped the pre-stage and failed,
    each retry on the fallback path failed too (what 8 GiB did to porep-32g)."""
    events = [hello(0)]
    t = MS
    for part in range(3):
        for attempt, prestage in ((0, "skip"), (1, "fallback")):
            where = {"proof": 0, "partition": part, "worker": part % 2, "device": 0}
            events.append(make("phase_begin", t, phase="synthesis", **where))
            events.append(make("phase_end", t + MS, phase="synthesis", ok=False, **where))
            t += 2 * MS
            events.append(
                make(
                    "partition_done",
                    t,
                    **where,
                    attempt=attempt,
                    ok=False,
                    phases_ms={"synthesis": 1.0},
                    gpu_total_ms=0.0,
                    mutex_wait_ms=0.0,
                    prestage=prestage,
                    prestage_reason="does not fit",
                    failure="oom in fallback_upload",
                    will_retry=attempt == 0,
                )
            )
    events.append(make("proof_done", t + MS, proof=0, ok=False, wall_ms=t / MS))
    return _plain(events)


def test_summary_counts_the_prestage_outcome_of_failed_attempts(tmp_path):
    """Every attempt's pre-stage outcome is counted, failed ones included: a run that lost
    every partition once printed "pre-stage: 0 ok, 0 skipped, 0 fallbacks" beside rows that
    all said skip or fallback. /metrics (its own fold of the same events) agrees."""
    events = _lost_run()
    path = tmp_path / "lost.pvtrec"
    with RecordingWriter(path, snapshot_every_s=0.1) as w:
        for e in events:
            w.write(e)
    s = build_summary(path)
    t = s["totals"]
    assert (t["prestage_ok"], t["prestage_skip"], t["fallbacks"]) == (0, 3, 3)
    assert t["partitions_failed"] == 3 and t["attempts"] == 6
    assert "pre-stage: 0 ok, 3 skipped, 3 fallbacks" in format_summary(s)
    fold = MetricsFold().fold(events)
    by_outcome: dict[str, float] = {}
    for (name, labels), n in fold.counters.items():
        if name == "prestage_decisions_total":
            by_outcome[labels[-1]] = by_outcome.get(labels[-1], 0) + n
    assert by_outcome == {"skip": 3, "fallback": 3}


def test_summary_counts_the_partitions_that_started_with_a_handed_over():
    """The 16 GiB sample (one H200): 9 skipped pre-stages, each followed by an ``alloc`` event
    at site ``handover`` (its a copied into the previous partition's H block); the summary's
    pre-stage line says how many."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "recordings/samples/h200-porep32g-aware16.pvtrec"
    s = build_summary(path)
    t = s["totals"]
    assert (t["prestage_ok"], t["prestage_skip"], t["handovers"]) == (1, 9, 9)
    assert "0 fallbacks (9 started with a handed over);" in format_summary(s)
