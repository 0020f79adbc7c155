"""One module per ``provetop`` subcommand.

Each provides ``add_parser(subparsers, name, help)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
from typing import TypeAlias

# What ``add_parser`` receives: argparse's subparsers action (a string: argparse's class is
# generic only in its stubs, not at run time).
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
