"""``--synthesis-ahead``, from the worker loop up to the engine.

The loop (``provetop.engine.run.workers.lookahead_loop``): the next partition is prepared while the
current
one runs, no partition is run twice or lost, and a dying worker hands back what it claimed
ahead. The engine: the synthesis is drawn on its own lane, every partition still completes
and verifies once, and a worker killed mid-run loses nothing."""

from __future__ import annotations

import random
import threading
import time

from provetop.engine.partition.testing import GatedBackend
from provetop.engine.run.runner import Engine
from provetop.engine.run.workers import Scheduler, Supervisor, lookahead_loop
from provetop.engine.settings.config import SYNTH_LANE_BASE, from_preset
from provetop.kernels.backends import get_backend
from provetop.recordings.reader import open_recording
from provetop.recordings.schema import PHASES

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
    from provetop.tui.widgets.timeline import Timeline

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
    from provetop.recordings.state import State
    from provetop.tui.widgets.partitions import cells

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
    from provetop.recordings.export_perfetto import trace_from_state

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
    from provetop.recordings.schema import make
    from provetop.recordings.state import State

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
    from provetop.engine.run.runner import Engine
    from provetop.engine.run.workers import WorkerSlot
    from provetop.engine.settings.config import from_preset

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
    from provetop.engine.partition import pipeline
    from provetop.engine.settings.config import from_preset
    from tests.engine.run_helper import run_engine

    def broken(self, *args, **kw):
        raise RuntimeError("no runner today")

    monkeypatch.setattr(pipeline.PartitionRunner, "__init__", broken)
    engine, events = run_engine(from_preset("ci", partitions=2), timeout=30)
    assert engine.error and "no worker left" in engine.error
    died = [e for e in events if e["k"] == "fault" and e["kind"] == "worker_died"]
    assert died and all("no runner today" in e["message"] for e in died)
    (state,) = [e for e in events if e["k"] == "engine_state" and e["state"] == "done"]
    assert state["reason"] == "failed"


# --- the worker loop alone ---


