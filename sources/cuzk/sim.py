"""A synthetic cuzk daemon log, written from cuzk's formats, with the truth kept beside it.

No cuzk daemon runs here, so the adapter is tested against this model of one: proofs split into
partitions, a pool of synthesis workers, ``workers_per_device`` GPU workers sharing one mutex per
GPU (granted in request order), each GPU call printing the lines supraseal-c2 and cuzk-core print
(``docs/cuzk.md``) at the instant they would be printed. The model knows what really happened
(mutex acquire and release, the phases, the pre-stage outcome), so a test can compare the
converter's reconstruction with the truth on fresh random runs.

Simplifications (each is also an assumption of the converter, see ``docs/cuzk.md``): times are
whole milliseconds; the pre-stage setup under the mutex takes no time; host registration takes no
time; the lock is requested ``setup_to_split_ms`` after ``GPU_START``.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any

BASE_WALL_NS = 1_795_000_000_000_000_000  # a fixed wall clock for t = 0 (2026-11-18)

# Pre-stage scenarios of one GPU call (the Phase 9 memory-aware build):
OK = "ok"  # prestage_vram ... then prestage_setup=ok
SKIP = "skip_vram"  # not enough usable VRAM
MALLOC_OOM = "malloc_oom"  # enough reported free, cudaMalloc fails: no prestage_setup line
SETUP_FALLBACK = "setup_fallback"  # prestage_setup=fallback err=2
HOST_REGISTER = "host_register"  # cudaHostRegister failed: no pre-stage attempted
FAIL_OOM = "fail_oom"  # setup fallback, then the fallback path runs out of memory: failure
SCENARIOS = (OK, SKIP, MALLOC_OOM, SETUP_FALLBACK, HOST_REGISTER)


@dataclass
class Call:
    """One partition's trip through the model, and its truth."""

    job: int
    job_id: str
    partition: int
    scenario: str
    synth_start: int
    synth_ms: int
    setup: int
    ntt: int
    prep: int
    batch: int
    tail: int
    b_g2: int
    worker: int = -1
    pickup: int = 0
    start: int = 0
    acquire: int = 0
    release: int = 0
    end: int = 0
    gpu_total: int = 0
    failed: bool = False
    skipped: bool = False

    @property
    def synth_end(self) -> int:
        return self.synth_start + self.synth_ms

    @property
    def wait(self) -> int:
        return self.acquire - (self.start + self.setup)

    @property
    def prestage(self) -> str:
        return {OK: "ok", SKIP: "skip"}.get(self.scenario, "fallback")


@dataclass
class Run:
    """The lines of one modeled daemon run and the calls behind them."""

    lines: list[str]
    calls: list[Call]
    job_ids: list[str]
    workers_per_device: int
    failed_jobs: set[int] = field(default_factory=set)

    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)


