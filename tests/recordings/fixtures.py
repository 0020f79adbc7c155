"""Realistic telemetry without the engine, for recording, summary, export and dashboard tests.

:func:`make_run` simulates P partitions per proof on D devices with W workers each: workers take
partitions as they become free, GPU phases on one device never overlap (the device mutex), one
partition hits an OOM and is retried on the fallback path, memory is sampled at 10 Hz, and the
run carries a marker and control acknowledgements. Every event is built with
:func:`provetop.recordings.schema.make`, so it is valid by construction. Times are nanoseconds.
"""

from __future__ import annotations

import random
from typing import Any

from provetop.recordings.schema import make

MS = 1_000_000
GIB = 1 << 30
GPU_PHASES = ("h_step", "msm_h", "msm_l", "msm_a", "msm_b_g1", "copy_back")


def hello(t: int = 0, devices: int = 1, modeled: bool = True, **config: Any) -> dict[str, Any]:
    """A hello event for ``devices`` modeled 16 GiB devices."""
    return make(
        "hello",
        t,
        schema=1,
        engine_id="fixture-0001",
        host="testhost",
        pid=4242,
        version="0.1.0",
        source="provetop",
        backend="cpu" if modeled else "cuda",
        modeled=modeled,
        devices=[
            {"index": d, "name": f"modeled-{d}", "capacity": 16 * GIB, "modeled": modeled}
            for d in range(devices)
        ],
        config={"preset": "fixture", **config},
        wall_ns=1_764_000_000_000_000_000,
        read_only=False,
    )


def _pools(rng: random.Random, used: int) -> dict[str, Any]:
    sync_used = used // 2
    async_used = used - sync_used
    async_reserved = async_used + rng.randrange(0, 2 * GIB)
    sync_cached = rng.randrange(0, GIB)
    total = 16 * GIB
    free = max(0, total - sync_used - sync_cached - async_reserved)
    return {
        "sync_used": sync_used,
        "sync_cached": sync_cached,
        "async_used": async_used,
        "async_reserved": async_reserved,
        "async_high": async_reserved + GIB,
        "pinned_host": 3 * GIB,
        "ballast": 0,
        "driver_free": free,
        "driver_total": total,
        "nvml_used": total - free,
        "nvml_free": free,
        "nvml_total": total,
        "modeled": True,
    }


