"""The flags of ``provetop top`` (the local GPUs).

Why apart from the command: ``provetop --help`` and ``provetop top --help`` build this
parser without importing what the command runs (the dashboard, the engine, NumPy), so help
answers at once; :mod:`provetop.cli` imports ``provetop.commands.top`` only to run it.
"""

from __future__ import annotations

from provetop.commands import Subparsers
from provetop.commands.flags.watch import add_cuzk_arguments, add_display_arguments


def add_parser(sub: Subparsers, name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds between NVML samples of the local GPUs (default 1)",
    )
    p.add_argument(  # nvitop's -1 too would make argparse read every "-1" value as an option
        "--once",
        action="store_true",
        help="print the GPUs, their processes and the pools of every engine and traced "
        "process once, then exit (no dashboard)",
    )
    p.add_argument("--json", action="store_true", help="the same as --once, as JSON")
    p.add_argument(
        "--only",
        metavar="INDEX",
        help="show only these GPUs (NVML indices, e.g. 0,2)",
    )
    p.add_argument("--pid", metavar="PID", help="list only these processes (e.g. 4242,4243)")
    add_cuzk_arguments(p)
    p.add_argument(
        "--save-dir",
        metavar="DIR",
        help="where S saves recordings of an attached engine (default: the recordings directory)",
    )
    add_display_arguments(p)
