"""The flags of ``provetop warmup`` (the CUDA modules made ready).

Why apart from the command: ``provetop --help`` and ``provetop warmup --help`` build this
parser without importing what the command runs (the dashboard, the engine, NumPy), so help
answers at once; :mod:`provetop.cli` imports ``provetop.commands.warmup`` only to run it.
"""

from __future__ import annotations

from provetop.commands import Subparsers


def add_parser(sub: Subparsers, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    parser.add_argument(
        "--backend",
        choices=("cpu", "cuda"),
        default=None,
        help="cuda: fail (exit 2) without a GPU; cpu: nothing to do (default: cuda where a GPU "
        "is visible)",
    )
