"""``provetop import-cuzk LOG [--status-snapshots DIR] -o RECORDING``: a cuzk daemon's log (and
optionally saved ``/status`` bodies) as a provetop recording, so ``replay``, ``summary`` and
``export`` work on a cuzk run. Lines that are not cuzk's are counted and reported, never fatal,
as long as some line is cuzk's: an empty file, a binary one or a text without a single cuzk line
is refused in one line (exit 2), with no recording written, because it was given by mistake.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from provetop.base.errors import UsageError
from provetop.base.files import check_output, check_path, read_regular
from provetop.recordings.errors import RecordingError
from provetop.recordings.writer import RecordingWriter
from provetop.sources.cuzk.convert import MS, Converter
from provetop.sources.cuzk.follow import iter_lines
from provetop.sources.cuzk.parse import TimelineLine, parse_line
from provetop.sources.cuzk.status import MAX_BODY, MAX_DEPTH, bracket_depth

# Saved /status bodies: each at most the poller's limit, all together at most this much (a
# directory of huge files given by mistake must not be read into memory whole).
MAX_SNAPSHOT_BYTES = 64 << 20


def _snapshots(directory: str) -> tuple[list[tuple[float, dict[str, Any]]], list[str]]:
    """Every ``*.json`` of ``directory``: each a regular file (a FIFO or a device is refused
    at once, never waited on) of at most the poller's MAX_BODY, nested at most MAX_DEPTH
    deep (checked before the JSON parser recurses), MAX_SNAPSHOT_BYTES in all."""
    good: list[tuple[float, dict[str, Any]]] = []
    bad: list[str] = []
    total = 0
    for path in sorted(Path(directory).glob("*.json")):
        try:
            raw = read_regular(path, MAX_BODY, "status snapshot")
        except UsageError as exc:
            bad.append(f"{path.name}: {str(exc).removeprefix(f'status snapshot {path}: ')}")
            continue
        total += len(raw)
        if total > MAX_SNAPSHOT_BYTES:
            raise UsageError(
                f"--status-snapshots {directory}: more than {MAX_SNAPSHOT_BYTES} bytes of "
                "*.json in all; is this the directory of saved /status bodies?"
            )
        if bracket_depth(raw) > MAX_DEPTH:
            bad.append(f"{path.name}: JSON nested deeper than {MAX_DEPTH} levels")
            continue
        try:
            snap = json.loads(raw.decode("utf-8"))
        except (RecursionError, UnicodeDecodeError, ValueError) as exc:
            bad.append(f"{path.name}: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        uptime = snap.get("uptime_secs") if isinstance(snap, dict) else None
        if not isinstance(uptime, int | float) or isinstance(uptime, bool):
            bad.append(f"{path.name}: not a cuzk status (no uptime_secs)")
            continue
        good.append((float(uptime), snap))
    good.sort(key=lambda item: item[0])
    return good, bad


def _wall_anchor(log: str) -> int | None:
    """Wall time of cuzk's t = 0 when the log has no tracing timestamps: the file's
    modification time less its last TIMELINE offset (approximate)."""
    if log == "-":
        return None
    last = 0
    for line, _ in iter_lines(log):
        if "TIMELINE," in line:
            rec = parse_line(line)
            if isinstance(rec, TimelineLine):
                last = max(last, rec.offset_ms)
    return os.stat(log).st_mtime_ns - last * 1_000_000


def _check_output(args: argparse.Namespace) -> str:
    """Where to write: ``-o`` itself when it does not exist, else (``--force``) a fresh name
    beside it. Never the input log (a typo must not destroy the only copy of a run), never a
    directory, never an existing file without ``--force``; each refusal is one line."""
    out: str = check_path(args.output, "-o")
    if os.path.isdir(out):
        raise UsageError(f"-o {out} is a directory; give the recording's file name")
    inputs = {} if args.log == "-" else {"log": args.log}
    check_output(out, inputs=inputs, force=args.force)
    if not os.path.lexists(out):
        return out
    return f"{out}.tmp-{os.getpid()}"


SNIFF_BYTES = 8192  # how much of the log is looked at to tell a binary file from a text


def _check_log(log: str) -> None:
    """Refuse a log that cannot be a cuzk log: missing, empty or binary (one line each)."""
    if log == "-":
        return
    check_path(log, "LOG")
    if not os.path.isfile(log):
        raise UsageError(f"no such cuzk log: {log}")
    try:
        with open(log, "rb") as f:
            head = f.read(SNIFF_BYTES)
    except OSError as exc:
        raise UsageError(f"cannot read cuzk log {log}: {exc.strerror or exc}") from None
    if not head:
        raise UsageError(f"{log}: empty file, not a cuzk log")
    if _binary(head):
        raise UsageError(f"{log}: a binary file, not a cuzk log (a cuzk log is text)")


def _binary(head: bytes) -> bool:
    """More than a tenth of the characters undecodable or control characters (a log with a
    stray binary line stays a log: the converter counts that line as unknown)."""
    text = head.decode("utf-8", errors="replace")
    odd = sum(1 for c in text if c == "\ufffd" or (c < " " and c not in "\t\n\r") or c == "\x7f")
    return odd * 10 > len(text)


def run(args: argparse.Namespace) -> int:
    _check_log(args.log)
    if args.status_snapshots and not os.path.isdir(args.status_snapshots):
        raise UsageError(f"--status-snapshots is not a directory: {args.status_snapshots}")
    if args.workers_per_device < 1:
        raise UsageError("--workers-per-device must be at least 1")

    snapshots, bad = _snapshots(args.status_snapshots) if args.status_snapshots else ([], [])
    conv = Converter(
        workers_per_device=args.workers_per_device,
        wall_ns=_wall_anchor(args.log),
        host=args.host,
        config={"log": os.path.basename(args.log), "imported": True},
        status_drives=False,
    )
    if snapshots:
        conv.learn_status(snapshots[0][1])
    target = _check_output(args)
    try:  # a new file (O_EXCL); with --force a fresh name, moved over the old one at the end
        writer = RecordingWriter(target, background_flush=False, exclusive=True)
    except RecordingError as exc:
        raise UsageError(str(exc)) from None
    written = 0
    done = False
    foreign = False  # not one cuzk line nor status: refused, and nothing is left behind
    try:
        written = _convert(conv, writer, args.log, snapshots, bad)
        stats = conv.stats
        recognised = sum(stats[k] for k in ("timeline", "timing", "trace", "panic"))
        foreign = recognised == 0 and not snapshots
        done = not foreign
    finally:
        try:
            writer.close()
        except RecordingError as exc:
            done = False
            raise UsageError(str(exc)) from None
        finally:
            if target != args.output:
                if done:
                    os.replace(target, args.output)
                else:
                    Path(target).unlink(missing_ok=True)
            elif foreign:  # our own new file (O_EXCL): a foreign import is not kept
                Path(target).unlink(missing_ok=True)
    if foreign:
        raise UsageError(
            f"{args.log}: no cuzk line in {stats['lines']} lines (no TIMELINE, CUZK_TIMING or "
            "tracing line); is this a cuzk daemon log?"
        )

    _report(args, conv, written, bad, recognised)
    return 0


def _convert(
    conv: Converter,
    writer: RecordingWriter,
    log: str,
    snapshots: list[tuple[float, dict[str, Any]]],
    bad: list[str],
) -> int:
    """Every event of the log and the status snapshots, in time order, into ``writer``: a
    snapshot goes in once the log's clock has passed its time. Returns the events written."""
    written = 0

    def put(events: Iterable[dict[str, Any]]) -> None:
        nonlocal written
        for event in events:
            writer.write(event)
            written += 1

    for message in bad:
        put(conv.feed_status_error(message))
    pending = list(snapshots)
    for line, complete in iter_lines(log):
        put(conv.feed_line(line, truncated=not complete))
        while pending and pending[0][0] * 1000 * MS <= conv.clock:
            put(conv.feed_status(pending.pop(0)[1]))
    for _, snap in pending:
        put(conv.feed_status(snap))
    put(conv.flush(final=True))
    return written


