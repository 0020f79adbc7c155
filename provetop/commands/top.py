"""``provetop top``: the machine's GPUs the way nvitop shows them, and the engines as they come.

With no engine it draws every local GPU from NVML (utilisation, memory, power, temperature,
clocks, PCIe, fan, ECC, XIDs, processes, history) through the dashboard's device health panel:
the same ``gpu`` events, reducer and panel as an engine's. Every two seconds it looks for local
engines and attaches each new one without a restart; ``--cuzk-log``/``--cuzk-status`` add a
cuzk prover (a log that does not exist yet is followed until it appears). ``--once`` and
``--json`` print the same once and exit (:mod:`provetop.commands.top_once`); ``--only`` and
``--pid`` choose the GPUs and processes shown, as nvitop's.
"""

from __future__ import annotations

import argparse

from provetop.base.errors import UsageError
from provetop.commands.top_once import print_once
from provetop.commands.watch import (
    cuzk_source,
    run_monitor,
)
from provetop.sources.protocol import EventSource

INTERVAL_MAX = 3600.0


def int_set(flag: str, text: str | None) -> set[int] | None:
    """``--only 0,2`` as {0, 2}; None without the flag; a UsageError naming a bad value."""
    if text is None:
        return None
    values: set[int] = set()
    for part in text.replace(" ", ",").split(","):
        if not part:
            continue
        if not part.isdigit():
            raise UsageError(
                f"{flag} takes non-negative integers separated by commas, got {text!r}"
            )
        values.add(int(part))
    if not values:
        raise UsageError(f"{flag} needs at least one value")
    return values


def run(args: argparse.Namespace) -> int:
    if not 0 < args.interval <= INTERVAL_MAX:
        raise UsageError(
            f"--interval must be above 0 and at most {INTERVAL_MAX:.0f} seconds, "
            f"got {args.interval:g}"
        )
    only, pids = int_set("--only", args.only), int_set("--pid", args.pid)
    if args.once or args.json:
        return print_once(only, pids, as_json=args.json)
    sources: list[EventSource] = []
    if args.cuzk_log is not None or args.cuzk_status is not None:
        sources.append(cuzk_source(args))
    return run_monitor(args, sources, interval=args.interval, only=only, pids=pids)
