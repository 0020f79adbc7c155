"""What ``provetop trace`` costs a program: each workload run traced and untraced, alternating,
N times each in one call; the medians and their ratio. Prints a table last, writes JSON.

Each run is timed by a small timer process around the program (``--time CMD...``): it starts
the program, waits and prints its wall time, so the trace command's own start-up (Python, the
socket) is outside the figure, and the program's CUDA initialisation, where the driver loads
the library, is inside it. Workloads: the engine (``provetop engine`` at 2^24, one proof), a
PyTorch training-like loop with the stream-ordered backend, a CuPy loop that allocates several
times per iteration (the worst case: the library's cost is per allocation call), and sppark's
MSM where ``PROVETOP_SPPARK_MSM`` names a binary.

    python3 bench/trace_overhead.py [--runs 5] [--only engine,torch] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TORCH = """
import torch
torch.manual_seed(0)
w = [torch.randn(4096, 4096, device="cuda") for _ in range(4)]
for step in range(60):
    x = torch.randn(2048, 4096, device="cuda")
    for m in w:
        x = torch.relu(x @ m)
    loss = x.square().mean()
    loss.item()
torch.cuda.synchronize()
"""

CUPY = """
import cupy as cp
cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
for i in range(400):
    a = cp.random.random((1024, 1024))
    b = a @ a
    float(b.sum())
cp.cuda.Device().synchronize()
"""


def workloads() -> dict[str, tuple[list[str], dict[str, str]]]:
    py = sys.executable
    out: dict[str, tuple[list[str], dict[str, str]]] = {
        "engine 2^24": ([py, "-m", "provetop", "engine", "--backend", "cuda", "--preset",
                         "porep-32g", "--domain-log", "24", "--proofs", "1", "--no-record",
                         "--exit-when-done"], {}),
        "torch loop": ([py, "-c", TORCH], {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}),
        "cupy alloc-heavy": ([py, "-c", CUPY], {}),
    }  # fmt: skip
    sppark = os.environ.get("PROVETOP_SPPARK_MSM")
    if sppark and os.path.exists(sppark):
        out["sppark msm 2^24 x5"] = ([sppark, "24", "5"], {})
    return out


def timed(argv: list[str], env: dict[str, str], traced: bool) -> float:
    timer = [sys.executable, __file__, "--time", *argv]
    cmd = ([sys.executable, "-m", "provetop", "trace", "--no-listen", "--no-record", "--", *timer]
           if traced else timer)  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})  # fmt: skip
    for line in done.stdout.splitlines()[::-1]:
        if line.startswith("ELAPSED_S "):
            if done.returncode != 0:
                raise RuntimeError(f"{argv[:3]} exited {done.returncode}: {done.stderr[-500:]}")
            return float(line.split()[1])
    raise RuntimeError(f"no time from {cmd[:6]}: rc {done.returncode} {done.stderr[-800:]}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--only", default="")
    p.add_argument("--json")
    p.add_argument("--time", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.time:
        t0 = time.perf_counter()
        rc = subprocess.run(a.time).returncode
        print(f"ELAPSED_S {time.perf_counter() - t0:.4f}", flush=True)
        return rc
    chosen = {k: v for k, v in workloads().items()
              if not a.only or any(o in k for o in a.only.split(","))}  # fmt: skip
    rows = []
    for name, (argv, env) in chosen.items():
        plain: list[float] = []
        traced: list[float] = []
        try:
            timed(argv, env, traced=False)  # one warm-up run: caches (kernels, NVRTC) filled
            for _ in range(a.runs):
                plain.append(timed(argv, env, traced=False))
                traced.append(timed(argv, env, traced=True))
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            print(f"{name}: failed: {exc}", flush=True)
            continue
        mp, mt = statistics.median(plain), statistics.median(traced)
        rows.append({"workload": name, "untraced_s": plain, "traced_s": traced,
                     "median_untraced_s": mp, "median_traced_s": mt,
                     "cost_pct": 100 * (mt - mp) / mp})  # fmt: skip
        print(f"{name}: untraced {plain}, traced {traced}", flush=True)
    print(f"\n{'workload':<22} {'untraced s':>11} {'traced s':>9} {'cost':>8}")
    for r in rows:
        print(
            f"{r['workload']:<22} {r['median_untraced_s']:>11.3f} {r['median_traced_s']:>9.3f} "
            f"{r['cost_pct']:>7.2f}%"
        )
    if a.json:
        Path(a.json).write_text(json.dumps({"runs": a.runs, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