def _report(
    args: argparse.Namespace, conv: Converter, written: int, bad: list[str], recognised: int
) -> None:
    """What the import made of the log, and what it did not understand, on stderr."""
    stats = conv.stats
    out = sys.stderr
    out.write(
        f"import-cuzk: {stats['lines']} lines ({stats['timeline']} TIMELINE, "
        f"{stats['timing']} CUZK_TIMING, {stats['trace']} tracing), "
        f"{len(conv.jobs)} jobs, {written} events -> {args.output}\n"
    )
    skipped = {k: stats[k] for k in ("unknown", "malformed", "truncated") if stats[k]}
    if skipped or bad:
        details = ", ".join(f"{v} {k}" for k, v in skipped.items())
        if bad:
            details += f"{', ' if details else ''}{len(bad)} unreadable status snapshots"
        out.write(f"import-cuzk: not understood: {details}\n")
        for sample in list(conv.unknown_samples)[-5:]:
            out.write(f"  {sample}\n")
        for message in bad[:5]:
            out.write(f"  {message}\n")
    if stats["timing_unattributed"]:
        out.write(
            f"import-cuzk: {stats['timing_unattributed']} CUZK_TIMING lines had no GPU call "
            "to belong to (log started mid-call?)\n"
        )
    if recognised == 0:  # status snapshots only
        out.write("import-cuzk: warning: no cuzk line found; is this a cuzk daemon log?\n")
