"""``provetop export FILE --format perfetto -o OUT.json``: convert a recording."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from provetop.base.errors import UsageError
from provetop.recordings.errors import RecordingError
from provetop.recordings.export_perfetto import write_perfetto

FORMATS = ("perfetto",)


def run(args: argparse.Namespace) -> int:
    if args.format not in FORMATS:
        raise UsageError(f"unknown export format {args.format!r} (known: {', '.join(FORMATS)})")
    out = Path(args.output) if args.output else Path(args.file).with_suffix(".perfetto.json")
    if out.is_dir():
        raise UsageError(f"cannot write {out}: is a directory")
    if not out.parent.is_dir():
        raise UsageError(f"cannot write {out}: directory {out.parent} does not exist")
    try:
        count = write_perfetto(args.file, out)
    except RecordingError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    sys.stderr.write(f"wrote {count} trace events to {out} (open it in ui.perfetto.dev)\n")
    return 0
