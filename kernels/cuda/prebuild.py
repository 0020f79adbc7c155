"""``python -m provetop.kernels.cuda.prebuild``: compile every CUDA source with nvcc for the common
architectures, into the folder the loader looks in first.

Why: a GPU machine that finds a matching cubin (same source hash, defines and architecture;
:mod:`provetop.kernels.cuda.cubins`) skips NVRTC entirely. Run it on any machine with nvcc (no GPU
needed), before building a wheel or an image; ``provetop warmup`` then only loads. A cubin the
GPU machine's driver cannot load (nvcc newer than the driver) is skipped with the reason, and
that module is compiled with NVRTC instead.

Exit status: 0 when every cubin was built (or was already there), 1 when nvcc is missing or a
compile failed (each failure is reported with nvcc's output).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from provetop.kernels.cuda import cubins, inject_build
from provetop.kernels.cuda.sources import SOURCES, Defines, normalize_defines
from provetop.kernels.tuning import SettingError, parse_defines


def _build_one(
    name: str, arch: str, folder: Path, nvcc: str, force: bool, defines: Defines = ()
) -> str:
    """Build one cubin; the line that reports it."""
    path = cubins.cubin_path(name, defines, arch, folder)
    if path.is_file() and not force:
        return f"present  {name} for {arch}: {path}"
    t0 = time.perf_counter()
    try:
        cubins.build(name, arch, folder, defines, nvcc=nvcc)
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"nvcc failed on {name} for {arch}:\n{exc.stdout}{exc.stderr}") from exc
    tag = f" with {' '.join(f'{k}={v}' for k, v in defines)}" if defines else ""
    return f"built    {name}{tag} for {arch} in {time.perf_counter() - t0:.1f} s: {path}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m provetop.kernels.cuda.prebuild", description=__doc__
    )
    parser.add_argument(
        "--arch",
        default=",".join(cubins.ARCHS),
        help=f"comma-separated architectures (default: {','.join(cubins.ARCHS)})",
    )
    parser.add_argument(
        "--source",
        action="append",
        choices=SOURCES,
        help="a source to build (repeatable; default: every source)",
    )
    parser.add_argument(
        "--out", default=str(cubins.DEFAULT_DIR), help="cubin folder (default: the package's)"
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel nvcc runs")
    parser.add_argument("--nvcc", default="nvcc", help="the nvcc to run")
    parser.add_argument("--force", action="store_true", help="rebuild cubins already present")
    parser.add_argument(
        "--define",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="a compile-time define for the named --source(s) (repeatable): the cubin a run "
        "with the same PROVETOP_NTT_DEFINES / PROVETOP_MSM_DEFINES loads",
    )
    args = parser.parse_args(argv)
    nvcc = shutil.which(args.nvcc)
    if nvcc is None:
        print(
            f"prebuild: {args.nvcc} not found: no cubins built (the loader compiles with NVRTC "
            "at first use instead)",
            file=sys.stderr,
        )
        return 1
    archs = [a.strip() for a in args.arch.split(",") if a.strip()]
    if args.define and not args.source:
        parser.error("--define needs --source (the defines belong to one kernel source)")
    try:  # read as PROVETOP_*_DEFINES read them, so that the cache keys agree
        defines = normalize_defines(parse_defines(",".join(args.define), "--define"))
    except SettingError as exc:
        parser.error(str(exc))
    jobs = [(name, arch) for name in (args.source or SOURCES) for arch in archs]
    folder = Path(args.out)
    failures = 0
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [
            pool.submit(_build_one, name, arch, folder, nvcc, args.force, defines)
            for name, arch in jobs
        ]
        for fut in futures:
            try:
                print(fut.result(), flush=True)
            except RuntimeError as exc:
                failures += 1
                print(f"prebuild: {exc}", file=sys.stderr, flush=True)
    total = time.perf_counter() - t0
    print(f"{len(jobs) - failures}/{len(jobs)} cubins in {folder} ({total:.0f} s)", flush=True)
    if not args.source:  # a whole prebuild also makes provetop trace's library
        print(inject_line(), flush=True)
    return 1 if failures else 0


def inject_line() -> str:
    """Build (or find cached) the injection library of ``provetop trace``; one line saying
    which, or why not. Never a failure of the prebuild: tracing is optional, the kernels
    are not."""
    t0 = time.perf_counter()
    result = inject_build.build()
    if not result.ok:
        return f"trace library not built: {result.reason} (provetop trace will say so)"
    how = "cached" if result.cached else f"built in {time.perf_counter() - t0:.1f} s"
    return f"trace library {how}: {result.path}"


if __name__ == "__main__":
    sys.exit(main())
