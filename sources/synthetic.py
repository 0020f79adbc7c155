"""Synthetic telemetry: a deterministic, plausible engine run made of schema events.

The dashboard's snapshot tests need a fixed event sequence, and ``provetop bench tui`` needs a
large one (an hour of 8 GPUs) without running a real engine for an hour. This module simulates
the pipeline the engine emits (workers sharing a device mutex, pre-stage and upload outside it,
the GPU phases inside it, memory samples at 10 Hz, an occasional OOM retried on the fallback
path) so that every panel has something true-to-shape to draw. Nothing here claims to be a
measurement: ``hello.config.synthetic`` says so.
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from typing import Any

from provetop.recordings.framing import encode_frame
from provetop.recordings.schema import MS, SCHEMA_VERSION
from provetop.recordings.writer import RecordingWriter
from provetop.sources.protocol import THREAD_PREFIX

GIB = 1 << 30
MIB = 1 << 20

# phase -> mean duration in ms (a small-domain partition; shapes, not a benchmark)
_HOST = (("synthesis", 220.0), ("prestage", 30.0), ("upload", 90.0))
_GPU = (
    ("h_step", 160.0),
    ("msm_h", 120.0),
    ("msm_l", 170.0),
    ("msm_a", 110.0),
    ("msm_b_g1", 60.0),
    ("copy_back", 12.0),
)
_AFTER = (("verify", 25.0), ("release", 3.0))


def hello(
    devices: int = 2,
    t: int = 0,
    *,
    backend: str = "cpu",
    engine_id: str = "synthetic-0001",
    host: str = "lab-node",
    capacity: int = 16 * GIB,
    read_only: bool = False,
    workers: int = 2,
    allocator: str = "aware",
    name: str | None = None,
) -> dict[str, Any]:
    """A ``hello`` event for a synthetic engine."""
    modeled = backend == "cpu"
    gpu_name = name or ("cpu-model" if modeled else "NVIDIA H200")
    return {
        "k": "hello",
        "t": t,
        "schema": SCHEMA_VERSION,
        "engine_id": engine_id,
        "host": host,
        "pid": 4242,
        "version": "0.1.0",
        "source": "provetop",
        "backend": backend,
        "modeled": modeled,
        "devices": [
            {"index": d, "name": gpu_name, "capacity": capacity, "modeled": modeled}
            for d in range(devices)
        ],
        "config": {
            "allocator": allocator,
            "workers_per_device": workers,
            "preset": "synthetic",
            "synthetic": True,
        },
        "wall_ns": 1_764_000_000_000_000_000,
        "read_only": read_only,
    }


def _where(proof: int, partition: int, worker: int, device: int) -> dict[str, int]:
    return {"proof": proof, "partition": partition, "worker": worker, "device": device}


def generate(
    *,
    devices: int = 2,
    workers: int = 2,
    duration_s: float = 20.0,
    partitions_per_proof: int = 4,
    seed: int = 7,
    capacity: int = 16 * GIB,
    memory_hz: float = 10.0,
    oom_every: int = 23,
    backend: str = "cpu",
    read_only: bool = False,
    markers: tuple[tuple[float, str], ...] = (),
    time_scale: float = 1.0,
) -> list[dict[str, Any]]:
    """Events of a synthetic run, sorted by time. Deterministic for a given seed.

    ``oom_every``: every that many partitions one attempt fails with an OOM at pre-stage and
    is retried on the fallback path (0 disables), so faults and fallbacks appear in every
    panel. ``time_scale`` stretches every phase (3.0 is closer to a large-domain partition)."""
    rng = random.Random(seed)
    end_t = int(duration_s * 1e9)
    run = _Run(
        rng,
        devices=devices,
        workers=workers,
        partitions_per_proof=partitions_per_proof,
        capacity=capacity,
        oom_every=oom_every,
        backend=backend,
        time_scale=time_scale,
    )
    run.events += [
        hello(devices, 0, backend=backend, capacity=capacity, read_only=read_only, workers=workers),
        {"k": "engine_state", "t": 1000, "state": "running"},
    ]
    while True:
        # the worker that becomes free first takes the next partition
        (d, w), t = min(run.worker_t.items(), key=lambda kv: (kv[1], kv[0]))
        if t >= end_t:
            break
        run.partition(d, w, t)
    events = run.events
    events.extend(
        _memory_samples(run.mem, run.mem_changes, devices, end_t, memory_hz, capacity, backend)
    )
    for at_s, name in markers:
        events.append({"k": "marker", "t": int(at_s * 1e9), "name": name})
    events.sort(key=lambda e: e["t"])
    return [e for e in events if e["t"] <= end_t]


class _Partition:
    """One partition being generated: where it runs and its phase times so far (ms)."""

    def __init__(self, where: dict[str, int], device: int) -> None:
        self.where = where
        self.device = device
        self.phases_ms: dict[str, float] = {}


class _Run:
    """The state of a synthetic run while :func:`generate` lays it out: the events so far, the
    pools each device's memory samples are drawn from, when each device's mutex and each worker
    are free. The random draws happen in one fixed order, so a seed gives one run."""

    def __init__(
        self,
        rng: random.Random,
        *,
        devices: int,
        workers: int,
        partitions_per_proof: int,
        capacity: int,
        oom_every: int,
        backend: str,
        time_scale: float,
    ) -> None:
        self.rng = rng
        self.partitions_per_proof = partitions_per_proof
        self.capacity = capacity
        self.oom_every = oom_every
        self.backend = backend
        self.time_scale = time_scale
        self.events: list[dict[str, Any]] = []
        self.next_partition = 0  # shared intake across devices: (proof, partition) = divmod
        self.proof_left: dict[int, int] = {}
        self.proof_start: dict[int, int] = {}
        self.mem = {
            d: {"sync_used": 2 * GIB, "sync_cached": 0, "async_used": 0, "async_reserved": 0}
            for d in range(devices)
        }
        self.mem_changes: list[tuple[int, int, dict[str, int]]] = []  # (t, device, deltas)
        self.gpu_free = dict.fromkeys(range(devices), 0)
        self.worker_t = {
            (d, w): int(rng.uniform(0, 80) * MS) + w * 40 * MS
            for d in range(devices)
            for w in range(workers)
        }
        self.serial = 0

    def dur(self, mean: float) -> int:
        return int(self.rng.uniform(0.8, 1.2) * mean * self.time_scale * MS)

    def phase(self, p: _Partition, name: str, start: int, length: int, ok: bool = True) -> int:
        """A phase_begin/phase_end pair; the phase's end."""
        self.events.append({"k": "phase_begin", "t": start, **p.where, "phase": name})
        self.events.append(
            {"k": "phase_end", "t": start + length, **p.where, "phase": name, "ok": ok}
        )
        p.phases_ms[name] = p.phases_ms.get(name, 0.0) + length / MS
        return start + length

    def partition(self, d: int, w: int, t: int) -> None:
        """The next partition on worker ``w`` of device ``d`` from ``t``: one attempt, or an
        OOM at pre-stage and its retry on the fallback path; then the worker's next start and
        the proof's end when it was its last partition."""
        proof, part = divmod(self.next_partition, self.partitions_per_proof)
        self.next_partition += 1
        self.serial += 1
        self.proof_left.setdefault(proof, self.partitions_per_proof)
        self.proof_start.setdefault(proof, t)
        p = _Partition(_where(proof, part, w, d), d)
        oom = bool(self.oom_every) and self.serial % self.oom_every == 0
        for attempt in (0, 1) if oom else (0,):
            t = self.phase(p, "synthesis", t, self.dur(_HOST[0][1])) if attempt == 0 else t
            prestage_len = self.dur(_HOST[1][1])
            if attempt == 0 and oom:
                t = self._oom_at_prestage(p, t, prestage_len)
                p.phases_ms = {}
                continue
            t = self._attempt(p, t, attempt, prestage_len)
        self.worker_t[(d, w)] = t + int(self.rng.uniform(1, 20) * MS)
        self.proof_left[proof] -= 1
        if self.proof_left[proof] == 0:
            self.events.append(
                {
                    "k": "proof_done",
                    "t": t + 1,
                    "proof": proof,
                    "ok": True,
                    "wall_ms": (t - self.proof_start[proof]) / MS,
                }
            )

    def _oom_at_prestage(self, p: _Partition, t: int, prestage_len: int) -> int:
        """A first attempt whose pre-stage runs out of memory: the fault, the failed
        partition_done that says it will be retried; when the retry may start."""
        t = self.phase(p, "prestage", t, prestage_len, ok=False)
        pools = {**self.mem[p.device], "driver_free": 1 * GIB, "driver_total": self.capacity}
        self.events.append(
            {
                "k": "fault",
                "t": t,
                "kind": "oom",
                "message": "cudaMalloc failed for the pre-stage buffers",
                **p.where,
                "site": "prestage",
                "requested": 12 * GIB,
                "pools": {**pools, "modeled": self.backend == "cpu"},
            }
        )
        self.events.append(
            {
                "k": "partition_done",
                "t": t + 1000,
                **p.where,
                "attempt": 0,
                "ok": False,
                "phases_ms": dict(p.phases_ms),
                "gpu_total_ms": 0.0,
                "mutex_wait_ms": 0.0,
                "prestage": "fallback",
                "prestage_reason": "OOM at pre-stage",
                "failure": "oom: cudaMalloc 12.00 GiB",
                "will_retry": True,
            }
        )
        return t + 2000

    def _attempt(self, p: _Partition, t: int, attempt: int, prestage_len: int) -> int:
        """An attempt that succeeds: pre-stage and upload (not on the fallback path), the GPU
        region under the device's mutex, the host's tail, its partition_done; its end."""
        fallback = attempt == 1
        if not fallback:
            t = self._prestage_and_upload(p, t, prestage_len)
        wait_start = t
        acquire, t = self._gpu_region(p, t, fallback)
        gpu_total = (t - acquire) / MS
        for name, mean in _AFTER:
            t = self.phase(p, name, t, self.dur(mean))
        if not fallback:
            self.mem_changes.append((t, p.device, {"sync_used": -3 * GIB, "sync_cached": +3 * GIB}))
        self.events.append(
            {
                "k": "partition_done",
                "t": t,
                **p.where,
                "attempt": attempt,
                "ok": True,
                "phases_ms": dict(p.phases_ms),
                "gpu_total_ms": gpu_total,
                "mutex_wait_ms": (acquire - wait_start) / MS,
                "prestage": "fallback" if fallback else "ok",
                "prestage_reason": "retry after OOM" if fallback else None,
                "verified": True,
            }
        )
        return t

    def _prestage_and_upload(self, p: _Partition, t: int, prestage_len: int) -> int:
        t = self.phase(p, "prestage", t, prestage_len)
        self.events.append(
            {
                "k": "alloc",
                "t": t,
                **p.where,
                "site": "prestage",
                "pool": "sync",
                "requested": 3 * GIB,
                "decision": "ok",
            }
        )
        self.mem_changes.append((t, p.device, {"sync_used": +3 * GIB}))
        return self.phase(p, "upload", t, self.dur(_HOST[2][1]))

    def _gpu_region(self, p: _Partition, t: int, fallback: bool) -> tuple[int, int]:
        """The wait for the device's mutex from ``t``, the GPU phases while it is held (the
        fallback path uploads first), the release; (acquired, released)."""
        d, wait_start = p.device, t
        acquire = max(t, self.gpu_free[d])
        self.events.append({"k": "phase_begin", "t": wait_start, **p.where, "phase": "mutex_wait"})
        self.events.append(
            {"k": "phase_end", "t": acquire, **p.where, "phase": "mutex_wait", "ok": True}
        )
        p.phases_ms["mutex_wait"] = (acquire - wait_start) / MS
        self.events.append(
            {
                "k": "mutex",
                "t": acquire,
                **p.where,
                "wait_ns": acquire - wait_start,
                "hold_ns": 0,
                "action": "acquire",
            }
        )
        t = acquire
        if fallback:
            t = self.phase(p, "fallback_upload", t, self.dur(140.0))
        self.mem_changes.append((t, d, {"async_used": +4 * GIB}))
        for name, mean in _GPU:
            t = self.phase(p, name, t, self.dur(mean))
        self.mem_changes.append((t, d, {"async_used": -4 * GIB}))
        self.gpu_free[d] = t
        self.events.append(
            {
                "k": "mutex",
                "t": t,
                **p.where,
                "wait_ns": acquire - wait_start,
                "hold_ns": t - acquire,
                "action": "release",
            }
        )
        return acquire, t


