"""``provetop replay FILE``: the dashboard over a recording, with play, pause, speed, seeks and
jumps between faults and markers. The dashboard opens the file with ``provetop.sources.replay``.

Before the terminal is taken over the file goes through the reader ``summary`` uses (every
frame decoded, checked against the schema and folded), so replay refuses exactly what summary
refuses, with the same line: the fast indexed opener reads only the index and would play a
damaged middle or two recordings glued together without a word."""

from __future__ import annotations

import argparse
import os

from provetop.base.errors import UsageError
from provetop.commands import Subparsers
from provetop.commands.watch import add_display_arguments
from provetop.recordings.errors import RecordingError
from provetop.recordings.reader import fold_recording
from provetop.tui.app import ProvetopApp


def add_parser(sub: Subparsers, name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("file", metavar="FILE", help="a recording (.pvtrec)")
    p.add_argument(
        "--speed", type=float, default=1.0, help="playback speed, 0.25 to 16 (default 1)"
    )
    p.add_argument("--paused", action="store_true", help="start paused at the beginning")
    add_display_arguments(p)


def run(args: argparse.Namespace) -> int:
    if not os.path.lexists(args.file):
        raise UsageError(f"no such recording: {args.file}")
    if not 0.25 <= args.speed <= 16:
        raise UsageError(f"--speed must be between 0.25 and 16, got {args.speed:g}")
    try:
        fold_recording(args.file)  # summary's verdict (a truncation is shown by the app)
    except RecordingError as exc:
        raise UsageError(str(exc)) from None
    app = ProvetopApp(
        replay_path=args.file, autoplay=not args.paused, speed=args.speed, light=args.light
    )
    code = app.run()
    return int(code or 0)
