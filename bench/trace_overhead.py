"""What ``provetop trace`` costs a program: each workload run traced and untraced, alternating,
N times each in one call; the medians and their ratio. Prints a table last, writes JSON.

Two figures per run. The wall time, from a small timer process around the program (``--time
CMD...``): the trace command's own start-up (Python, the socket) is outside it, the program's
CUDA initialisation, where the driver loads the library, inside. And the work time, which the
program measures itself around its steady-state loop (a ``WORK_S`` line; sppark's driver prints
one line per MSM, and the first, which pays the kernels' loading, is left out): process start,
CUDA's initialisation and the interpreter's import noise (seconds of spread in PyTorch's case)
stay outside, the library's per-call cost and its sampler inside. Runs go in the order
untraced, traced, traced, untraced, ... so that a drift of the card's clocks over the call
falls on both sides alike; the cost is the median of the per-pair ratios.

Workloads: the engine (``provetop engine`` at 2^24, one proof), a PyTorch training-like loop
with the stream-ordered backend, a CuPy loop that allocates several times per iteration (the
worst case: the library's cost is per allocation call), and sppark's MSM where
``PROVETOP_SPPARK_MSM`` names a binary.

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
import time, torch
torch.manual_seed(0)
w = [torch.randn(4096, 4096, device="cuda") for _ in range(4)]
def steps(n):
    for step in range(n):
        x = torch.randn(2048, 4096, device="cuda")
        for m in w:
            x = torch.relu(x @ m)
        loss = x.square().mean()
        loss.item()
    torch.cuda.synchronize()
steps(5)
t0 = time.perf_counter()
steps(60)
print(f"WORK_S {time.perf_counter() - t0:.4f}")
"""

CUPY = """
import time, cupy as cp
cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
def steps(n):
    for i in range(n):
        a = cp.random.random((1024, 1024))
        b = a @ a
        float(b.sum())
    cp.cuda.Device().synchronize()
steps(20)
t0 = time.perf_counter()
steps(400)
print(f"WORK_S {time.perf_counter() - t0:.4f}")
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
        out["sppark msm 2^23 x6"] = ([sppark, "23", "6"], {})
    return out


def work_seconds(stdout: str) -> float | None:
    """The program's own steady-state time: a ``WORK_S`` line, or sppark's per-MSM lines
    after the first; None for the engine, whose wall time is its work (tens of seconds of
    proving against a second of start-up)."""
    for line in stdout.splitlines():
        if line.startswith("WORK_S "):
            return float(line.split()[1])
    msm = [float(line.split(": ")[1].split(" ms")[0]) / 1e3
           for line in stdout.splitlines() if line.startswith("sppark msm ")]  # fmt: skip
    return sum(msm[1:]) if len(msm) > 1 else None


def timed(argv: list[str], env: dict[str, str], traced: bool) -> tuple[float, float | None]:
    timer = [sys.executable, __file__, "--time", *argv]
    cmd = ([sys.executable, "-m", "provetop", "trace", "--no-listen", "--no-record", "--", *timer]
           if traced else timer)  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})  # fmt: skip
    for line in done.stdout.splitlines()[::-1]:
        if line.startswith("ELAPSED_S "):
            if done.returncode != 0:
                raise RuntimeError(f"{argv[:3]} exited {done.returncode}: {done.stderr[-500:]}")
            return float(line.split()[1]), work_seconds(done.stdout)
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
        walls: dict[bool, list[float]] = {False: [], True: []}
        works: dict[bool, list[float]] = {False: [], True: []}
        try:
            timed(argv, env, traced=False)  # one warm-up run: caches (kernels, NVRTC) filled
            for i in range(a.runs):
                for traced in (False, True) if i % 2 == 0 else (True, False):
                    wall, work = timed(argv, env, traced=traced)
                    walls[traced].append(wall)
                    if work is not None:
                        works[traced].append(work)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            print(f"{name}: failed: {exc}", flush=True)
            continue
        row: dict[str, object] = {"workload": name, "order": "untraced,traced then reversed"}
        for label, series in (("wall", walls), ("work", works)):
            plain, traced_s = series[False], series[True]
            if len(plain) != a.runs or len(traced_s) != a.runs:
                continue
            ratios = [t / p for p, t in zip(plain, traced_s, strict=True)]
            row[f"{label}_untraced_s"] = plain
            row[f"{label}_traced_s"] = traced_s
            row[f"median_{label}_untraced_s"] = statistics.median(plain)
            row[f"median_{label}_traced_s"] = statistics.median(traced_s)
            row[f"{label}_cost_pct"] = 100 * (statistics.median(ratios) - 1)
            row[f"{label}_ratio_range_pct"] = [100 * (min(ratios) - 1), 100 * (max(ratios) - 1)]
        rows.append(row)
        print(f"{name}: {json.dumps(row)}", flush=True)
    print(f"\n{'workload':<22} {'what':<5} {'untraced s':>11} {'traced s':>9} {'cost':>8} "
          f"{'pairs':>16}")  # fmt: skip
    for r in rows:
        for label in ("wall", "work"):
            if f"{label}_cost_pct" not in r:
                continue
            lo, hi = r[f"{label}_ratio_range_pct"]  # type: ignore[misc]
            print(
                f"{r['workload']:<22} {label:<5} {r[f'median_{label}_untraced_s']:>11.3f} "
                f"{r[f'median_{label}_traced_s']:>9.3f} {r[f'{label}_cost_pct']:>7.2f}% "
                f"{lo:>+7.2f}..{hi:+.2f}%"
            )
    if a.json:
        Path(a.json).write_text(json.dumps({"runs": a.runs, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
