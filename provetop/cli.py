"""The ``provetop`` command line: one entry point, one module per subcommand.

Each subcommand lives in ``provetop/commands/<name>.py`` and provides ``add_parser(subparsers)``
and ``run(args) -> int``. Modules are imported only when their command runs, so ``provetop
engine`` never loads Textual and ``provetop replay`` never loads CuPy.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from provetop.errors import UsageError
from provetop.version import __version__

# name -> one-line help; the module provetop.commands.<name> implements it.
COMMANDS: dict[str, str] = {
    "run": "run the engine and watch it in the dashboard",
    "engine": "run the proving engine (headless), serving telemetry on a socket",
    "watch": "attach the dashboard to one or more running engines",
    "replay": "replay a recording in the dashboard",
    "summary": "print the per-partition summary of a recording",
    "export": "convert a recording (for example to a Perfetto trace)",
    "selftest": "check every kernel of a backend against the exact reference",
    "warmup": "compile or load every CUDA module on this machine, once, with a line per module",
    "bench": "benchmarks: cpu, ntt, msm, pipeline, tui",
    "import-cuzk": "turn a cuzk prover's log into a provetop recording",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one clear line, exit 2, no usage dump
        sys.stderr.write(f"provetop: error: {message}\n")
        raise SystemExit(2)


def build_parser(load: bool = True) -> argparse.ArgumentParser:
    parser = _Parser(prog="provetop", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"provetop {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, help_text in COMMANDS.items():
        module = _load(name) if load else None
        if module is None:
            sub.add_parser(name, help=help_text)
        else:
            module.add_parser(sub, name, help_text)
    return parser


def _load(name: str):
    try:
        return importlib.import_module(f"provetop.commands.{name.replace('-', '_')}")
    except ModuleNotFoundError as exc:
        if exc.name == f"provetop.commands.{name.replace('-', '_')}":
            return None  # command not built yet
        raise


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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
