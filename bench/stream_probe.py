"""Where a joint streamed MSM's time goes (a device-call probe for the 16 GiB engine).

Why: at 16 GiB the engine streams the porep-32g SRS (41 GB of points) from pinned host memory,
and the four MSMs in one pass (``provetop.kernels.cuda.msm.msm_host_points_many``) took 1,659 ms on
the
H200 against ~1,500 ms for the sum of their sums (2026-12-02, c1e7701). This replays that pass
outside the engine, at the engine's sizes, with a CUDA event pair around every chunk's sums:
the pass's time is then the chunks' sums (per query) plus the time the compute stream waited
(for a chunk's copy, for the aux scalars' upload, or for Python to launch the next chunk).

The inputs are as in the engine: H dense, L, A and B-G1 prefixes of one aux-scalar vector z
(48 % zeros, 48 % ones, 4 % dense: ``engine/spec/workload.py``'s synthetic witness), z uploaded from
pinned memory on a side stream just before the pass (the engine's ``msm_scalars``), the queries
after H waiting for it before their first chunk. The points are 2^22 real G1 points made on
the GPU and repeated through each query (the sums are not checked here: the GPU tests do that).

Rows: each query on its own, in turn (what the engine runs where the plan has no room for the
pass), then the pass for every ``--leads`` x ``--buffers``, with z uploaded beside it on a
side stream (``pass``) or by the pass itself after H's first chunks (``prelude``, the engine's
pass where a query that reads z keeps its points on the device), or left in pinned host memory
and sent up with each chunk (``host``, the engine's pass where every query that reads z is
streamed: L, A and B-G1 then take chunk k together).
``--modes`` picks the rows, ``--chunks`` runs each at several chunk sizes. Medians of
``--repeats``.

    PYTHONPATH=. python3 bench/stream_probe.py --log 27 --repeats 3 --out probe.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import numpy as np

from provetop.engine.spec.workload import query_sizes
from provetop.kernels.bench_meta import gpu_bench_meta
from provetop.kernels.cuda import msm as cm
from provetop.kernels.cuda import msm_plan as mp
from provetop.kernels.cuda.host_pinned import pinned_empty
from provetop.kernels.cuda.srs import srs
from provetop.kernels.tuning import KernelTuning

QUERIES = ("h", "l", "a", "b_g1")
POINT_BLOCK = 1 << 22  # real points made once and repeated through every query
TOP_MASK = (1 << 62) - 1  # a top limb below 2^62 keeps a 256-bit value below r (~2^254.9)


def random_dense(cp: Any, m: int) -> Any:
    """m uniformly random canonical scalars below r, (m, 4) uint64 on the device."""
    x = cp.random.randint(0, 2**63 - 1, size=(m, 4), dtype=cp.int64).view(cp.uint64)
    x[:, :3] ^= cp.random.randint(0, 2**63 - 1, size=(m, 3), dtype=cp.int64).view(cp.uint64) << 1
    x[:, 3] &= TOP_MASK
    return x


def witness_z(cp: Any, m: int) -> Any:
    """The synthetic witness's aux scalars: 48 % zeros, 48 % ones, 4 % dense."""
    u = cp.random.random(m)
    z = random_dense(cp, m)
    z[u < 0.96] = 0
    ones = (u >= 0.48) & (u < 0.96)
    z[:, 0] = cp.where(ones, cp.uint64(1), z[:, 0])
    return z


def host_points(cp: Any, block: Any, m: int, tuning: KernelTuning) -> np.ndarray:
    """m points in pinned host memory: ``block`` repeated."""
    out = pinned_empty((m, 12), method=tuning.pin_method)
    b = int(block.shape[0])
    for lo in range(0, m, b):
        hi = min(m, lo + b)
        block[: hi - lo].get(out=out[lo:hi])
    return out


