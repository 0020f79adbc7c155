"""The heap trimmer gives freed C-heap pages back to the kernel (RSS bounded over a long run),
and its interval can be set or turned off from the environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provetop.engine.run.heap import HeapTrimmer, _malloc_trim
from provetop.engine.settings.tuning import HEAP_TRIM_EVERY_S, Tuning
from provetop.kernels.tuning import SettingError

needs_glibc = pytest.mark.skipif(_malloc_trim() is None, reason="no glibc malloc_trim")


# Run in a fresh interpreter: in the test process other tests' threads (an engine's own
# trimmer among them) may trim the heap between the free() and the reading, and earlier frees
# leave holes that would place the pin below the blocks.
_TRIM_SCENARIO = """
import ctypes, json, sys
from provetop.engine.bench.soak import rss_bytes
from provetop.engine.run.heap import HeapTrimmer
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
blocks = []
for _ in range(64 * 256):
    p = libc.malloc(4096)
    ctypes.memset(p, 1, 4096)  # resident
    blocks.append(p)
pins = [libc.malloc(64)]
while pins[-1] < max(blocks) and len(pins) < 4096:  # a pin above every block
    pins.append(libc.malloc(64))
before = rss_bytes()
for p in blocks:
    libc.free(p)
freed = rss_bytes()
trimmer = HeapTrimmer(every=0)
trimmed = trimmer.trim()
after = rss_bytes()
json.dump({"pinned": pins[-1] > max(blocks), "before": before, "freed": freed, "after": after,
           "trimmed": trimmed, "trims": trimmer.trims, "longest_ms": trimmer.longest_ms},
          sys.stdout)
"""


@needs_glibc
def test_a_trim_returns_the_pages_freed_inside_the_heap():
    """64 MiB in 4 KiB blocks, freed below a block still in use: malloc keeps them (RSS stays
    up) until the trim gives them back."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-c", _TRIM_SCENARIO],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=root,
        check=True,
    )
    r = json.loads(out.stdout)
    assert r["pinned"], "no small block landed above the 64 MiB (the heap grew elsewhere)"
    mib = {k: r[k] >> 20 for k in ("before", "freed", "after")}
    assert r["before"] - r["freed"] < 16 << 20, mib  # free() alone kept (most of) them
    assert r["trimmed"] and r["freed"] - r["after"] > 32 << 20, mib
    assert r["trims"] == 1 and r["longest_ms"] > 0


@needs_glibc
def test_the_thread_trims_on_its_interval_and_stops():
    trimmer = HeapTrimmer(every=0.05).start()
    time.sleep(0.5)
    trimmer.stop()
    assert 3 <= trimmer.trims <= 12
    n = trimmer.trims
    time.sleep(0.2)
    assert trimmer.trims == n  # stopped


def test_the_interval_comes_from_the_tuning_record():
    """``PROVETOP_HEAP_TRIM_S`` through the run's tuning record (0 turns the trimming off; a
    bad value is refused, naming the variable)."""
    assert Tuning.from_env({}).heap_trim_s == HEAP_TRIM_EVERY_S == HeapTrimmer().every
    assert Tuning.from_env({"PROVETOP_HEAP_TRIM_S": "5"}).heap_trim_s == 5.0
    off = Tuning.from_env({"PROVETOP_HEAP_TRIM_S": "0"})
    assert not HeapTrimmer(off.heap_trim_s).active
    for bad in ("soon", "-1", "nan", "7200"):
        with pytest.raises(SettingError, match="PROVETOP_HEAP_TRIM_S"):
            Tuning.from_env({"PROVETOP_HEAP_TRIM_S": bad})
