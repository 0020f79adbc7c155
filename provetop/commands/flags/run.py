"""The flags of ``provetop run`` (an engine and the dashboard).

Why apart from the command: ``provetop --help`` and ``provetop run --help`` build this
parser without importing what the command runs (the dashboard, the engine, NumPy), so help
answers at once; :mod:`provetop.cli` imports ``provetop.commands.run`` only to run it.
"""

from __future__ import annotations

from provetop.commands import Subparsers
from provetop.commands.flags.watch import add_display_arguments
from provetop.engine.run.flags import add_engine_arguments


def add_parser(sub: Subparsers, name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=help_text)
    add_engine_arguments(p)
    add_display_arguments(p)
    p.add_argument(
        "--save-dir",
        metavar="DIR",
        help="where S saves recordings (default: the recordings directory)",
    )
