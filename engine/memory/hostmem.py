"""Page-locked host memory a CUDA run will hold, checked against the host before it is taken.

Why: a CUDA run pins the host-resident SRS queries (41 GB at porep-32g on a 16 GiB card) and
one witness pool per worker (17 GB at 2^27; two with ``--synthesis-ahead``). Page-locked memory
cannot be swapped. A plan beyond what the host has free ends with the kernel's OOM killer
part-way through the run, with no recording footer. A refusal at start-up says which part to
drop instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from provetop.engine.spec.workload import FR_BYTES

# What the plan may take of the host's available memory: the rest stays for the process itself
# (Python, CuPy, the recording's buffers) and for everything else on the host.
PINNED_SHARE = 0.85
MEMINFO = Path("/proc/meminfo")


class HostMemoryError(RuntimeError):
    """The run's page-locked plan does not fit this host (the message is one line)."""


@dataclass(frozen=True)
class PinnedPlan:
    """The page-locked bytes a run will hold on this host."""

    host_srs: int  # the host-resident SRS queries, once for every device
    pool: int  # one witness pool: a, b, c (n rows) and z (m rows)
    pools: int  # how many: devices x workers x (2 with the look-ahead, else 1)
    scratch: int = 0  # the one-slot memory plan's host scratch, one polynomial per worker

    @property
    def total(self) -> int:
        return self.host_srs + self.pool * self.pools + self.scratch


def witness_pool_bytes(domain_log: int, m: int) -> int:
    """One pool of ``provetop.engine.spec.witness_gpu.PinnedBuffers``: a, b, c of 2^k rows and z of
    m."""
    return (3 * (1 << domain_log) + m) * FR_BYTES


def available_bytes(meminfo: str | None = None) -> int | None:
    """MemAvailable from /proc/meminfo (``meminfo``: its text, for tests), else None."""
    try:
        text = MEMINFO.read_text() if meminfo is None else meminfo
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024  # the file counts kB
    return None


def refusal(plan: PinnedPlan, available: int | None, ahead: bool) -> str | None:
    """One line when the plan does not fit the host (None when it does, or when the host's
    free memory is unknown)."""
    if available is None or plan.total <= PINNED_SHARE * available:
        return None
    gb = 1e9
    advice = "drop --synthesis-ahead, or use " if ahead else "use "
    return (
        f"page-locked host memory needed: SRS {plan.host_srs / gb:.1f} GB + "
        f"{plan.pools} witness pools x {plan.pool / gb:.1f} GB = {plan.total / gb:.1f} GB, "
        f"more than {PINNED_SHARE:.0%} of the {available / gb:.1f} GB this host has available; "
        f"{advice}fewer workers per device or a larger --device-memory (less SRS on the host)"
    )


def host_available() -> int | None:
    """This host's available memory now (MemAvailable; sysconf's free pages elsewhere)."""
    avail = available_bytes()
    if avail is not None:
        return avail
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None