def make_run(
    partitions: int = 4,
    workers: int = 2,
    devices: int = 1,
    proofs: int = 1,
    seed: int = 0,
    oom: bool = True,
    memory_hz: float = 10.0,
) -> list[dict[str, Any]]:
    """Events of a whole simulated run, in time order (see the module docstring)."""
    rng = random.Random(seed)
    events: list[tuple[int, int, dict[str, Any]]] = []  # (t, seq, event): stable time order
    seq = 0

    def emit(event_kind: str, t: int, /, **fields: Any) -> None:
        nonlocal seq
        events.append((t, seq, make(event_kind, t, **fields)))
        seq += 1

    def phase(where: dict[str, int], name: str, t: int, dur: int, ok: bool = True) -> int:
        emit("phase_begin", t, phase=name, **where)
        emit("phase_end", t + dur, phase=name, ok=ok, **where)
        return t + dur

    free_at = {
        (d, w): 1 * MS + (d * workers + w) * 3 * MS for d in range(devices) for w in range(workers)
    }
    gpu_free = dict.fromkeys(range(devices), 0)
    failing = (0, min(1, partitions - 1)) if oom else None
    proof_span: dict[int, list[int]] = {}
    queue = [(p, q, 0, 0) for p in range(proofs) for q in range(partitions)]
    while queue:
        proof, part, attempt, not_before = queue.pop(0)
        d, w = min(free_at, key=lambda k: (free_at[k], k))
        where = {"proof": proof, "partition": part, "worker": w, "device": d}
        t = start = max(free_at[(d, w)], not_before)
        ms: dict[str, float] = {}
        fallback = attempt > 0
        fails = failing == (proof, part) and attempt == 0

        def timed(name: str, dur_ms: float, ok: bool = True, where=where, ms=ms) -> None:
            nonlocal t
            dur = int(dur_ms * MS)
            t = phase(where, name, t, dur, ok)
            ms[name] = dur / MS

        timed("synthesis", rng.uniform(20, 40))
        need = rng.randrange(4 * GIB, 6 * GIB)
        decision = "fallback" if fallback else "ok"
        reason = "retry after OOM" if fallback else None
        extra = {"reason": reason} if reason else {}
        emit(
            "alloc",
            t,
            site="prestage",
            pool="sync",
            requested=need,
            decision=decision,
            free=12 * GIB,
            margin=GIB,
            pools=_pools(rng, need),
            **where,
            **extra,
        )
        timed("prestage", rng.uniform(1, 4))
        if not fallback:
            timed("upload", rng.uniform(5, 10))
        wait_start = t
        acquire = max(t, gpu_free[d])
        timed("mutex_wait", (acquire - t) / MS)
        emit("mutex", acquire, wait_ns=acquire - wait_start, hold_ns=0, action="acquire", **where)
        gpu_ms = 0.0
        ok = True
        for name in (("fallback_upload",) if fallback else ()) + GPU_PHASES:
            if fails and name == "msm_h":
                emit(
                    "fault",
                    t + 2 * MS,
                    kind="oom",
                    message="out of memory allocating MSM scratch",
                    device=d,
                    worker=w,
                    proof=proof,
                    partition=part,
                    site="msm_scratch",
                    requested=2 * GIB,
                    pools=_pools(rng, 15 * GIB),
                )
                timed(name, 2.0, ok=False)
                ok = False
                break
            timed(name, rng.uniform(5, 30))
        gpu_ms = (t - acquire) / MS
        gpu_free[d] = t
        emit(
            "mutex", t, wait_ns=acquire - wait_start, hold_ns=t - acquire, action="release", **where
        )
        if ok:
            timed("verify", rng.uniform(2, 6))
        timed("release", rng.uniform(0.2, 1))
        verified = (
            ok if not (proof == proofs - 1 and part == partitions - 1 and partitions > 2) else None
        )
        done: dict[str, Any] = {
            "attempt": attempt,
            "ok": ok,
            "phases_ms": ms,
            "gpu_total_ms": gpu_ms,
            "mutex_wait_ms": (acquire - wait_start) / MS,
            "prestage": "fallback" if fallback else "ok",
            "verified": verified if ok else None,
        }
        if fallback:
            done["prestage_reason"] = "retry after OOM"
        if not ok:
            done.update(failure="oom in msm_h", will_retry=True)
            queue.insert(0, (proof, part, 1, t + 1))
        emit("partition_done", t, **where, **done)
        free_at[(d, w)] = t
        span = proof_span.setdefault(proof, [start, t])
        span[0], span[1] = min(span[0], start), max(span[1], t)
        if ok and all(
            any(
                e[2]["k"] == "partition_done"
                and e[2]["proof"] == proof
                and e[2]["partition"] == q
                and e[2]["ok"]
                for e in events
            )
            for q in range(partitions)
        ):
            emit("proof_done", t + 1, proof=proof, ok=True, wall_ms=(t - span[0]) / MS)

    end = max(t for t, _, _ in events) + 5 * MS
    mid = end // 2
    emit("marker", mid, name="halfway")
    emit("control", mid + MS, id=1, cmd="marker", args={"name": "halfway"}, ok=True, client="test")
    emit(
        "control",
        mid + 2 * MS,
        id=2,
        cmd="trim",
        args={"device": 0},
        ok=False,
        error="read-only engine",
        client="test",
    )
    step = int(1e9 / memory_hz)
    for d in range(devices):
        for ts in range(0, end, step):
            emit("memory", ts + d, device=d, **_pools(rng, rng.randrange(2 * GIB, 10 * GIB)))
    emit("engine_state", 0, state="running")
    emit("engine_state", end, state="done", reason="all proofs completed")
    ordered = [e for _, _, e in sorted(events, key=lambda x: (x[0], x[1]))]
    return [hello(0, devices=devices, workers=workers)] + ordered