def _memory_samples(
    mem: dict[int, dict[str, int]],
    changes: list[tuple[int, int, dict[str, int]]],
    devices: int,
    end_t: int,
    hz: float,
    capacity: int,
    backend: str,
) -> list[dict[str, Any]]:
    """Memory samples at ``hz`` per device, replaying the pool changes in time order."""
    changes.sort(key=lambda c: c[0])
    out: list[dict[str, Any]] = []
    step = int(1e9 / hz)
    i = 0
    ballast = 0
    other = 600 * MIB
    for t in range(step, end_t + 1, step):
        while i < len(changes) and changes[i][0] <= t:
            _, d, delta = changes[i]
            pools = mem[d]
            for key, value in delta.items():
                pools[key] = max(0, pools[key] + value)
            # the sync pool reuses its cache before growing
            if delta.get("sync_used", 0) > 0:
                reuse = min(pools["sync_cached"], delta["sync_used"])
                pools["sync_cached"] -= reuse
            pools["async_reserved"] = max(pools["async_reserved"], pools["async_used"])
            i += 1
        for d in range(devices):
            p = mem[d]
            held = p["sync_used"] + p["sync_cached"] + p["async_reserved"] + ballast + other
            free = max(0, capacity - held)
            out.append(
                {
                    "k": "memory",
                    "t": t,
                    "device": d,
                    "sync_used": p["sync_used"],
                    "sync_cached": p["sync_cached"],
                    "async_used": p["async_used"],
                    "async_reserved": max(p["async_reserved"], p["async_used"]),
                    "async_high": 8 * GIB,
                    "pinned_host": 3 * GIB,
                    "ballast": ballast,
                    "driver_free": free,
                    "driver_total": capacity,
                    "largest_alloc": max(0, free - 64 * MIB),
                    "nvml_used": held + 400 * MIB,
                    "nvml_free": max(0, capacity - held - 400 * MIB),
                    "nvml_total": capacity,
                    "process_used": held,
                    "modeled": backend == "cpu",
                }
            )
    return out


