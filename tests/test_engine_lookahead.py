"""``--synthesis-ahead``: each worker synthesises its next partition while its current one
runs; the synthesis is drawn on its own lane, every partition still completes and verifies
once, and a worker killed mid-run loses nothing."""

from __future__ import annotations

from engine.config import from_preset
from engine.runner import Engine
from engine.testing import GatedBackend
from engine.workers import SYNTH_LANE_BASE
from kernels.backends import get_backend
from recordings.reader import open_recording
from recordings.schema import PHASES

DELAY = 0.05  # seconds each h_step holds the GPU region, long enough to overlap a synthesis


def _run(tmp_path, inject=None, **overrides):
    cfg = from_preset(
        "ci", partitions=4, proofs=2, concurrency=2, workers_per_device=2, **overrides
    )
    path = tmp_path / "ahead.pvtrec"
    engine = Engine(
        cfg,
        listen=False,
        record=path,
        inject=inject,
        backend=GatedBackend(get_backend("cpu"), delay_s=DELAY),
    )
    engine.start()
    assert engine.wait(120)
    engine.close()
    return engine, open_recording(path)


def _spans(events, phases):
    begun, spans = {}, []
    for e in events:
        if e["k"] in ("phase_begin", "phase_end") and e["phase"] in phases:
            key = (e["device"], e["worker"], e["phase"], e["proof"], e["partition"])
            if e["k"] == "phase_begin":
                begun[key] = e["t"]
            else:
                spans.append((begun.pop(key), e["t"], e["worker"], e["proof"], e["partition"]))
    return spans


def test_synthesis_runs_ahead_on_its_own_lane(tmp_path):
    engine, rec = _run(tmp_path, synthesis_ahead=True, inject="delay:synthesis:40ms")
    assert engine.ok and rec.complete
    assert rec.hello["config"]["synthesis_ahead"] is True
    assert rec.hello["config"]["synth_worker_base"] == SYNTH_LANE_BASE
    totals = rec.state().totals()
    assert totals["partitions_verified"] == 8
    done = [e for e in rec.events if e["k"] == "partition_done"]
    assert len(done) == 8 and all(e["ok"] and e["verified"] for e in done)
    assert {e["worker"] for e in done} <= {0, 1}
    synth = _spans(rec.events, {"synthesis"})
    gpu = _spans(rec.events, {p for p, spec in PHASES.items() if spec.gpu})
    assert len(synth) == 8 and {w for *_, w, _p, _q in synth} <= {
        SYNTH_LANE_BASE + w for w in (0, 1)
    }
    assert {w for *_, w, _p, _q in gpu} <= {0, 1}
    # the look-ahead: a worker's next synthesis ran during its own GPU region
    worker_of = {(e["proof"], e["partition"]): e["worker"] for e in done}
    overlapped = [
        (s, g)
        for s in synth
        for g in gpu
        if worker_of[(s[3], s[4])] == g[2]
        and (s[3], s[4]) != (g[3], g[4])
        and s[0] < g[1]
        and g[0] < s[1]
    ]
    assert overlapped, "no synthesis overlapped its own worker's GPU region"
    # every partition's synthesis ended before its own GPU region began
    first_gpu = {}
    for b, _e, _w, p, q in gpu:
        first_gpu[(p, q)] = min(b, first_gpu.get((p, q), b))
    assert all(e <= first_gpu[(p, q)] for _b, e, _w, p, q in synth)
    # the summary rows carry the synthesis time and the real worker
    rows = rec.state().attempts
    assert all(r.phases_ms.get("synthesis", 0) >= 40 for r in rows)


def test_a_killed_worker_loses_no_partition_with_the_look_ahead(tmp_path):
    engine, rec = _run(tmp_path, synthesis_ahead=True, inject="kill:worker:0:msm_h")
    assert rec.complete and engine.error is None
    died = [e for e in rec.events if e["k"] == "fault" and e["kind"] == "worker_died"]
    assert len(died) == 1
    final = {}
    for e in rec.events:
        if e["k"] == "partition_done":
            final[(e["proof"], e["partition"])] = e
    assert len(final) == 8 and all(e["ok"] and e["verified"] for e in final.values())
    assert rec.state().totals()["partitions_verified"] == 8


def test_without_the_flag_synthesis_stays_on_the_worker_lane(tmp_path):
    engine, rec = _run(tmp_path)
    assert engine.ok and "synth_worker_base" not in rec.hello["config"]
    assert {w for *_, w, _p, _q in _spans(rec.events, {"synthesis"})} <= {0, 1}


def test_the_dashboard_names_the_synthesis_lanes_of_each_device(tmp_path):
    from tui.widgets.timeline import Timeline

    _engine, rec = _run(tmp_path, synthesis_ahead=True, devices=(0, 1))
    state = rec.state()
    timeline = Timeline()
    timeline.state = state
    labels = {timeline._label(lane) for lane in state.lanes()}
    base = SYNTH_LANE_BASE
    synth = {lane for lane in state.lanes() if lane[0] == "worker" and lane[2] >= base}
    assert synth and {timeline._label(lane) for lane in synth} <= {
        f"gpu{d} synth {w}" for d in (0, 1) for w in (0, 1)
    }
    assert not any(f"w{base}" in label for label in labels)


