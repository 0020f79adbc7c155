"""``provetop summary FILE [--json]``: the per-partition summary of a recording."""

from __future__ import annotations

import argparse
import json
import sys

from provetop.base.errors import UsageError
from provetop.recordings.errors import RecordingError
from provetop.recordings.summary import build_summary, format_summary


def run(args: argparse.Namespace) -> int:
    try:
        summary = build_summary(args.file)
    except RecordingError as exc:
        raise UsageError(str(exc)) from None
    text = json.dumps(summary, indent=2, allow_nan=False) + "\n" if args.json else None
    try:
        sys.stdout.write(text if text is not None else format_summary(summary))
        sys.stdout.flush()
    except BrokenPipeError:  # `provetop summary X | head`
        sys.stderr.close()
    return 0
