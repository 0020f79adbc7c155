"""``provetop top``: the machine's GPUs the way nvitop shows them, and the engines as they come.

With no engine it draws every local GPU from NVML (utilisation, memory, power, temperature,
clocks, PCIe, fan, ECC, XIDs, processes, history) through the dashboard's device health panel:
the same ``gpu`` events, reducer and panel as an engine's. Every two seconds it looks for local
engines and attaches each new one without a restart; ``--cuzk-log``/``--cuzk-status`` add a
cuzk prover (a log that does not exist yet is followed until it appears).
"""

from __future__ import annotations

import argparse

from provetop.base.errors import UsageError
from provetop.commands.watch import (
    cuzk_source,
    run_monitor,
)
from provetop.sources.protocol import EventSource

INTERVAL_MAX = 3600.0


def run(args: argparse.Namespace) -> int:
    if not 0 < args.interval <= INTERVAL_MAX:
        raise UsageError(
            f"--interval must be above 0 and at most {INTERVAL_MAX:.0f} seconds, "
            f"got {args.interval:g}"
        )
    sources: list[EventSource] = []
    if args.cuzk_log is not None or args.cuzk_status is not None:
        sources.append(cuzk_source(args))
    return run_monitor(args, sources, interval=args.interval)
