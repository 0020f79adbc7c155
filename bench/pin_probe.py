"""How long page-locking a witness pool takes, by method (a device-call probe for the CUDA engine).

Why: each CUDA worker pins ~17 GB of witness pool at 2^27 (34 GB more with
--synthesis-ahead), and on the H200 VM the first two pools took ~25 s of start-up, about
1.5 s of system time per GB. Large pages would cut the pages the kernel pins 512-fold. This
measures, per size, with the same bytes each time:

- ``cupy``: ``cupy.cuda.PinnedMemory`` (cudaHostAlloc; what ``pinned_empty`` uses, without
  CuPy's pinned pool, which would cache the block between rows);
- ``register``: an anonymous mmap, touched, then cudaHostRegister;
- ``register-thp``: the same with ``madvise(MADV_HUGEPAGE)`` before touching it (transparent
  huge pages when the kernel allows them: ``/sys/kernel/mm/transparent_hugepage/enabled``);

and the host-to-device copy rate from each buffer (1 GiB). Without CuPy it still times the
host side (mmap and touch, with and without MADV_HUGEPAGE). The table is printed last.

    python3 bench/pin_probe.py --gib 1,4,17
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import time
from pathlib import Path
from typing import Any

import numpy as np

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
COPY_BYTES = 1 << 30  # the copy-rate sample: 1 GiB, long enough to reach the link's rate


def _touch(buf: mmap.mmap, nbytes: int) -> None:
    """Fault every page in (writing zeros), as filling the witness would."""
    np.frombuffer(buf, np.uint8, nbytes)[:] = 0


def _mapped(nbytes: int, huge: bool) -> tuple[mmap.mmap, float]:
    t0 = time.perf_counter()
    buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge and hasattr(mmap, "MADV_HUGEPAGE"):
        buf.madvise(mmap.MADV_HUGEPAGE)
    _touch(buf, nbytes)
    return buf, time.perf_counter() - t0


def _copy_rate(cupy: Any, ptr: int, nbytes: int) -> float:
    """GB/s of one host-to-device copy of ``nbytes`` from ``ptr``."""
    dst = cupy.empty(nbytes, dtype=cupy.uint8)
    stream = cupy.cuda.Stream(non_blocking=True)
    begin, end = cupy.cuda.Event(), cupy.cuda.Event()
    begin.record(stream)
    cupy.cuda.runtime.memcpyAsync(dst.data.ptr, ptr, nbytes, 1, stream.ptr)
    end.record(stream)
    end.synchronize()
    return nbytes / cupy.cuda.get_elapsed_time(begin, end) / 1e6


def probe(gib: int, cupy: Any | None) -> list[dict[str, Any]]:
    nbytes = gib << 30
    rows = []
    for huge in (False, True):
        name = "register-thp" if huge else "register"
        buf, t_map = _mapped(nbytes, huge)
        row: dict[str, Any] = {"method": name, "gib": gib, "map_touch_s": t_map}
        if cupy is not None:
            ptr = np.frombuffer(buf, np.uint8, nbytes).ctypes.data
            t0 = time.perf_counter()
            cupy.cuda.runtime.hostRegister(ptr, nbytes, 0)
            row["pin_s"] = time.perf_counter() - t0
            row["h2d_gbs"] = _copy_rate(cupy, ptr, min(nbytes, COPY_BYTES))
            t0 = time.perf_counter()
            cupy.cuda.runtime.hostUnregister(ptr)
            row["unpin_s"] = time.perf_counter() - t0
        rows.append(row)
        buf.close()
    if cupy is not None:
        t0 = time.perf_counter()
        mem = cupy.cuda.PinnedMemory(nbytes)
        t_alloc = time.perf_counter() - t0
        t0 = time.perf_counter()
        # PinnedMemory has no buffer interface: view its pages through their address
        view = (ctypes.c_uint8 * nbytes).from_address(mem.ptr)
        np.frombuffer(view, np.uint8, nbytes)[:] = 0
        del view
        t_fill = time.perf_counter() - t0
        rows.append(
            {
                "method": "cupy",
                "gib": gib,
                "pin_s": t_alloc,
                "map_touch_s": t_fill,
                "h2d_gbs": _copy_rate(cupy, mem.ptr, min(nbytes, COPY_BYTES)),
            }
        )
        del mem
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", default="1,4,17", help="sizes in GiB, comma separated")
    args = ap.parse_args()
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # the host side alone
        print(f"no CUDA ({type(exc).__name__}: {exc}): host side only")
        cupy = None
    thp = THP.read_text().strip() if THP.exists() else "unknown"
    print(f"transparent huge pages: {thp}")
    rows = [r for g in args.gib.split(",") for r in probe(int(g), cupy)]
    print(f"{'method':<14}{'GiB':>5}{'map+touch s':>13}{'pin s':>8}{'s/GB':>7}{'H2D GB/s':>10}")
    for r in rows:
        pin = r.get("pin_s")
        per_gb = (pin + r["map_touch_s"]) / (r["gib"] * 1.073741824) if pin is not None else None
        print(
            f"{r['method']:<14}{r['gib']:>5}{r['map_touch_s']:>13.2f}"
            + (f"{pin:>8.2f}{per_gb:>7.2f}" if pin is not None else f"{'-':>8}{'-':>7}")
            + (f"{r['h2d_gbs']:>10.1f}" if "h2d_gbs" in r else f"{'-':>10}")
        )


if __name__ == "__main__":
    main()
