"""``provetop selftest [--backend cpu|cuda] [--json]``: prove a host's kernels exact before
proving anything on it.

Runs every check of the chosen backend on fresh random inputs (see ``kernels/selftest/``),
prints a table (check, size, result, time) or a JSON list, and exits 0 only if nothing failed.
A check that needs a missing optional package (py_ecc) shows as "skip" and does not fail.
The CUDA rows run with the kernels' tuning record from the environment (``PROVETOP_*``), as
a run would; there a bad setting is a usage error (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys

from provetop.base.errors import UsageError
from provetop.kernels.backends import BackendUnavailable
from provetop.kernels.selftest.registry import CheckResult
from provetop.kernels.selftest.runner import run_selftest
from provetop.kernels.tuning import KernelTuning, SettingError


def run(args: argparse.Namespace) -> int:
    tuning = KernelTuning()
    if args.backend == "cuda":  # the CPU backend has nothing to tune
        try:
            tuning = KernelTuning.from_env()
        except SettingError as exc:
            raise UsageError(str(exc)) from exc

    width = 58
    header = [False]

    def show(res: CheckResult) -> None:
        if args.json:
            return
        if not header[0]:
            header[0] = True
            print(f"{'check':<{width}} {'size':>6} {'result':>6} {'time':>9}")
            print("-" * (width + 24))
        line = f"{res.name[:width]:<{width}} {res.size:>6} {res.status:>6} {res.seconds:>8.3f}s"
        print(line, flush=True)
        if res.detail and res.status != "pass":
            print(f"    {res.detail}", flush=True)

    try:
        results = run_selftest(args.backend, on_result=show, tuning=tuning)
    except BackendUnavailable as exc:
        if args.json:
            print(json.dumps([{"name": "backend", "status": "ERROR", "detail": str(exc)}]))
        sys.stderr.write(f"provetop: error: {exc}\n")
        return 2  # the machine cannot run this backend: a bad argument here, as for engine
    failed = [r for r in results if not r.ok]
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        total = sum(r.seconds for r in results)
        verdict = "all passed" if not failed else f"{len(failed)} FAILED"
        print("-" * (width + 24))
        print(f"{len(results)} checks, {verdict}, {total:.2f}s ({args.backend} backend)")
    return 0 if not failed and results else 1
