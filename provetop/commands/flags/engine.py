"""The flags of ``provetop engine`` (the headless engine).

Why apart from the command: ``provetop --help`` and ``provetop engine --help`` build this
parser without importing what the command runs (the dashboard, the engine, NumPy), so help
answers at once; :mod:`provetop.cli` imports ``provetop.commands.engine`` only to run it.
"""

from __future__ import annotations

from provetop.commands import Subparsers
from provetop.engine.run.flags import add_engine_arguments


def add_parser(sub: Subparsers, name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=help_text)
    add_engine_arguments(p)
