"""Host figures of a process from ``/proc``: %CPU, %MEM, run time, and whether it is provetop's.

Why here and not psutil: provetop does not depend on psutil, and the four figures the process
list of ``provetop top`` needs (what nvitop shows beside a GPU process) are three small files
of ``/proc`` on Linux. %CPU is measured between two readings of the same pid (the first
reading of a pid gives its average over its life, as ``ps`` does); %MEM is its resident set
over the machine's memory. A pid this ``/proc`` does not know (another PID namespace) gets no
figure: nothing is invented.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

__all__ = ["ProcStat", "provetop_kind"]

PROC = Path("/proc")
# "python -m provetop engine ...", "/usr/bin/provetop trace -- ...": the subcommand
_PROVETOP = re.compile(r"(?:^|[\s/])provetop(?:\.cli)?\s+([a-z][a-z-]*)")


def provetop_kind(command: str | None) -> str | None:
    """``engine``, ``trace``, ``top``... when ``command`` runs provetop, else None."""
    if not command:
        return None
    match = _PROVETOP.search(command)
    return match.group(1) if match else None


class ProcStat:
    """Readings of pids over time (one instance per sampling loop)."""

    def __init__(self, proc: Path = PROC) -> None:
        self.proc = proc
        self._last: dict[int, tuple[float, float]] = {}  # pid -> (cpu seconds, at monotonic)
        try:
            self._tick = float(os.sysconf("SC_CLK_TCK"))
            self._page = int(os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            self._tick, self._page = 100.0, 4096
        self._mem_total = self._meminfo_total()

    def _meminfo_total(self) -> int:
        try:
            for line in (self.proc / "meminfo").read_text().splitlines():
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        return 0

    def _uptime(self) -> float | None:
        try:
            return float((self.proc / "uptime").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def info(self, pid: int) -> dict[str, Any]:
        """``cpu_pct``, ``mem_pct``, ``rss``, ``run_s`` of ``pid`` (those readable)."""
        try:
            raw = (self.proc / str(pid) / "stat").read_text()
        except OSError:
            self._last.pop(pid, None)
            return {}
        try:
            rest = raw[raw.rindex(")") + 2 :].split()
            cpu_s = (int(rest[11]) + int(rest[12])) / self._tick
            started_s = int(rest[19]) / self._tick
            rss = int(rest[21]) * self._page
        except (ValueError, IndexError):
            return {}
        out: dict[str, Any] = {"rss": rss}
        if self._mem_total:
            out["mem_pct"] = round(100.0 * rss / self._mem_total, 1)
        now = time.monotonic()
        uptime = self._uptime()
        if uptime is not None:
            out["run_s"] = max(0.0, round(uptime - started_s, 1))
        last = self._last.get(pid)
        if last is not None and now > last[1]:
            out["cpu_pct"] = round(100.0 * max(0.0, cpu_s - last[0]) / (now - last[1]), 1)
        elif out.get("run_s"):
            out["cpu_pct"] = round(100.0 * cpu_s / out["run_s"], 1)
        self._last[pid] = (cpu_s, now)
        return out

    def enrich(self, processes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``processes`` (NVML's, with pid and command) with their host figures and, for
        provetop's own, ``provetop``: the subcommand."""
        for p in processes:
            pid = p.get("pid")
            if isinstance(pid, int):
                p.update(self.info(pid))
            kind = provetop_kind(p.get("command"))
            if kind is not None:
                p["provetop"] = kind
        return processes
