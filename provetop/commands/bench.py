"""``provetop bench TARGET``: each target's benchmark lives next to the code it measures.

The command line gave only the target (:mod:`provetop.commands.flags.bench`); its flags are
parsed here, with the parser its module builds, so that no target's imports are paid for
another's or for ``--help``."""

from __future__ import annotations

import argparse
import importlib
from typing import NoReturn

from provetop.base.errors import UsageError
from provetop.commands.flags.bench import BLURBS, TARGETS


class _TargetParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (provetop.cli prints it)
        raise UsageError(message)


def run(args: argparse.Namespace) -> int:
    if not getattr(args, "target", None):
        raise UsageError(f"bench needs a target: {', '.join(TARGETS)}")
    try:
        module = importlib.import_module(TARGETS[args.target])
    except ModuleNotFoundError as exc:
        # a target whose own dependencies are missing here (``bench tui`` without Textual
        # on a GPU machine, say) is refused alone
        raise UsageError(
            f"bench target '{args.target}' is not available here: needs {exc.name}, "
            "which is not installed"
        ) from None
    parser = _TargetParser(prog=f"provetop bench {args.target}", description=BLURBS[args.target])
    module.add_arguments(parser)
    target_args = parser.parse_args(args.rest, namespace=argparse.Namespace(target=args.target))
    return int(module.run(target_args) or 0)
