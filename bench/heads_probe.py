"""The cut buckets' partial sums added by one thread each (msm_accumulate_heads) against the
levels' cascade, in the same process: whole-call medians of the general MSM (device points)
and the fixed-base MSM, dense scalars, HEADS_MAX_CHUNKS = 2 (heads) and 0 (levels) in
alternating rounds, every result compared between the two. Prints one table; JSON to --out.

    PYTHONPATH=. python3 bench/heads_probe.py --log-sizes 20,24,27 --out /tmp/heads.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from kernels import layout
from kernels.cuda import msm as cm
from kernels.cuda import msm_fixed as mf
from kernels.cuda import msm_plan as mp
from kernels.cuda.runtime import require_cupy
from kernels.cuda.srs import srs


def _timed(cp, fn, reps: int) -> tuple[list[float], object]:
    out = fn()  # warm, and the result
    times = []
    for _ in range(reps):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        fn()
        cp.cuda.Device().synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return times, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log-sizes", default="20,24")
    ap.add_argument("--fixed-max-log", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--heads", type=int, default=mp.HEADS_MAX_CHUNKS, help="HEADS_MAX_CHUNKS")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    cp = require_cupy()
    gen = np.random.default_rng(7)
    rows = []
    for k in (int(x) for x in args.log_sizes.split(",")):
        n = 1 << k
        pts = srs(cp.asarray(layout.random_fr_limbs(n, gen, montgomery=False)))
        sc = cp.asarray(layout.random_fr_limbs(n, gen, montgomery=False))
        settings = [("general", lambda marks=None, p=pts, s=sc: cm.msm(p, s, marks=marks))]
        if k <= args.fixed_max_log:
            table = mf.build_table(pts)
            settings.append(
                ("fixed", lambda marks=None, t=table, s=sc: mf.msm_fixed(t, s, marks=marks))
            )
        reps = 5 if k < 27 else 3
        for name, fn in settings:
            on = args.heads
            times: dict[int, list[float]] = {on: [], 0: []}
            outs = {}
            for _ in range(args.rounds):
                for heads in (on, 0):
                    mp.HEADS_MAX_CHUNKS = heads
                    t, outs[heads] = _timed(cp, fn, reps)
                    times[heads] += t
            mp.HEADS_MAX_CHUNKS = on
            assert np.array_equal(outs[on], outs[0]), (k, name)
            marks: list = []
            fn(marks)
            took = "heads" in {stage for stage, _ in marks}
            rows.append(
                {
                    "log_size": k,
                    "msm": name,
                    "heads_max_chunks": on,
                    "took_heads": took,
                    "heads_ms": statistics.median(times[on]),
                    "levels_ms": statistics.median(times[0]),
                    "equal": True,
                }
            )
        settings = pts = sc = table = None  # noqa: F841
        cp.get_default_memory_pool().free_all_blocks()
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)
    print("dense scalars, medians of all rounds (ms), results equal in every pair")
    for r in rows:
        d = r["heads_ms"] - r["levels_ms"]
        print(
            f"2^{r['log_size']:<3} {r['msm']:>8}  heads {r['heads_ms']:8.2f}  "
            f"levels {r['levels_ms']:8.2f}  {d:+.2f}  (took heads: {r['took_heads']})"
        )


if __name__ == "__main__":
    main()
