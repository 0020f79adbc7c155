"""``provetop replay FILE``: the dashboard over a recording, with play, pause, speed, seeks and
jumps between faults and markers. The dashboard opens the file with ``provetop.sources.replay``.

Before the terminal is taken over the file goes through the reader ``summary`` uses (every
frame decoded, checked against the schema and folded), so replay refuses exactly what summary
refuses, with the same line: the fast indexed opener reads only the index and would play a
damaged middle or two recordings glued together without a word."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import provetop.recordings
from provetop.base.errors import UsageError
from provetop.recordings.errors import RecordingError
from provetop.recordings.reader import fold_recording
from provetop.tui.app import ProvetopApp

SAMPLES = Path(provetop.recordings.__file__).parent / "samples"


def sample_names() -> list[str]:
    """The recordings shipped in the package (``recordings/samples/`` in a checkout)."""
    return sorted(p.name.removesuffix(".pvtrec") for p in SAMPLES.glob("*.pvtrec"))


def sample_path(name: str) -> str:
    """The file of the sample ``name`` (with or without ``.pvtrec``); UsageError naming the
    samples there are when there is none of that name."""
    name = name.removesuffix(".pvtrec")
    names = sample_names()
    if name not in names:
        raise UsageError(f"no sample named {name!r}; the samples: {', '.join(names) or 'none'}")
    return str(SAMPLES / f"{name}.pvtrec")


def run(args: argparse.Namespace) -> int:
    if args.sample == "list":
        print("\n".join(sample_names()))
        return 0
    if args.sample is not None:
        if args.file is not None:
            raise UsageError("give a FILE or --sample, not both")
        args.file = sample_path(args.sample)
    if args.file is None:
        raise UsageError("replay needs a FILE or --sample (the bundled GPU runs: --sample list)")
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
