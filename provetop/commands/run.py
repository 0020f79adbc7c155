"""``provetop run``: start the engine in this process and watch it in the dashboard.

Takes exactly the flags of ``provetop engine`` (shared from its module). The engine serves its
socket as usual, so other dashboards can attach too; quitting the dashboard stops the engine
(partitions in flight finish) and closes its recording cleanly.
"""

from __future__ import annotations

import argparse


def add_parser(sub, name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=help_text)
    from provetop.commands.engine import add_engine_arguments
    from provetop.commands.watch import add_display_arguments

    add_engine_arguments(p)
    add_display_arguments(p)
    p.add_argument("--save-dir", default=".", metavar="DIR", help="where S saves recordings")


def run(args: argparse.Namespace) -> int:
    from engine.runner import EngineError
    from provetop.cli import UsageError
    from provetop.commands.engine import build_engine
    from provetop.commands.watch import read_token
    from tui.sources import LiveSource

    lines: list[str] = []
    engine = build_engine(args, log=lines.append)
    try:
        engine.start()
    except EngineError as exc:
        raise UsageError(str(exc)) from None
    try:
        if not engine.address:
            raise UsageError("provetop run needs the engine's socket (do not disable --listen)")
        token = read_token(args.token_file) if args.token_file else None
        from tui.app import ProvetopApp

        source = LiveSource(engine.address, token=token)
        app = ProvetopApp([source], save_dir=args.save_dir, light=args.light)
        code = app.run()
    finally:
        engine.stop("dashboard closed")
        engine.close()
    if engine.record_path:
        print(f"recording: {engine.record_path}")
    if engine.error:
        print(f"provetop: engine failed: {engine.error}")
        return 1
    return int(code or 0)