# ---------------------------------------------------------------------------------------------
# a synthetic engine on a socket, a synthetic recording on disk (the dashboard's benchmark)


GPU_SAMPLE_S = 1.0  # NVML's period in the engine (--nvml-interval's default)


def synthetic_gpu(t: int, device: int, phase: float) -> dict[str, Any]:
    """One NVML ``gpu`` sample of a synthetic H200 (labelled: its only process is named
    "synthetic"); ``phase`` in [0, 1) moves the figures so that the graphs change."""
    busy = 0.5 + 0.45 * (1 if (device + int(phase * 10)) % 2 else -1) * phase
    return {
        "k": "gpu",
        "t": t,
        "device": device,
        "sm_util_pct": round(busy * 100),
        "mem_util_pct": round(busy * 45),
        "power_mw": 110_000 + round(busy * 560_000),
        "power_limit_mw": 700_000,
        "temp_c": 38 + round(busy * 26),
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "pcie_rx_bytes_s": round(busy * 40e9),
        "pcie_tx_bytes_s": round(busy * 4e9),
        "ecc_corrected": 0,
        "ecc_uncorrected": 0,
        "retired_pages": 0,
        "processes": [{"pid": 4242, "used": 60 << 30, "user": "bench", "command": "synthetic"}],
    }


