"""The flags of ``provetop summary`` (a recording's per-partition table).

Why apart from the command: ``provetop --help`` and ``provetop summary --help`` build this
parser without importing what the command runs (the dashboard, the engine, NumPy), so help
answers at once; :mod:`provetop.cli` imports ``provetop.commands.summary`` only to run it.
"""

from __future__ import annotations

from provetop.commands import Subparsers


def add_parser(sub: Subparsers, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    parser.add_argument("file", metavar="FILE", help="a recording (.pvtrec)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
