"""``provetop export FILE --format perfetto -o OUT.json``: convert a recording."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from provetop.base.errors import UsageError
from provetop.base.files import check_output, check_path
from provetop.commands import Subparsers
from provetop.recordings.errors import RecordingError
from provetop.recordings.export_perfetto import write_perfetto

FORMATS = ("perfetto",)


def add_parser(sub: Subparsers, name: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    parser.add_argument("file", metavar="FILE", help="a recording (.pvtrec)")
    parser.add_argument(
        "--format",
        default="perfetto",
        help="perfetto: Chrome trace JSON that opens in ui.perfetto.dev (default)",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="output file (default: FILE with the suffix .perfetto.json); never the input, "
        "and an existing file only with --force",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace an existing OUT (never the input FILE)"
    )


def run(args: argparse.Namespace) -> int:
    if args.format not in FORMATS:
        raise UsageError(f"unknown export format {args.format!r} (known: {', '.join(FORMATS)})")
    source = check_path(args.file, "FILE")
    if args.output is not None:
        out = Path(check_path(args.output, "-o"))
    else:
        out = Path(source).with_suffix(".perfetto.json")
    # never the recording itself (a link or a hard link to it included), never an existing
    # file without --force: one command must not destroy a run
    check_output(out, inputs={"recording": source}, force=args.force)
    try:
        count = write_perfetto(args.file, out)
    except RecordingError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    sys.stderr.write(f"wrote {count} trace events to {out} (open it in ui.perfetto.dev)\n")
    return 0
