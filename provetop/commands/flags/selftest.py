"""The flags of ``provetop selftest`` (every kernel against the reference).

Why apart from the command: ``provetop --help`` and ``provetop selftest --help`` build this
parser without importing what the command runs (the dashboard, the engine, NumPy), so help
answers at once; :mod:`provetop.cli` imports ``provetop.commands.selftest`` only to run it.
"""

from __future__ import annotations

from provetop.commands import Subparsers


def add_parser(sub: Subparsers, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    parser.add_argument(
        "--backend",
        choices=("cpu", "cuda"),
        default="cpu",
        help="kernel backend to check (default: cpu)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
