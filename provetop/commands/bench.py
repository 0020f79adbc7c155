"""``provetop bench TARGET``: each target's benchmark lives next to the code it measures."""

from __future__ import annotations

import argparse
import importlib

from provetop.base.errors import UsageError
from provetop.commands import Subparsers

# target -> module providing add_arguments(parser) and run(args) -> int
TARGETS: dict[str, str] = {
    "cpu": "provetop.engine.bench.cpu",
    "ntt": "provetop.kernels.bench_ntt",
    "msm": "provetop.kernels.bench_msm",
    "pipeline": "provetop.engine.bench.pipeline",
    "metrics": "provetop.sources.bench_metrics",
    "soak": "provetop.engine.bench.soak",
    "flood": "provetop.engine.bench.flood",
    "tui": "provetop.tui.bench",
}


def add_parser(sub: Subparsers, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text)
    targets = parser.add_subparsers(dest="target", metavar="TARGET", parser_class=type(parser))
    for target, module_name in TARGETS.items():
        tp = targets.add_parser(target, help=f"benchmark: {target}")
        try:
            importlib.import_module(module_name).add_arguments(tp)
        except ModuleNotFoundError as exc:
            # a target whose own dependencies are missing here (``bench tui`` without Textual
            # on a GPU machine, say) must not take the other targets down with it
            tp.set_defaults(_unavailable=f"needs {exc.name}, which is not installed")


def run(args: argparse.Namespace) -> int:
    if not getattr(args, "target", None):
        raise UsageError(f"bench needs a target: {', '.join(TARGETS)}")
    missing = getattr(args, "_unavailable", None)
    if missing:
        raise UsageError(f"bench target '{args.target}' is not available here: {missing}")
    return int(importlib.import_module(TARGETS[args.target]).run(args) or 0)
