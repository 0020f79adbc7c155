"""The flags of ``provetop replay`` (a recording in the dashboard).

Why apart from the command: ``provetop --help`` and ``provetop replay --help`` build this
parser without importing what the command runs (the dashboard, the engine, NumPy), so help
answers at once; :mod:`provetop.cli` imports ``provetop.commands.replay`` only to run it.
"""

from __future__ import annotations

from provetop.commands import Subparsers
from provetop.commands.flags.watch import add_display_arguments

# The sample the README's quick start replays: the naive allocator on an H200 capped at 16 GiB.
DEFAULT_SAMPLE = "h200-porep32g-naive16"


def add_parser(sub: Subparsers, name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("file", metavar="FILE", nargs="?", help="a recording (.pvtrec)")
    p.add_argument(
        "--sample",
        metavar="NAME",
        nargs="?",
        const=DEFAULT_SAMPLE,
        help="play a GPU run shipped with provetop instead of FILE (default "
        f"{DEFAULT_SAMPLE}; 'list' names them)",
    )
    p.add_argument(
        "--speed", type=float, default=1.0, help="playback speed, 0.25 to 16 (default 1)"
    )
    p.add_argument("--paused", action="store_true", help="start paused at the beginning")
    add_display_arguments(p)
