"""``provetop export FILE --format perfetto -o OUT.json``: convert a recording."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from provetop.base.errors import UsageError
from provetop.base.files import check_output, check_path
from provetop.recordings.errors import RecordingError
from provetop.recordings.export_perfetto import write_perfetto

FORMATS = ("perfetto",)


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