def serve_synthetic(path: str, rate: float, ready: Any, devices: int = 8) -> None:
    """Serve a looping synthetic run of ``devices`` GPUs at ``rate`` events/s to every client
    of a Unix socket at ``path``, in the engine's wire format, plus one NVML ``gpu`` sample per
    GPU every :data:`GPU_SAMPLE_S` (as the engine's sampler sends them on the cuda backend);
    ``ready.set()`` once it listens. Runs until its process ends (``provetop bench tui`` starts
    it in a process of its own, so the dashboard's CPU time does not count it)."""
    events = generate(devices=devices, duration_s=60, seed=11, time_scale=0.5, backend="cuda")
    hello, body = events[0], events[1:]
    span = body[-1]["t"] + 1
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(4)
    ready.set()

    def serve(conn: socket.socket) -> None:
        try:
            conn.sendall(encode_frame(hello))
            start, sent, loop = time.monotonic(), 0, 0
            last_gpu = start - GPU_SAMPLE_S
            while True:
                due = int((time.monotonic() - start) * rate)
                chunk = bytearray()
                while sent < due:
                    i = sent % len(body)
                    if i == 0 and sent:
                        loop += 1
                    event = body[i]
                    if loop:
                        event = {**event, "t": event["t"] + loop * span}
                    chunk += encode_frame(event)
                    sent += 1
                now = time.monotonic()
                if now - last_gpu >= GPU_SAMPLE_S:  # every GPU's NVML sample, once a second
                    last_gpu = now
                    t = int(body[(sent - 1) % len(body)]["t"] + loop * span) if sent else 0
                    phase = (now - start) / 10 % 1.0
                    for d in range(devices):
                        chunk += encode_frame(synthetic_gpu(t, d, phase))
                if chunk:
                    conn.sendall(chunk)
                time.sleep(0.01)
        except OSError:
            return

    while True:
        conn, _ = server.accept()
        name = f"{THREAD_PREFIX}synthetic-client"
        threading.Thread(target=serve, args=(conn,), name=name, daemon=True).start()


def write_synthetic_recording(path: str | os.PathLike[str], hours: float, devices: int) -> int:
    """Write a synthetic recording of ``hours`` and ``devices`` GPUs, with a marker every ten
    minutes; the number of events."""
    events = generate(
        devices=devices,
        duration_s=hours * 3600,
        seed=5,
        time_scale=3.0,
        markers=tuple((m * 600.0, f"m{m}") for m in range(1, int(hours * 6))),
    )
    writer = RecordingWriter(path, validate_events=False, background_flush=False)
    for event in events:
        writer.write(event)
    writer.close()
    return len(events)