def run_once(cp: Any, ctx: dict, mode: str, lead: int, buffers: int, chunk: int) -> dict[str, Any]:
    """One timed pass (or the four queries in turn): total ms, per-query sums, waits."""
    sizes, pts, h_sc, z_host = ctx["sizes"], ctx["points"], ctx["h"], ctx["z_host"]
    tuning = ctx["tuning"]
    stream = cp.cuda.Stream(non_blocking=True)
    side = cp.cuda.Stream(non_blocking=True)
    n_chunks = sum(-(-sizes[q] // chunk) for q in QUERIES)
    pairs = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(n_chunks)]
    t0, t1 = cp.cuda.Event(), cp.cuda.Event()
    with stream:
        z = cp.empty(z_host.shape, dtype=cp.uint64)
        cp.cuda.Device().synchronize()
        t0.record(stream)
        ready = None
        if mode not in ("prelude", "host"):  # the engine's msm_scalars: z up beside the MSMs
            z.set(z_host, stream=side)
            ready = cp.cuda.Event(disable_timing=True)
            ready.record(side)
        jobs = []
        for q in QUERIES:
            sc = h_sc if q == "h" else (z_host if mode == "host" else z)[: sizes[q]]
            ev = None if q == "h" else ready
            jobs.append(cm.StreamedQuery(pts[q], sc, window_max=ctx["caps"][q], ready=ev))
        rows: list = []
        if mode in ("pass", "prelude", "host"):
            rows = list(pairs)
            cm.msm_host_points_many(
                jobs,
                chunk=chunk,
                stream=stream,
                buffers=buffers,
                lead=lead,
                prelude=[(z_host, z)] if mode == "prelude" else None,
                chunk_events=rows,
                tuning=tuning,
            )
        else:
            used = 0
            for qi, job in enumerate(jobs):
                n = -(-sizes[QUERIES[qi]] // chunk)
                part = list(pairs[used : used + n])
                used += n
                cm.msm_host_points_many(
                    [job], chunk=chunk, stream=stream, buffers=2, chunk_events=part, tuning=tuning
                )
                rows += [(qi, k, a, b) for _, k, a, b in part]
        t1.record(stream)
        t1.synchronize()
    total = cp.cuda.get_elapsed_time(t0, t1)
    sums = {q: 0.0 for q in QUERIES}
    spans = []
    for q, _k, a, b in rows:
        ms = cp.cuda.get_elapsed_time(a, b)
        sums[QUERIES[q]] += ms
        spans.append((cp.cuda.get_elapsed_time(t0, a), cp.cuda.get_elapsed_time(t0, b)))
    first = min(s for s, _ in spans)
    last = max(e for _, e in spans)
    busy = sum(e - s for s, e in spans)
    return {
        "total_ms": total,
        "sums_ms": sums,
        "chunk_sums_ms": busy,
        "before_first_ms": first,
        "between_chunks_ms": (last - first) - busy,
        "after_last_ms": total - last,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", type=int, default=27, help="domain 2^K (porep-32g: 27)")
    ap.add_argument("--chunk-log", type=int, default=22, help="points per chunk: 2^K")
    ap.add_argument("--chunk", type=int, default=0, help="points per chunk (0: 2^--chunk-log)")
    ap.add_argument("--chunks", default="", help="several chunk sizes, comma-separated")
    ap.add_argument(
        "--modes", default="in turn,pass,prelude", help="rows: in turn, pass, prelude, host"
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--leads", default="0,3,5", help="H chunks before the others start")
    ap.add_argument("--buffers", default="4", help="chunk buffers of the pass")
    ap.add_argument("--window", type=int, default=19, help="H's window cap (the 16 GiB plan)")
    ap.add_argument("--out", default="", help="write the rows as JSON here")
    args = ap.parse_args(argv)
    tuning = KernelTuning.from_env()
    sizes = query_sizes(args.log).as_dict()
    chunks = [int(x) for x in args.chunks.split(",") if x.strip()] or [
        args.chunk or 1 << args.chunk_log
    ]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if min(chunks) < 1:
        ap.error(f"chunks must be positive, got {chunks}")
    if not set(modes) <= {"in turn", "pass", "prelude", "host"}:
        ap.error(f"unknown mode in {modes}")
    import cupy as cp

    t = time.perf_counter()
    secrets = random_dense(cp, min(POINT_BLOCK, max(sizes.values())))
    block = srs(secrets, tuning=tuning)
    del secrets
    points = {q: host_points(cp, block, sizes[q], tuning) for q in QUERIES}
    del block
    m = max(sizes[q] for q in QUERIES if q != "h")
    z_host = pinned_empty((m, 4), method=tuning.pin_method)
    witness_z(cp, m).get(out=z_host)
    cap_c = min(args.window, mp.COMPANION_WINDOW_MAX)
    ctx = {
        "sizes": sizes,
        "points": points,
        "h": random_dense(cp, sizes["h"]),
        "z_host": z_host,
        "tuning": tuning,
        "caps": {"h": args.window, "l": cap_c, "a": cap_c, "b_g1": cap_c},
    }
    print(f"set-up {time.perf_counter() - t:.1f} s: sizes {sizes}", file=sys.stderr)
    variants = []
    for chunk in chunks:
        if "in turn" in modes:
            variants.append(("in turn", 0, 2, chunk))
        for mode in (m for m in modes if m != "in turn"):
            for lead in (int(x) for x in args.leads.split(",")):
                for nb in (int(x) for x in args.buffers.split(",")):
                    variants.append((mode, lead, nb, chunk))
    run_once(cp, ctx, "prelude", 3, 4, chunks[0])  # warm-up: modules, pools
    results = []
    for mode, lead, nb, chunk in variants:
        runs = [run_once(cp, ctx, mode, lead, nb, chunk) for _ in range(args.repeats)]

        def med(key: str, runs: list = runs) -> float:
            return statistics.median(r[key] for r in runs)

        row = {
            "mode": mode,
            "chunk": chunk,
            "lead": lead,
            "buffers": nb,
            "total_ms": med("total_ms"),
            "chunk_sums_ms": med("chunk_sums_ms"),
            "before_first_ms": med("before_first_ms"),
            "between_chunks_ms": med("between_chunks_ms"),
            "after_last_ms": med("after_last_ms"),
            "sums_ms": {q: statistics.median(r["sums_ms"][q] for r in runs) for q in QUERIES},
            "totals_ms": [r["total_ms"] for r in runs],
        }
        results.append(row)
    head = (
        f"{'variant':<22}{'chunk':>9}{'total':>9}{'sums':>9}{'before':>9}{'between':>9}{'after':>8}"
    )
    head += "".join(f"{q:>8}" for q in QUERIES)
    print(head)
    for r in results:
        name = r["mode"]
        if name != "in turn":
            name = f"{name} lead {r['lead']} buf {r['buffers']}"
        line = f"{name:<22}{r['chunk']:>9}{r['total_ms']:>9.1f}{r['chunk_sums_ms']:>9.1f}"
        line += (
            f"{r['before_first_ms']:>9.1f}{r['between_chunks_ms']:>9.1f}{r['after_last_ms']:>8.1f}"
        )
        line += "".join(f"{r['sums_ms'][q]:>8.1f}" for q in QUERIES)
        print(line)
    print("ms, medians; sums: the chunks' own event spans (from the upload's arrival to the")
    print("chunk's last kernel); before: until the first chunk starts; between: the gaps")
    print("between spans (the next chunk's count stage runs there, plus any wait); after: the")
    print("reductions, results")
    if args.out:
        meta = gpu_bench_meta(cp, sys.argv, tuning)
        with open(args.out, "w") as f:
            json.dump(
                {"meta": meta, "rows": results, "sizes": sizes, "chunks": chunks}, f, indent=1
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