class Trace:
    """Records (what, job, thread, t0, t1) of every prepare/complete call."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[tuple[str, tuple[int, int], str, float, float]] = []

    def add(self, what: str, job: tuple[int, int], t0: float) -> None:
        with self.lock:
            self.rows.append((what, job, threading.current_thread().name, t0, time.monotonic()))

    def jobs(self, what: str) -> list[tuple[int, int]]:
        return [r[1] for r in self.rows if r[0] == what]


def _run_loop(sched, prepare, complete, workers=2, max_requeues=2, on_error=None, timeout=30):
    finished, died = [], []

    def on_finish(proof, ok, wall_ms):
        finished.append((proof, ok))

    sup = Supervisor(
        sched, lambda slot, requeued: died.append(requeued), on_finish, max_requeues=max_requeues
    )
    for w in range(workers):
        sup.add(
            f"w{w}",
            0,
            w,
            lambda slot: lookahead_loop(sched, prepare, complete, on_finish, on_error, slot),
        )
    done = threading.Event()
    t = threading.Thread(target=lambda: (sup.run(), done.set()), daemon=True)
    t.start()
    assert done.wait(timeout), "the supervisor did not finish"
    return finished, died


def test_the_next_partition_is_prepared_while_the_current_one_runs():
    trace = Trace()
    parts = random.randint(5, 9)
    sched = Scheduler(proofs=2, partitions=parts, concurrency=2)

    def prepare(proof, partition):
        t0 = time.monotonic()
        time.sleep(0.03)
        trace.add("prepare", (proof, partition), t0)
        return (proof, partition)

    def complete(prepared):
        t0 = time.monotonic()
        time.sleep(0.05)
        trace.add("complete", prepared, t0)
        return True

    finished, died = _run_loop(sched, prepare, complete)
    everything = sorted((p, q) for p in range(2) for q in range(parts))
    assert sorted(trace.jobs("prepare")) == everything  # each prepared once
    assert sorted(trace.jobs("complete")) == everything  # each completed once, after it
    assert sorted(finished) == [(0, True), (1, True)] and died == []
    prepared_at = {r[1]: r[4] for r in trace.rows if r[0] == "prepare"}
    assert all(prepared_at[r[1]] <= r[3] for r in trace.rows if r[0] == "complete")
    # overlap: some preparation ran on a look-ahead thread during a completion
    completes = [r for r in trace.rows if r[0] == "complete"]
    ahead = [r for r in trace.rows if r[0] == "prepare" and r[2].startswith("ahead-")]
    assert any(c[3] < a[3] < c[4] for a in ahead for c in completes)


def test_a_dying_worker_hands_back_its_partition_and_the_one_it_claimed_ahead():
    sched = Scheduler(proofs=1, partitions=6, concurrency=1)
    victim = (0, random.randint(1, 4))
    killed = []
    completed, lock = [], threading.Lock()

    def prepare(proof, partition):
        time.sleep(0.01)
        return (proof, partition)

    def complete(prepared):
        time.sleep(0.02)
        if prepared == victim and not killed:
            killed.append(prepared)
            raise SystemExit("this worker dies once")  # a BaseException
        with lock:
            completed.append(prepared)
        return True

    finished, died = _run_loop(sched, prepare, complete)
    assert died == [True] and killed == [victim]
    assert sorted(completed) == [(0, q) for q in range(6)]  # nothing lost, nothing twice
    assert finished == [(0, True)]


def test_a_preparation_that_would_kill_a_worker_kills_it_and_counts_against_its_partition():
    sched = Scheduler(proofs=1, partitions=3, concurrency=1)
    completed = []

    def prepare(proof, partition):
        if partition == 1:
            raise SystemExit("this partition kills every worker")
        return (proof, partition)

    def complete(prepared):
        completed.append(prepared)
        return True

    finished, died = _run_loop(sched, prepare, complete, max_requeues=2)
    assert died == [True, True, False]  # handed out twice more, then failed
    assert sorted(completed) == [(0, 0), (0, 2)]
    assert finished == [(0, False)]


def test_an_exception_in_preparation_fails_only_that_partition():
    sched = Scheduler(proofs=1, partitions=4, concurrency=1)
    errors = []

    def prepare(proof, partition):
        if partition == 2:
            raise ValueError("bad witness")
        return (proof, partition)

    def on_error(proof, partition, exc):
        errors.append((partition, str(exc)))

    finished, died = _run_loop(sched, prepare, lambda prepared: True, workers=1, on_error=on_error)
    assert errors == [(2, "bad witness")] and died == []
    assert finished == [(0, False)]


def test_paused_scheduler_starts_no_preparation_and_resume_continues():
    sched = Scheduler(proofs=1, partitions=4, concurrency=1)
    prepared, gate = [], threading.Event()

    def prepare(proof, partition):
        prepared.append(partition)
        return partition

    def complete(partition):
        if partition == 1:
            sched.pause()  # while 1 runs, 2 may already be claimed; 3 must wait
            gate.set()
        return True

    done = []
    t = threading.Thread(
        target=lambda: lookahead_loop(
            sched, prepare, complete, lambda p, ok, ms: done.append(ok), None, None
        ),
        daemon=True,
    )
    t.start()
    assert gate.wait(10)
    time.sleep(0.3)
    assert 3 not in prepared and not done
    sched.resume()
    t.join(10)
    assert prepared == [0, 1, 2, 3] and done == [True]


def test_a_worker_dying_while_its_look_ahead_waits_for_a_proof_slot_does_not_hang():
    # concurrency 1: once the last partition of proof 0 is claimed, the look-ahead thread waits
    # in Scheduler.next() for proof 0 to complete. If that last partition kills its worker,
    # the dying worker must not wait for that claim forever (proof 0 can only complete once
    # the supervisor has handed the dead worker's partition out again).
    sched = Scheduler(proofs=2, partitions=3, concurrency=1)
    killed, completed, lock = [], [], threading.Lock()

    def complete(prepared):
        if prepared == (0, 2) and not killed:
            killed.append(prepared)
            raise SystemExit("the last partition of proof 0 kills its worker once")
        with lock:
            completed.append(prepared)
        return True

    finished, died = _run_loop(sched, lambda p, q: (p, q), complete, workers=1, timeout=10)
    assert died == [True] and killed == [(0, 2)]
    assert sorted(completed) == [(p, q) for p in range(2) for q in range(3)]
    assert sorted(finished) == [(0, True), (1, True)]


def test_a_partition_requeued_while_paused_runs_after_resume():
    # a worker dies while the scheduler is paused and everything is already dispatched: its
    # replacement must wait for the resume, not find the scheduler dry and leave the
    # requeued partition (and its proof) unfinished
    sched = Scheduler(proofs=1, partitions=2, concurrency=1)
    killed, completed = [], []

    def complete(prepared):
        if prepared == (0, 1) and not killed:
            killed.append(prepared)
            sched.pause()
            threading.Timer(0.5, sched.resume).start()
            raise SystemExit("dies while the engine is paused")
        completed.append(prepared)
        return True

    finished, died = _run_loop(sched, lambda p, q: (p, q), complete, workers=1, timeout=10)
    assert died == [True] and killed == [(0, 1)]
    assert sorted(completed) == [(0, 0), (0, 1)]
    assert finished == [(0, True)]


def test_a_requeued_partition_not_handed_out_again_is_not_dispatched():
    # the engine's final reason reads all_dispatched after a stop: a partition of a dead
    # worker still waiting in the requeue must not count as dispatched ("all proofs done")
    sched = Scheduler(proofs=1, partitions=2, concurrency=1)
    assert sched.next() == (0, 0) and sched.next() == (0, 1)
    assert sched.all_dispatched
    sched.requeue(0, 1)
    sched.stop()
    assert sched.next() is None and not sched.all_dispatched


def test_a_dead_workers_runner_is_freed_before_its_replacement_starts():
    # the dead thread's exception keeps its frames (and in them the runner: on CUDA its two
    # pinned witness pools) through a cycle frame -> slot -> exception -> traceback -> frame
    # that only a full garbage collection breaks; the replacement would allocate two more
    import gc
    import weakref

    sched = Scheduler(proofs=1, partitions=3, concurrency=1)
    runners, seen_at_start = [], []

    class Runner:
        pass

    def target(slot):
        seen_at_start.append([r() is not None for r in runners])
        runner = Runner()
        runners.append(weakref.ref(runner))

        def complete(prepared):
            if prepared[:2] == (0, 1) and len(runners) == 1:
                raise SystemExit("dies once")
            return True

        lookahead_loop(sched, lambda p, q: (p, q, runner), complete, lambda *a: None, None, slot)

    enabled = gc.isenabled()
    gc.disable()
    try:
        sup = Supervisor(sched, lambda slot, requeued: None, lambda *a: None)
        sup.add("w0", 0, 0, target)
        sup.run()
    finally:
        if enabled:
            gc.enable()
    assert seen_at_start == [[], [False]]  # the first runner was gone when the second began


def test_the_death_report_names_the_partition_claimed_ahead():
    """The supervisor hands back a dead worker's claimed-ahead partition and says which one
    (``slot.ahead_requeued``), so the ``worker_died`` fault can name it."""
    from provetop.engine.run.workers import worker_loop

    sched = Scheduler(proofs=1, partitions=4, concurrency=1)
    reports, ran, lives = [], [], []

    def noop(*args):
        pass

    def target(slot):
        lives.append(slot)
        if len(lives) == 1:  # the first life: holds one partition, claimed the next, dies
            slot.job, slot.ahead = sched.next(), sched.next()
            slot.died = SystemExit("dies holding two")
            return
        worker_loop(sched, lambda p, q: ran.append((p, q)) or True, noop, None, slot)

    sup = Supervisor(
        sched, lambda slot, requeued: reports.append((slot.job, slot.ahead_requeued)), noop
    )
    sup.add("w0", 0, 0, target)
    done = threading.Event()
    threading.Thread(target=lambda: (sup.run(), done.set()), daemon=True).start()
    assert done.wait(30), "the supervisor did not finish"
    assert reports == [((0, 0), (0, 1))]
    assert sorted(ran) == [(0, q) for q in range(4)]  # both handed back, nothing lost


def test_the_look_ahead_thread_has_ended_when_its_worker_returns():
    # the supervisor starts a replacement as soon as a worker thread ends; the dead life's
    # look-ahead thread must be gone by then (between a claim's result and its next wait it
    # still held that claim: the prepared partition and, through ``prepare``, the runner)
    import sys

    from provetop.engine.run.workers import WorkerSlot

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # a CUDA run lowers it too: the helper is preempted often
    try:
        for life in range(20):
            sched = Scheduler(proofs=1, partitions=3, concurrency=1)
            slot = WorkerSlot(0, life)

            def complete(prepared):
                if prepared == (0, 1):
                    raise SystemExit("dies holding the next one")
                return True

            lookahead_loop(sched, lambda p, q: (p, q), complete, lambda *a: None, None, slot)
            assert isinstance(slot.died, SystemExit)
            assert slot.ahead in ((0, 2), None)  # claimed before the death, or cancelled
            alive = [t.name for t in threading.enumerate() if t.name == f"ahead-d0-w{life}"]
            assert alive == [], f"life {life}: its look-ahead thread outlived it"
            sched.stop()
    finally:
        sys.setswitchinterval(old)


def _never_starts(slot):
    slot.died = RuntimeError("cannot build my runner")


def test_a_worker_that_cannot_start_is_given_up_on_and_the_others_finish():
    """It used to be replaced every poll for ever (no partition held, nothing to requeue)."""
    from provetop.engine.run.workers import worker_loop

    sched = Scheduler(proofs=1, partitions=5, concurrency=1)
    ran, deaths = [], []

    def works(slot):
        worker_loop(sched, lambda p, q: ran.append((p, q)) or True, lambda *a: None, None, slot)

    sup = Supervisor(sched, lambda slot, requeued: deaths.append(slot.worker), lambda *a: None)
    sup.add("w0", 0, 0, _never_starts)
    sup.add("w1", 0, 1, works)
    done = threading.Event()
    threading.Thread(target=lambda: (sup.run(), done.set()), daemon=True).start()
    assert done.wait(30), "the supervisor did not finish"
    assert sorted(ran) == [(0, q) for q in range(5)]
    assert deaths == [0] * sup.max_idle_deaths
    assert len(sup.given_up) == 1 and "w0" in sup.given_up[0] and "runner" in sup.given_up[0]


def test_when_no_worker_can_start_the_supervisor_says_so_instead_of_spinning():
    from provetop.engine.run.workers import SupervisorError

    sched = Scheduler(proofs=1, partitions=2, concurrency=1)
    sup = Supervisor(sched, lambda slot, requeued: None, lambda *a: None, poll_s=0.01)
    for w in range(2):
        sup.add(f"w{w}", 0, w, _never_starts)
    errors = []

    def run():
        try:
            sup.run()
        except SupervisorError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "the supervisor spun"
    assert len(errors) == 1 and "w0" in errors[0] and "w1" in errors[0]