def _wall(t_ms: int) -> str:
    ns = BASE_WALL_NS + t_ms * 1_000_000
    s, rem = divmod(ns, 1_000_000_000)
    import datetime as _dt

    stamp = _dt.datetime.fromtimestamp(s, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{rem // 1000:06d}Z"


def simulate(
    rng: random.Random,
    *,
    jobs: int = 2,
    partitions: int = 4,
    workers_per_device: int = 2,
    scenarios: dict[tuple[int, int], str] | None = None,
    synth_workers: int = 3,
    trace: bool = True,
    noise: bool = False,
) -> Run:
    """Model one run; ``scenarios`` maps (job, partition) to a pre-stage scenario (default OK)."""
    job_ids, calls = _draw_calls(rng, jobs, partitions, scenarios or {}, synth_workers)
    log = _Log(trace)
    log.trace(0, "INFO", "cuzk_core::engine: starting cuzk engine pipeline_enabled=true")
    for j, job_id in enumerate(job_ids):
        t0 = min(c.synth_start for c in calls if c.job == j)
        log.trace(
            t0,
            "INFO",
            f"cuzk_core::engine: dispatching per-partition synthesis (budget-gated) "
            f"job_id={job_id} num_partitions={partitions} budget_available_gib=200",
        )
    for c in calls:
        log.timeline(c.synth_start, "SYNTH_START", c.job_id, f"partition={c.partition}")
        detail = f"partition={c.partition},synth_ms={c.synth_ms}"
        log.timeline(c.synth_end, "SYNTH_END", c.job_id, detail)
        log.timeline(c.synth_end, "GPU_QUEUE", c.job_id, f"partition={c.partition}")
    gpu = _Gpu(rng, log, workers_per_device, noise)
    for c in sorted(calls, key=lambda c: (c.synth_end, c.job, c.partition)):
        gpu.call(c)
    for j, job_id in enumerate(job_ids):
        if j in gpu.failed_at:
            continue
        t_end = max(c.end for c in calls if c.job == j)
        log.trace(
            t_end,
            "INFO",
            f"cuzk_core::engine: Phase 7: all partitions complete, proof assembled "
            f"job_id={job_id} proof_len={192 * partitions} total_ms={t_end}",
        )
    return Run(log.lines(), calls, job_ids, workers_per_device, set(gpu.failed_at))


def _draw_calls(
    rng: random.Random,
    jobs: int,
    partitions: int,
    scenarios: dict[tuple[int, int], str],
    synth_workers: int,
) -> tuple[list[str], list[Call]]:
    """The job ids and every partition's call with its drawn durations, synthesised on the
    synthesis worker that is free first."""
    setup = rng.randint(1, 6)  # one value per run keeps the lock order equal to the start order
    job_ids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(jobs)]
    calls: list[Call] = []
    synth_free = [0] * synth_workers
    for j in range(jobs):
        for p in range(partitions):
            slot = min(range(synth_workers), key=lambda i: synth_free[i])
            start = synth_free[slot] + rng.randint(1, 40) + (j * 50 if p == 0 else 0)
            call = Call(
                job=j,
                job_id=job_ids[j],
                partition=p,
                scenario=scenarios.get((j, p), OK),
                synth_start=start,
                synth_ms=rng.randint(300, 2500),
                setup=setup,
                ntt=rng.randint(500, 2500),
                prep=rng.randint(200, 1400),
                batch=rng.randint(400, 700),
                tail=rng.randint(60, 140),
                b_g2=rng.randint(100, 900),
            )
            synth_free[slot] = call.synth_end
            calls.append(call)
    return job_ids, calls


class _Log:
    """The daemon's log lines with their times; :meth:`lines` in time order (ties: as
    written)."""

    def __init__(self, trace: bool) -> None:
        self.with_trace = trace
        self._out: list[tuple[int, int, str]] = []

    def emit(self, t: int, line: str) -> None:
        self._out.append((t, len(self._out) + 1, line))

    def timeline(self, t: int, event: str, job_id: str, detail: str) -> None:
        self.emit(t, f"TIMELINE,{t},{event},{job_id},{detail}")

    def trace(self, t: int, level: str, text: str) -> None:
        if self.with_trace:
            self.emit(t, f"{_wall(t)} {level:>5} {text}")

    def lines(self) -> list[str]:
        return [line for _, _, line in sorted(self._out)]


class _Gpu:
    """The GPU workers and the one mutex of the modeled GPU, and the jobs that failed."""

    def __init__(self, rng: random.Random, log: _Log, workers: int, noise: bool) -> None:
        self.rng, self.log, self.noise = rng, log, noise
        self.worker_free = [0] * workers
        self.mutex_free = 0
        self.failed_at: dict[int, int] = {}  # job -> when its failure was logged

    def call(self, c: Call) -> None:
        """One partition's GPU call on the worker free first, its lines as cuzk prints them."""
        free_at = self.worker_free
        w = min(range(len(free_at)), key=lambda i: (max(free_at[i], c.synth_end), i))
        c.worker = w
        c.pickup = max(free_at[w], c.synth_end) + 1
        self.log.timeline(c.pickup, "GPU_PICKUP", c.job_id, f"worker={w},partition={c.partition}")
        if c.job in self.failed_at and c.pickup >= self.failed_at[c.job]:
            self._skip(c)
            return
        c.start = c.pickup + 1
        self.log.timeline(c.start, "GPU_START", c.job_id, f"worker={w},partition={c.partition}")
        self._prestage(c)
        prep_end = c.start + c.prep
        self.log.emit(prep_end, f"CUZK_TIMING: prep_msm_ms={c.prep}")
        if c.scenario == FAIL_OOM:
            self._fail(c)
        else:
            self._region(c, prep_end)

    def _skip(self, c: Call) -> None:
        c.skipped = True
        self.log.trace(
            c.pickup,
            "INFO",
            f"gpu_worker{{worker_id={c.worker} gpu=0 job_id={c.job_id} proof_kind=PoRep "
            f"partition=Some({c.partition})}}: cuzk_core::engine: skipping GPU prove for "
            f"failed partitioned job job_id={c.job_id} partition=Some({c.partition})",
        )
        self.worker_free[c.worker] = c.pickup + 1

    def _prestage(self, c: Call) -> None:
        """The split line, then the mutex and the pre-stage lines of ``c.scenario``."""
        ready = c.start + c.setup
        self.log.emit(
            ready, f"CUZK_TIMING: split_vectors_ms={c.setup - 1} setup_to_split_ms={c.setup}"
        )
        if c.scenario == HOST_REGISTER:
            self.log.emit(ready, "CUZK_TIMING: host_register=fallback err=712")
        c.acquire = max(ready, self.mutex_free)
        free = self.rng.randint(13_000, 15_800)
        if c.scenario == SKIP:
            free = self.rng.randint(1_000, 12_000)
        usable = max(0, free - 512)
        if c.scenario != HOST_REGISTER:
            self.log.emit(
                c.acquire,
                f"CUZK_TIMING: prestage_vram free_mib={free} usable_mib={usable} "
                f"need_da_mib=4096 need_dbc_mib=8192 total_mib=12288",
            )
        setup_line = {
            OK: "prestage_setup=ok domain=134217728 lot_of_memory=1",
            SKIP: "prestage_setup=skip_vram",
            SETUP_FALLBACK: "prestage_setup=fallback err=2",
            FAIL_OOM: "prestage_setup=fallback err=2",
        }.get(c.scenario)
        if setup_line:
            self.log.emit(c.acquire, f"CUZK_TIMING: {setup_line}")

    def _fail(self, c: Call) -> None:
        """The fallback path runs out of memory: the call fails, and its job with it."""
        c.failed = True
        c.release = c.acquire + self.rng.randint(50, 300)
        self.mutex_free = c.release
        self.failed_at[c.job] = c.release
        self.log.trace(
            c.release,
            "ERROR",
            f"gpu_worker{{worker_id={c.worker} gpu=0 job_id={c.job_id} proof_kind=PoRep "
            f"partition=Some({c.partition})}}: cuzk_core::engine: GPU prove start failed "
            f"error=CUDA error 2: out of memory",
        )
        c.end = c.release
        self.worker_free[c.worker] = c.release + 1

    def _region(self, c: Call, prep_end: int) -> None:
        """The GPU region's timing lines, the release, the B-G2 MSM and the call's end."""
        emit = self.log.emit
        ntt_end = c.acquire + c.ntt
        emit(ntt_end, f"CUZK_TIMING: gpu_tid=0 ntt_msm_h_ms={c.ntt}")
        batch_start = max(ntt_end, prep_end)
        emit(batch_start + c.batch, f"CUZK_TIMING: gpu_tid=0 batch_add_ms={c.batch}")
        c.release = batch_start + c.batch + c.tail
        c.gpu_total = c.release - c.acquire
        emit(c.release, f"CUZK_TIMING: gpu_tid=0 tail_msm_ms={c.tail} gpu_total_ms={c.gpu_total}")
        self.mutex_free = c.release
        self.worker_free[c.worker] = c.release + 1
        b2_end = prep_end + c.b_g2
        emit(b2_end, f"CUZK_TIMING: b_g2_msm_ms={c.b_g2} num_circuits=1")
        c.end = max(c.release, b2_end) + self.rng.randint(1, 30)
        self.log.timeline(
            c.end,
            "GPU_END",
            c.job_id,
            f"worker={c.worker},partition={c.partition},gpu_ms={c.end - c.start}",
        )
        emit(c.end + 2, f"CUZK_TIMING: async_dealloc_ms={self.rng.randint(5, 90)}")
        if self.noise:
            emit(c.end, f"garbage line {c.job}.{c.partition} \x00\xff with no format")


def status_snapshot(run: Run, t_ms: int) -> dict[str, Any]:
    """The ``GET /status`` body (cuzk-core/src/status.rs) of the modeled run at ``t_ms``."""
    pipelines = []
    for j, job_id in enumerate(run.job_ids):
        calls = [c for c in run.calls if c.job == j]
        if min(c.synth_start for c in calls) > t_ms:
            continue
        parts = []
        for c in sorted(calls, key=lambda c: c.partition):
            if c.synth_start > t_ms:
                state, synth_ms, gpu_ms = "pending", None, None
            elif c.synth_end > t_ms:
                state, synth_ms, gpu_ms = "synthesizing", t_ms - c.synth_start, None
            elif c.skipped or not c.start or c.start > t_ms:
                state, synth_ms, gpu_ms = "synth_done", c.synth_ms, None
            elif c.end > t_ms:
                state, synth_ms, gpu_ms = "gpu", c.synth_ms, t_ms - c.start
            else:
                state = "failed" if c.failed else "done"
                synth_ms, gpu_ms = c.synth_ms, c.end - c.start
            parts.append(
                {"index": c.partition, "state": state, "synth_ms": synth_ms, "gpu_ms": gpu_ms}
            )
        pipelines.append(
            {
                "job_id": job_id,
                "proof_kind": "PoRepSealCommit",
                "started_secs_ago": (t_ms - min(c.synth_start for c in calls)) / 1000,
                "total_partitions": len(calls),
                "partitions_done": sum(1 for p in parts if p["state"] == "done"),
                "partitions": parts,
            }
        )
    workers = []
    for w in range(run.workers_per_device):
        busy = [c for c in run.calls if c.worker == w and c.start and c.start <= t_ms < c.end]
        current = busy[0] if busy else None
        workers.append(
            {
                "worker_id": w,
                "gpu_ordinal": 0,
                "state": "proving" if current else "idle",
                "current_job": current.job_id if current else None,
                "current_partition": current.partition if current else None,
                "busy_secs": (t_ms - current.start) / 1000 if current else None,
            }
        )
    done = [j for j in range(len(run.job_ids)) if j not in run.failed_jobs]
    return {
        "uptime_secs": t_ms / 1000,
        "memory": {
            "total_bytes": 400 << 30,
            "used_bytes": 120 << 30,
            "available_bytes": 280 << 30,
        },
        "synthesis": {"max_concurrent": 3, "active": 1},
        "pipelines": pipelines,
        "gpu_workers": workers,
        "allocations": {"srs": [], "pce": []},
        "counters": {
            "total_completed": sum(
                1 for j in done if max(c.end for c in run.calls if c.job == j) <= t_ms
            ),
            "total_failed": len(run.failed_jobs),
            "completed_by_kind": {},
            "failed_by_kind": {},
            "queue_depth": 0,
        },
        "buffers": {
            "synth_in_flight": 0,
            "provers_in_flight": 0,
            "aux_in_flight": 0,
            "shells_in_flight": 0,
            "pending_handles": 0,
        },
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m provetop.sources.cuzk.sim [--realtime]``: print a modeled cuzk log, to try the
    adapter
    (``... | provetop watch --cuzk-log -``) without a cuzk daemon."""
    import argparse
    import sys
    import time

    parser = argparse.ArgumentParser(
        prog="python -m provetop.sources.cuzk.sim", description=main.__doc__
    )
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2, help="GPU workers (one GPU)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--oom", action="store_true", help="mix in pre-stage fallbacks and OOMs")
    parser.add_argument("--realtime", action="store_true", help="print lines at their times")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    scenarios = {}
    if args.oom:
        scenarios = {
            (j, p): rng.choice(SCENARIOS) for j in range(args.jobs) for p in range(args.partitions)
        }
    run = simulate(
        rng,
        jobs=args.jobs,
        partitions=args.partitions,
        workers_per_device=args.workers,
        scenarios=scenarios,
    )
    start = time.monotonic()
    clock = 0
    for line in run.lines:
        if args.realtime and line.startswith("TIMELINE,"):
            clock = int(line.split(",")[1])
            time.sleep(max(0.0, start + clock / 1000 - time.monotonic()))
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
