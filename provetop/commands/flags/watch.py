"""The flags of ``provetop watch`` (the dashboard on running engines), and the cuzk and
display flags that watch, top, replay and run share.

Why apart from the command: ``provetop --help`` and ``provetop watch --help`` build this
parser without importing what the command runs (the dashboard, the engine, NumPy), so help
answers at once; :mod:`provetop.cli` imports ``provetop.commands.watch`` only to run it.
"""

from __future__ import annotations

import argparse

from provetop.commands import Subparsers


def add_parser(sub: Subparsers, name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument(
        "addresses",
        nargs="*",
        metavar="ADDRESS",
        help="unix:PATH, a socket path, or tcp://127.0.0.1:PORT (default: the local engine)",
    )
    p.add_argument("--token-file", metavar="F", help="token for tcp:// engines")
    add_cuzk_arguments(p)
    p.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="with --cuzk-log/--cuzk-status: serve the cuzk prover's Prometheus metrics on "
        "http://HOST:PORT/metrics (':9400' or '9400' is 127.0.0.1; another host only when named)",
    )
    p.add_argument(
        "--no-ui",
        action="store_true",
        help="with --metrics: follow the cuzk sources and serve the metrics without the "
        "dashboard (for hosts scraped by Prometheus; status lines go to stderr)",
    )
    p.add_argument(
        "--save-dir",
        metavar="DIR",
        help="where S saves recordings (default: the recordings directory)",
    )
    add_display_arguments(p)


def add_cuzk_arguments(p: argparse.ArgumentParser) -> None:
    """The cuzk prover's sources, shared by watch and top."""
    p.add_argument(
        "--cuzk-log",
        metavar="FILE",
        help="follow a cuzk prover's log (like tail -F; '-' reads standard input); read-only",
    )
    p.add_argument(
        "--cuzk-status",
        metavar="URL",
        help="poll a cuzk prover's GET /status endpoint (with or without --cuzk-log)",
    )
    p.add_argument(
        "--cuzk-interval",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds between /status polls (default 1)",
    )


def add_display_arguments(p: argparse.ArgumentParser) -> None:
    """Display flags shared by watch, replay and run."""
    p.add_argument("--light", action="store_true", help="start with the light theme")
