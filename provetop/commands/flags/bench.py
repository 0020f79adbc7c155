"""The flags of ``provetop bench TARGET [FLAGS]``.

Why only the target here: each target's own flags live next to the code it measures and that
module imports what it measures (the engine, CuPy, the dashboard), so ``provetop bench
--help`` names the targets without importing any, and :mod:`provetop.commands.bench` parses
the rest with the one target's flags when it runs (``provetop bench msm --help`` imports
only the MSM bench).
"""

from __future__ import annotations

import argparse

from provetop.commands import Subparsers

# target -> module providing add_arguments(parser) and run(args) -> int
TARGETS: dict[str, str] = {
    "cpu": "provetop.engine.bench.cpu",
    "ntt": "provetop.kernels.bench_ntt",
    "msm": "provetop.kernels.bench_msm",
    "pipeline": "provetop.engine.bench.pipeline",
    "metrics": "provetop.sources.bench_metrics",
    "soak": "provetop.engine.bench.soak",
    "flood": "provetop.engine.bench.flood",
    "signals": "provetop.engine.bench.signals",
    "tui": "provetop.tui.bench",
}

BLURBS: dict[str, str] = {
    "cpu": "the cpu backend's partition phases at a few small sizes",
    "ntt": "the CUDA NTT at each size (GPU)",
    "msm": "the CUDA MSM at each size (GPU)",
    "pipeline": "the whole engine on a preset, reduced from its recording; --device-memory "
    "with a list sweeps card sizes, --device-counts the number of GPUs",
    "metrics": "the cost of serving Prometheus metrics",
    "soak": "a long run's memory growth under connect/close storms",
    "flood": "what local clients and scrapers cost a run: partitions/s quiet and under each attack",
    "signals": "how long SIGTERM or SIGINT takes to act at each stage of an engine's start-up",
    "tui": "the dashboard's frame cost at an event rate",
}


def add_parser(sub: Subparsers, name: str, help_text: str) -> None:
    epilog = "targets:\n" + "\n".join(f"  {t:<9} {BLURBS[t]}" for t in TARGETS)
    epilog += "\n\n'provetop bench TARGET --help' lists a target's flags."
    p = sub.add_parser(
        name,
        help=help_text,
        description=help_text,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="TARGET", nargs="?", choices=tuple(TARGETS))
    p.add_argument("rest", metavar="FLAGS", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
