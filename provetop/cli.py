"""provetop: a GPU Groth16 prover (BLS12-381) and a dashboard for GPU provers.

How the command line is built (for whoever changes it): each subcommand has its flags in
``provetop/commands/flags/<name>.py`` (``add_parser(subparsers, name, help)``, importing only
argparse and light modules) and its work in ``provetop/commands/<name>.py`` (``run(args) ->
int``). The whole parser is built from the flag modules alone, so ``--help`` of any command
answers without importing Textual, NumPy, the engine or CuPy; :func:`main` imports the one
command module it runs. Both are loaded by name (``importlib``): the command line and the
commands are independent layers (docs/architecture.md), and this module imports no command.
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
    "run": "start a proving engine and watch it in the dashboard",
    "engine": "run a proving engine without the dashboard",
    "watch": "open the dashboard on running engines or a cuzk prover",
    "top": "this machine's GPUs, like nvitop, and engines as they start",
    "replay": "play a recording in the dashboard (--sample: a bundled run)",
    "summary": "print a recording's per-partition table and totals",
    "export": "convert a recording, for example to a Perfetto trace",
    "selftest": "check every kernel of a backend against the exact reference",
    "warmup": "make every CUDA module ready, once, after installing",
    "bench": "benchmarks: cpu, ntt, msm, pipeline, metrics, soak, tui",
    "import-cuzk": "turn a cuzk prover's log into a provetop recording",
    "trace": "run any CUDA program and watch both of its memory pools",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one clear line, exit 2, no usage dump
        sys.stderr.write(f"provetop: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, from the flag modules only (nothing a command runs is
    imported)."""
    parser = _Parser(
        prog="provetop",
        description=__doc__.splitlines()[0],
        epilog="'provetop COMMAND --help' describes a command's flags. Start with "
        "'provetop run --preset demo'.",
    )
    parser.add_argument("--version", action="version", version=f"provetop {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, help_text in COMMANDS.items():
        _module("flags." + name).add_parser(sub, name, help_text)
    return parser


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"provetop.commands.{name.replace('-', '_')}")


def _warn_unknown_variables() -> None:
    """A misspelled or removed ``PROVETOP_*`` setting, said once (it used to be ignored
    without a word: the run went on with the defaults). Loaded by name after the parse, as
    the commands are: ``--help`` imports nothing of the engine."""
    environment = importlib.import_module("provetop.engine.settings.environment")
    for line in environment.unknown_variables():
        sys.stderr.write(f"provetop: warning: {line}\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    _warn_unknown_variables()
    try:
        return int(_module(args.command).run(args) or 0)
    except UsageError as exc:
        sys.stderr.write(f"provetop: error: {exc}\n")
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