def test_a_row_in_synthesis_ahead_has_no_gpu_worker_yet(tmp_path):
    from recordings.state import State
    from tui.widgets.partitions import cells

    _engine, rec = _run(tmp_path, synthesis_ahead=True)
    state = State()
    seen_synth = False
    for e in rec.events:
        state.apply(e)
        if e["k"] == "phase_begin" and e["phase"] == "synthesis":
            row = state.partitions[(e["proof"], e["partition"])]
            assert row.worker is None and cells(row)[2][0] == f"{e['device']}/syn"
            seen_synth = True
        elif e["k"] == "phase_begin":
            assert state.partitions[(e["proof"], e["partition"])].worker == e["worker"]
    assert seen_synth
    assert all(r.worker in (0, 1) for r in state.partitions.values())


def test_a_failed_synthesis_reads_as_never_pre_staged_and_exports_on_its_lane(tmp_path):
    from recordings.export_perfetto import trace_from_state

    engine, rec = _run(tmp_path, synthesis_ahead=True, inject="raise:synthesis:3")
    assert rec.complete and engine.error is None
    failed = [e for e in rec.events if e["k"] == "partition_done" and not e["ok"]]
    assert len(failed) == 1 and failed[0]["prestage"] == "none"
    assert "synthesis" in failed[0]["failure"] and failed[0]["worker"] in (0, 1)
    done_ok = [e for e in rec.events if e["k"] == "partition_done" and e["ok"]]
    assert len(done_ok) == 7 and all(e["prestage"] != "none" for e in done_ok)
    names = {
        e["args"]["name"]
        for e in trace_from_state(rec.state())["traceEvents"]
        if e.get("name") == "thread_name"
    }
    assert {"synth 0", "synth 1"} <= names and not any(n == "worker 100" for n in names)


def test_a_requeued_partition_synthesised_ahead_drops_its_dead_worker():
    from recordings.schema import make
    from recordings.state import State

    state = State()
    state.apply(
        make(
            "hello", 0, schema=1, engine_id="e", host="h", version="0", source="provetop",
            backend="cpu", modeled=True, devices=[], wall_ns=0, read_only=False,
            config={"synth_worker_base": SYNTH_LANE_BASE},
        )
    )  # fmt: skip
    where = {"proof": 0, "partition": 3, "device": 0}
    state.apply(make("phase_begin", 1, **where, worker=1, phase="msm_h"))  # worker 1 dies here
    assert state.partitions[(0, 3)].worker == 1
    state.apply(make("phase_begin", 2, **where, worker=SYNTH_LANE_BASE, phase="synthesis"))
    assert state.partitions[(0, 3)].worker is None
    state.apply(make("phase_end", 3, **where, worker=SYNTH_LANE_BASE, phase="synthesis", ok=True))
    state.apply(make("phase_begin", 4, **where, worker=0, phase="upload"))
    assert state.partitions[(0, 3)].worker == 0


def test_the_worker_died_fault_names_the_partition_claimed_ahead():
    from engine.config import from_preset
    from engine.runner import Engine
    from engine.workers import WorkerSlot

    engine = Engine(from_preset("ci", synthesis_ahead=True), listen=False)
    emitted = []  # what the engine hands its bus (the bus runs only once the engine starts)
    engine.bus.emit = lambda k, /, **fields: emitted.append({**fields, "k": k})
    slot = WorkerSlot(0, 1, job=(0, 2), ahead_requeued=(0, 3))
    slot.died = SystemExit("gone")
    engine._on_worker_died(slot, True)
    (fault,) = [e for e in emitted if e["k"] == "fault"]
    assert fault["kind"] == "worker_died" and (fault["proof"], fault["partition"]) == (0, 2)
    assert "partition 0/3, claimed ahead and not started, is queued again" in fault["message"]
    engine.close()


def test_an_engine_whose_workers_cannot_start_fails_instead_of_hanging(monkeypatch):
    from engine import pipeline
    from engine.config import from_preset
    from tests.engine_run import run_engine

    def broken(self, *args, **kw):
        raise RuntimeError("no runner today")

    monkeypatch.setattr(pipeline.PartitionRunner, "__init__", broken)
    engine, events = run_engine(from_preset("ci", partitions=2), timeout=30)
    assert engine.error and "no worker left" in engine.error
    died = [e for e in events if e["k"] == "fault" and e["kind"] == "worker_died"]
    assert died and all("no runner today" in e["message"] for e in died)
    (state,) = [e for e in events if e["k"] == "engine_state" and e["state"] == "done"]
    assert state["reason"] == "failed"
