"""The ``provetop`` command line: one entry point, one module per subcommand.

Each subcommand lives in ``provetop/commands/<name>.py`` and provides ``add_parser(subparsers)``
and ``run(args) -> int``. A command's module imports what it needs at its top (the dashboard's
commands import Textual), so :func:`main` imports only the module of the command it runs; the
others get a parser that only names them. That lazy loading is what keeps ``provetop engine``
from loading Textual and ``provetop replay`` from loading CuPy: this module imports no command
at its top, and must not.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType
from typing import NoReturn

from provetop.base.errors import UsageError
from provetop.base.version import __version__

# name -> one-line help; the module provetop.commands.<name> implements it.
COMMANDS: dict[str, str] = {
    "run": "run the engine and watch it in the dashboard",
    "engine": "run the proving engine (headless), serving telemetry on a socket",
    "watch": "attach the dashboard to one or more running engines",
    "top": "the local GPUs from NVML, like nvitop; attaches engines as they start",
    "replay": "replay a recording in the dashboard",
    "summary": "print the per-partition summary of a recording",
    "export": "convert a recording (for example to a Perfetto trace)",
    "selftest": "check every kernel of a backend against the exact reference",
    "warmup": "compile or load every CUDA module on this machine, once, with a line per module",
    "bench": "benchmarks: cpu, ntt, msm, pipeline, tui",
    "import-cuzk": "turn a cuzk prover's log into a provetop recording",
    "trace": "run any CUDA program and see both of its pools, live, like an engine's",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one clear line, exit 2, no usage dump
        sys.stderr.write(f"provetop: error: {message}\n")
        raise SystemExit(2)


def build_parser(load: bool | str = True) -> argparse.ArgumentParser:
    """The whole command line. ``load``: True builds every command's own parser (importing
    every command module), a command name builds only that command's, False none; a command
    not built gets a parser that only names it."""
    parser = _Parser(prog="provetop", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"provetop {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, help_text in COMMANDS.items():
        module = _load(name) if load is True or load == name else None
        if module is None:
            sub.add_parser(name, help=help_text)
        else:
            module.add_parser(sub, name, help_text)
    return parser


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"provetop.commands.{name.replace('-', '_')}")
    except ModuleNotFoundError as exc:
        if exc.name == f"provetop.commands.{name.replace('-', '_')}":
            return None  # command not built yet
        raise


def _command_in(argv: list[str]) -> str | bool:
    """The command ``argv`` runs (its first word that is not an option), or False."""
    first = next((word for word in argv if not word.startswith("-")), None)
    return first if first in COMMANDS else False


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(load=_command_in(argv))
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    module = _load(args.command)
    if module is None:
        sys.stderr.write(f"provetop: error: '{args.command}' is not available in this build\n")
        return 2
    try:
        return int(module.run(args) or 0)
    except UsageError as exc:
        sys.stderr.write(f"provetop: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
