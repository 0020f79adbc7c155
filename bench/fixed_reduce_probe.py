"""Where the fixed-base MSM's single bucket reduction loses time at 2^20: the whole call's
median (3 alternating rounds) for buckets per reduction thread (S) x the tree's fan-in x its
doubling mode, at c = 20 (2^19 buckets) and c = 18. Prints one table; JSON to --out.

    PYTHONPATH=. python3 bench/fixed_reduce_probe.py --out /tmp/probe.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time

import numpy as np

from kernels import layout
from kernels.cuda import msm_fixed as mf
from kernels.cuda.runtime import require_cupy
from kernels.cuda.srs import srs
from kernels.tuning import KernelTuning


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log-n", type=int, default=20)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    cp = require_cupy()
    n = 1 << args.log_n
    gen = np.random.default_rng(1)
    pts = srs(cp.asarray(layout.random_fr_limbs(n, gen, montgomery=False)))
    scalars = cp.asarray(layout.random_fr_limbs(n, gen, montgomery=False))
    variants = [
        (c, S, f, mode)
        for c in (20, 18)
        for S, f, mode in itertools.product((0, 16, 32), (4, 16), ("auto", "scaled"))
    ]
    tables = {c: mf.build_table(pts, c) for c in (20, 18)}
    ref = None
    times: dict[tuple, list[float]] = {v: [] for v in variants}
    for _ in range(3):
        for v in variants:
            c, S, f, mode = v
            mf.REDUCE_GROUP = S
            tuning = KernelTuning(msm_reduce_fanin=f, msm_reduce=mode)
            out = mf.msm_fixed(tables[c], scalars, tuning=tuning)  # warm, and the check
            ref = out if ref is None else ref
            assert np.array_equal(out, ref), v
            for _ in range(5):
                cp.cuda.Device().synchronize()
                t0 = time.perf_counter()
                mf.msm_fixed(tables[c], scalars, tuning=tuning)
                cp.cuda.Device().synchronize()
                times[v].append((time.perf_counter() - t0) * 1e3)
    rows = [
        {
            "c": v[0],
            "S": v[1] or "rule",
            "fanin": v[2],
            "mode": v[3],
            "median_ms": statistics.median(t),
        }
        for v, t in times.items()
    ]
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)
    print(f"fixed-base MSM 2^{args.log_n}, all results equal; median of 15 calls, ms")
    for r in sorted(rows, key=lambda r: r["median_ms"]):
        print(
            f"c={r['c']:>2} S={r['S']!s:>4} fanin={r['fanin']:>2} {r['mode']:>6}  "
            f"{r['median_ms']:.2f}"
        )


if __name__ == "__main__":
    main()
