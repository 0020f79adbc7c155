"""The flags of ``provetop trace`` (any CUDA program, traced).

Why apart from the command: ``provetop --help`` and ``provetop trace --help`` build this
parser without importing what the command runs (the dashboard, the engine, NumPy), so help
answers at once; :mod:`provetop.cli` imports ``provetop.commands.trace`` only to run it.
"""

from __future__ import annotations

import argparse

from provetop.commands import Subparsers

INTERVAL_MS = 100  # the engine's own sampling period (its --sample-hz 10)


def add_parser(sub: Subparsers, name: str, help_text: str) -> None:
    p = sub.add_parser(
        name,
        help=help_text,
        description="Run COMMAND with provetop's injection library and serve its memory "
        "telemetry like an engine (docs/trace.md).",
        usage="provetop trace [options] -- COMMAND [ARGS...]",
    )
    p.add_argument(
        "program", nargs=argparse.REMAINDER, metavar="COMMAND", help="the program to run, after --"
    )
    p.add_argument(
        "--listen",
        metavar="ADDR",
        default=None,
        help="telemetry socket: unix (default, a fresh private socket that watch and "
        "top find), unix:PATH, or tcp://127.0.0.1:PORT with --token-file",
    )
    p.add_argument("--no-listen", action="store_true", help="serve no telemetry socket")
    p.add_argument("--token-file", metavar="F", help="token for a tcp:// listener")
    p.add_argument(
        "--record",
        metavar="PATH",
        help="recording file (default: a new file in the recordings directory)",
    )
    p.add_argument("--no-record", action="store_true", help="write no recording")
    p.add_argument(
        "--metrics", metavar="ADDR", help="serve Prometheus /metrics on ADDR (e.g. 127.0.0.1:9400)"
    )
    p.add_argument(
        "--heal",
        action="store_true",
        help="trim stream-ordered pools before a plain allocation that only their "
        "unused reserve keeps from fitting, this process's or another traced one's",
    )
    p.add_argument(
        "--interval-ms",
        type=int,
        default=INTERVAL_MS,
        metavar="MS",
        help="pool sampling interval in the program (default %(default)s; 0: none)",
    )
    p.add_argument(
        "--cuzk-log",
        metavar="LOG",
        help="also follow this cuzk log: its partitions on the pools' time axis",
    )
    p.add_argument(
        "--workers-per-device",
        type=int,
        default=2,
        metavar="N",
        help="cuzk's gpu_workers_per_device, with --cuzk-log (default 2)",
    )
    p.add_argument("--read-only", action="store_true", help="refuse control commands (trim)")
    p.add_argument(
        "--library",
        metavar="PATH",
        help="the injection library to use (default: build or find the cached one)",
    )
