"""Where a long run's RSS goes: glibc malloc against Python's small-object allocator.

Why a separate script: the soak bench's RSS series shows *that* RSS climbs; this says *which
allocator* holds it. It runs the soak's engine (ci preset, ``--verify never``, recorded) in
this process and, every ``--every`` seconds, prints RSS, the anonymous mappings' RSS, glibc
malloc's in-use and free-but-kept bytes (``mallinfo2``) and obmalloc's arenas and allocated
bytes (``sys._debugmallocstats``), optionally right after a ``malloc_trim(0)`` (``--trim``) so
that what malloc keeps is out of the way and what remains is Python's arenas.

    PYTHONPATH=. python3 bench/soak_heap.py --minutes 10 --every 60 --trim
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import threading
import time

from provetop.engine.bench.soak import malloc_bytes, rss_bytes
from provetop.engine.run.heap import HeapTrimmer
from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.engine.settings.tuning import Tuning

OBMALLOC = ("arenas allocated current", "bytes in allocated blocks", "bytes in available blocks")


def obmalloc_stats() -> dict[str, int]:
    """The summary lines of ``sys._debugmallocstats`` (it writes to fd 2: captured here)."""
    saved = os.dup(2)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read().decode()
    out = {}
    for key in OBMALLOC:
        m = re.search(r"# " + re.escape(key) + r"\s*=\s*([\d,]+)", text)
        if m:
            out[key] = int(m.group(1).replace(",", ""))
    return out


def anon_rss() -> int:
    """RSS of the anonymous mappings (malloc arenas, obmalloc arenas, thread stacks)."""
    total, name = 0, None
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and ":" not in parts[0]:
                name = parts[5] if len(parts) > 5 else ""
            elif line.startswith("Rss:") and name == "":
                total += int(parts[1]) * 1024
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--every", type=float, default=60.0, help="seconds between two rows")
    ap.add_argument("--trim", action="store_true", help="malloc_trim(0) before each row")
    args = ap.parse_args()
    mib = 1 << 20
    trimmer = HeapTrimmer(every=0)
    with tempfile.TemporaryDirectory() as tmp:
        tuning = Tuning(heap_trim_s=0)  # this script trims (or not) itself
        engine = Engine(
            from_preset("ci", proofs=10**9, verify="never"),
            tuning=tuning,
            listen=f"unix:{tmp}/e.sock",
            record=f"{tmp}/s.pvtrec",
        )
        engine.start()
        t0 = time.monotonic()
        try:
            while time.monotonic() - t0 < args.minutes * 60:
                time.sleep(args.every)
                if args.trim:
                    trimmer.trim()
                used, free = malloc_bytes() or (0, 0)
                ob = obmalloc_stats()
                print(
                    f"t={time.monotonic() - t0:.0f}s rss={rss_bytes() / mib:.1f} "
                    f"anon={anon_rss() / mib:.1f} malloc_used={used / mib:.1f} "
                    f"malloc_free={free / mib:.1f} "
                    f"obmalloc_arenas={ob.get('arenas allocated current')} "
                    f"obmalloc_used={ob.get('bytes in allocated blocks', 0) / mib:.1f} "
                    f"obmalloc_free={ob.get('bytes in available blocks', 0) / mib:.1f} "
                    f"threads={threading.active_count()} "
                    f"partitions={engine.state.totals()['partitions_ok']}",
                    flush=True,
                )
        finally:
            engine.stop("heap diagnosis done")
            engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
