"""The flags of ``provetop export`` (a recording converted).

Why apart from the command: ``provetop --help`` and ``provetop export --help`` build this
parser without importing what the command runs (the dashboard, the engine, NumPy), so help
answers at once; :mod:`provetop.cli` imports ``provetop.commands.export`` only to run it.
"""

from __future__ import annotations

from provetop.commands import Subparsers


def add_parser(sub: Subparsers, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    parser.add_argument("file", metavar="FILE", help="a recording (.pvtrec)")
    parser.add_argument(
        "--format",
        default="perfetto",
        help="perfetto: Chrome trace JSON that opens in ui.perfetto.dev (default)",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="output file (default: FILE with the suffix .perfetto.json); never the input, "
        "and an existing file only with --force",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace an existing OUT (never the input FILE)"
    )
