"""``provetop bench cpu``: what each phase of a partition costs on the cpu backend.

Why through the engine and not the kernels alone: the numbers an operator compares with the
dashboard are per phase of a real partition (synthesis, H step, the four MSMs, verification),
with the engine's own overheads included. Each size runs one proof of ``--repeat`` partitions
on one worker; the table shows medians.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from typing import Any

from provetop.base.errors import UsageError
from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.kernels.cpu.msm import ARKWORKS_AVAILABLE
from provetop.recordings.schema import PHASES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sizes", default="6,8,10", metavar="K,K,...", help="domain logs to run (6,8,10)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="partitions per size (3)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def measure(domain_log: int, repeat: int) -> dict[str, Any]:
    """Run one proof of ``repeat`` partitions at 2^K; per-phase medians in ms."""
    # the engine here, not at the top: every command's parser imports this module
    # (``provetop bench``'s targets), and the engine brings numpy and the kernels

    cfg = from_preset(
        None,
        domain_log=domain_log,
        partitions=repeat,
        proofs=1,
        workers_per_device=1,
        verify="always",
    )
    engine = Engine(cfg, listen=False)
    sub = engine.subscribe("bench")
    t0 = time.perf_counter()
    engine.start()
    engine.wait()
    wall = time.perf_counter() - t0
    engine.close()
    events = sub.drain()
    done = [e for e in events if e["k"] == "partition_done" and e["ok"]]
    states = {e["state"]: e["t"] for e in events if e["k"] == "engine_state"}
    phases = {}
    for name in PHASES:
        values = [e["phases_ms"][name] for e in done if name in e["phases_ms"]]
        if values:
            phases[name] = statistics.median(values)
    return {
        "domain_log": domain_log,
        "n": 1 << domain_log,
        "partitions": len(done),
        "verified": sum(1 for e in done if e["verified"]),
        "phases_ms": phases,
        "partition_ms": statistics.median(sum(e["phases_ms"].values()) for e in done)
        if done
        else None,
        "gpu_region_ms": statistics.median(e["gpu_total_ms"] for e in done) if done else None,
        "srs_ms": (states.get("running", 0) - states.get("starting", 0)) / 1e6,
        "wall_s": wall,
        "arkworks": ARKWORKS_AVAILABLE,
    }


def run(args: argparse.Namespace) -> int:
    try:
        sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--sizes expects domain logs like 6,8,10, got {args.sizes!r}") from None
    if not sizes or any(not 1 <= k <= 20 for k in sizes):
        raise UsageError("--sizes: each domain log must be between 1 and 20 on the cpu backend")
    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    results = [measure(k, args.repeat) for k in sizes]
    report = {
        "bench": "cpu",
        "backend": "cpu",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "repeat": args.repeat,
        "results": results,
    }
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return 0
    cols = [p for p in PHASES if any(p in r["phases_ms"] for r in results)]
    short = {"synthesis": "synth", "mutex_wait": "mwait", "copy_back": "copy", "release": "rel"}
    head = ["K", "srs_ms"] + [short.get(c, c) for c in cols] + ["gpu_ms", "total_ms", "verified"]
    rows = []
    for r in results:
        row = [str(r["domain_log"]), f"{r['srs_ms']:.1f}"]
        row += [f"{r['phases_ms'].get(c, 0.0):.2f}" for c in cols]
        row += [f"{r['gpu_region_ms']:.2f}", f"{r['partition_ms']:.2f}"]
        row += [f"{r['verified']}/{r['partitions']}"]
        rows.append(row)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("cpu backend, medians over", args.repeat, "partitions per size (ms)")
    print("  ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
    for row in rows:
        print("  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)))
    return 0
