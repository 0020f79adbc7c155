"""Reading recording files: tolerant of a cut tail, strict about everything else.

:func:`open_recording` scans a file frame by frame (``docs/recordings.md`` has the layout). A
file that ends early, because the engine was killed or is still writing, reads up to its last
whole frame and says so in :attr:`Recording.truncation`. Anything else that is wrong (another
file type, a damaged frame in the middle, an event that breaks the schema, a footer that does
not match) raises :class:`RecordingError` naming the byte offset. No other exception escapes,
whatever the bytes: the reader is fuzzed with random and mutated files in the tests.

:meth:`Recording.state_at` and :func:`seek_state` rebuild the reducer's state at a time by
starting from the nearest seek snapshot before it and folding forward, which is how replay
jumps around a long recording without reading it all.
"""

from __future__ import annotations

import fcntl
import os
import stat
from array import array
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from provetop.recordings.errors import RecordingError
from provetop.recordings.format import (
    END_MAGIC,
    FORMAT_VERSION,
    HEADER_KIND,
    INDEX_KIND,
    MAGIC,
    PREFIX_SIZE,
    READABLE_VERSIONS,
    TRAILER,
    TRAILER_SIZE,
    checked,
)
from provetop.recordings.framing import (
    HEADER_SIZE,
    MAX_FRAME,
    FrameError,
    checked_payload,
    decode_payload,
)
from provetop.recordings.schema import SchemaError, validate
from provetop.recordings.state import State

__all__ = [
    "Recording",
    "RecordingError",
    "SnapshotRef",
    "Truncation",
    "fold_recording",
    "index_snapshots",
    "open_recording",
    "open_regular",
    "file_checked",
    "read_footer",
    "read_state",
    "seek_state",
]


@dataclass(frozen=True)
class Truncation:
    """Where a recording stops early and what is missing there."""

    offset: int  # byte offset where the unreadable tail starts (= bytes that were read)
    file_size: int
    what: str  # in words: "frame body (120 of 300 bytes)", "index and trailer", ...

    def __str__(self) -> str:
        lost = self.file_size - self.offset
        tail = f", {lost} trailing bytes ignored" if lost else ""
        return f"truncated at byte {self.offset} of {self.file_size}: missing {self.what}{tail}"


@dataclass(frozen=True)
class SnapshotRef:
    """One seek snapshot: its recorded time, its byte offset, and how many events precede it."""

    t: int
    offset: int
    event_index: int


class Recording:
    """A recording read into memory: header, hello, events and the seek points."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size
        self.header: dict[str, Any] | None = None
        self.hello: dict[str, Any] | None = None
        self.events: list[dict[str, Any]] = []
        self.offsets = array("q")  # byte offset of every event, parallel to events
        self.snapshots: list[SnapshotRef] = []
        self.index: dict[str, Any] | None = None
        self.complete = False  # the index and trailer were read: the writer closed cleanly
        self.truncation: Truncation | None = None
        self.event_count = 0  # events read (also when they were folded, not kept)
        self.events_kept = True  # False for fold_recording(): events/offsets stay empty
        self.last_t = 0  # the largest event time
        self.version = FORMAT_VERSION  # the file's format version (1: frames without checksums)

    @property
    def truncated(self) -> bool:
        return self.truncation is not None

    @property
    def duration_ns(self) -> int:
        """The largest event time (ns since the producer's t = 0)."""
        return self.last_t

    def state(self) -> State:
        """The reducer folded over every event, history included."""
        self._need_events()
        return self._fold(State(), 0, None)

    def _need_events(self) -> None:
        if not self.events_kept:
            raise RecordingError(f"{self.path}: read with fold_recording(); use open_recording()")

    def state_at(self, t: int) -> State:
        """The state after the events recorded up to time ``t`` (the prefix of the event
        sequence whose times are <= t), rebuilt from the nearest seek snapshot at or before
        ``t``. Its current state equals a full fold of that prefix; its history (segments,
        memory series) starts at the snapshot."""
        self._need_events()
        times = [s.t for s in self.snapshots]
        i = bisect_right(times, t) - 1
        if i < 0:
            return self._fold(State(), 0, t)
        ref = self.snapshots[i]
        with _open(self.path) as f:
            state = _load_snapshot(f, self.path, ref.offset, self.size, checked(self.version))
        return self._fold(state, ref.event_index, t)

    def _fold(self, state: State, start: int, until: int | None) -> State:
        for i in range(start, len(self.events)):
            event = self.events[i]
            if until is not None and event["t"] > until:
                break
            _apply(state, event, self.path, self.offsets[i])
        return state


def open_recording(path: str | os.PathLike[str]) -> Recording:
    """Read a whole recording; :class:`RecordingError` when it is not a readable recording."""
    p = Path(path)
    with _open(p) as f:
        size = _size(f, p)
        rec = Recording(p, size)
        try:
            _scan(f, rec)
        except OSError as exc:
            raise RecordingError(f"cannot read recording {p}: {exc.strerror or exc}") from None
    return rec


def read_state(path: str | os.PathLike[str]) -> State:
    """The reducer folded over every event of a recording."""
    return fold_recording(path)[1]


def fold_recording(
    path: str | os.PathLike[str], also: Callable[[dict[str, Any]], None] | None = None
) -> tuple[Recording, State]:
    """Read a recording and fold its events as they are read, without keeping them: the
    memory of a summary or an export is the reducer's, not the whole event list. The returned
    :class:`Recording` has everything but ``events``/``offsets`` (empty; ``event_count`` holds
    the count). ``also`` sees each event after the reducer (for a figure the reducer does not
    keep)."""
    p = Path(path)
    state = State()

    def fold(event: dict[str, Any], offset: int) -> None:
        _apply(state, event, p, offset)
        if also is not None:
            also(event)

    with _open(p) as f:
        rec = Recording(p, _size(f, p))
        rec.events_kept = False
        try:
            _scan(f, rec, fold)
        except OSError as exc:
            raise RecordingError(f"cannot read recording {p}: {exc.strerror or exc}") from None
    return rec, state


def seek_state(path: str | os.PathLike[str], t: int) -> State:
    """Like ``open_recording(path).state_at(t)`` but, for a cleanly closed file, reads only the
    index, the nearest snapshot at or before ``t`` and the frames after it up to ``t``."""
    p = Path(path)
    with _open(p) as f:
        size = _size(f, p)
        footer = read_footer(f, p, size)
        if footer is None:
            return open_recording(p).state_at(t)
        index_offset, index = footer
        crc = file_checked(f)
        refs = index_snapshots(index, p, index_offset)
        chosen = [(st, off) for st, off in refs if st <= t]
        if chosen:
            state = _load_snapshot(f, p, chosen[-1][1], index_offset, crc)  # leaves f after it
        else:
            state = State()
            f.seek(PREFIX_SIZE)
            _read_frame(f, p, PREFIX_SIZE, index_offset, crc=crc)  # skip the recording header
        while f.tell() < index_offset:
            offset = f.tell()
            frame = _read_frame(f, p, offset, index_offset, crc=crc)
            if _is_seek_snapshot(frame):
                continue
            event = _validate(frame, p, offset)
            if event["t"] > t:
                break
            _apply(state, event, p, offset)
        return state


# -- scanning -------------------------------------------------------------------------------------


class _Truncated(Exception):
    def __init__(self, offset: int, what: str) -> None:
        self.offset, self.what = offset, what


def _scan(
    f: BinaryIO, rec: Recording, sink: Callable[[dict[str, Any], int], None] | None = None
) -> None:
    """Read every frame into ``rec``; events go to ``sink(event, offset)`` when given (then
    ``rec.events`` stays empty), else into ``rec.events``."""
    path, size = rec.path, rec.size
    if size == 0:  # nothing to read, not even a cut header: a file given by mistake
        raise RecordingError(f"{path}: empty file (0 bytes), not a provetop recording")
    prefix = f.read(PREFIX_SIZE)
    if prefix[: len(MAGIC)] != MAGIC[: len(prefix)]:
        raise RecordingError(f"{path}: not a provetop recording (bad magic bytes at byte 0)")
    if len(prefix) < PREFIX_SIZE:
        rec.truncation = Truncation(0, size, "the file header")
        return
    if prefix[-1] not in READABLE_VERSIONS:
        raise RecordingError(
            f"{path}: recording format version {prefix[-1]} is not supported "
            f"(this reader knows versions {', '.join(map(str, READABLE_VERSIONS))})"
        )
    rec.version = prefix[-1]
    footer = read_footer(f, path, size)
    limit = footer[0] if footer else size
    # where the file's trailing zero bytes begin (size: none): a frame reaching into them was
    # never written whole, however it fails (cut header, bad msgpack, schema, wrong kind)
    zeros = size if footer else _zero_tail_start(f, size)
    f.seek(PREFIX_SIZE)
    try:
        while True:
            offset = f.tell()
            if offset == limit:
                break
            try:
                _scan_frame(f, rec, offset, limit, footer is None, sink)
            except RecordingError:
                if zeros < size and zeros < max(offset + 1, _frame_end(f, offset, size)):
                    raise _Truncated(offset, "frames (the tail is zero-filled)") from None
                raise
            if rec.index is not None:
                break
    except _Truncated as cut:
        rec.truncation = Truncation(cut.offset, size, cut.what)
        return
    if footer is not None:
        rec.index = footer[1]
        rec.complete = True
        scanned = [(s.t, s.offset) for s in rec.snapshots]
        counted = footer[1].get("events")
        if index_snapshots(footer[1], path, footer[0]) != scanned or (
            counted is not None and counted != rec.event_count
        ):
            raise RecordingError(
                f"{path}: the index at byte {footer[0]} does not match the frames in the file"
            )
    elif rec.index is None:
        rec.truncation = Truncation(size, size, "the index and trailer (the writer did not close)")


def _scan_frame(
    f: BinaryIO,
    rec: Recording,
    offset: int,
    limit: int,
    tolerant: bool,
    sink: Callable[[dict[str, Any], int], None] | None,
) -> None:
    """Read and file the frame at ``offset`` (see :func:`_scan`)."""
    path, size = rec.path, rec.size
    frame = _read_frame(f, path, offset, limit, tolerant=tolerant, crc=checked(rec.version))
    kind = frame.get("k")
    if rec.header is None:
        rec.header = _check_header(frame, path, offset, rec.version)
    elif kind == INDEX_KIND and tolerant:
        _check_trailer_tail(f, path, offset, size)
        rec.index = frame
    elif _is_seek_snapshot(frame):
        if type(frame.get("t")) is not int or not isinstance(frame.get("state"), dict):
            raise RecordingError(f"{path}: malformed seek snapshot at byte {offset}")
        rec.snapshots.append(SnapshotRef(frame["t"], offset, rec.event_count))
    else:
        event = _validate(frame, path, offset)
        if rec.hello is None:
            if event["k"] != "hello":
                raise RecordingError(
                    f"{path}: expected the hello event at byte {offset}, found {event['k']!r}"
                )
            rec.hello = event
        if sink is None:
            rec.events.append(event)
            rec.offsets.append(offset)
        else:
            sink(event, offset)
        rec.event_count += 1
        rec.last_t = max(rec.last_t, event["t"])


def _frame_end(f: BinaryIO, offset: int, size: int) -> int:
    """Where the frame at ``offset`` claims to end (its header as it is on disk)."""
    f.seek(offset)
    head = f.read(HEADER_SIZE)
    if len(head) < HEADER_SIZE:
        return size
    return offset + HEADER_SIZE + int.from_bytes(head, "big")


def _zero_tail_start(f: BinaryIO, size: int) -> int:
    """The offset where the file's trailing run of zero bytes begins (``size`` when the last
    byte is not zero). Reads backwards, so a normal file costs one small read."""
    end = size
    while end > 0:
        start = max(0, end - (1 << 16))
        f.seek(start)
        chunk = f.read(end - start)
        stripped = chunk.rstrip(b"\0")
        if stripped:
            return start + len(stripped)
        end = start
    return 0


def _check_header(frame: dict[str, Any], path: Path, offset: int, version: int) -> dict[str, Any]:
    if frame.get("k") != HEADER_KIND or frame.get("format") != version:
        raise RecordingError(f"{path}: bad recording header frame at byte {offset}")
    return frame


def _is_seek_snapshot(frame: dict[str, Any]) -> bool:
    return frame.get("k") == "snapshot" and frame.get("seek") is True


def _validate(frame: dict[str, Any], path: Path, offset: int) -> dict[str, Any]:
    try:
        return validate(frame)
    except SchemaError as exc:
        raise RecordingError(f"{path}: invalid event at byte {offset}: {exc}") from None


def _apply(state: State, event: dict[str, Any], path: Path, offset: int) -> None:
    try:
        state.apply(event)
    except Exception as exc:  # the reducer trusts validated events; odd values still land here
        raise RecordingError(
            f"{path}: event at byte {offset} cannot be folded into the state: "
            f"{type(exc).__name__}: {exc}"
        ) from None


def _read_frame(
    f: BinaryIO, path: Path, offset: int, limit: int, *, tolerant: bool = False, crc: bool
) -> dict[str, Any]:
    """Read the frame at ``offset`` (the file position). ``limit`` is where frames must end.
    With ``tolerant`` (no footer: the file may have been cut) an incomplete frame at the end
    raises _Truncated instead of RecordingError. With ``crc`` (format version 2) the frame's
    last 4 bytes must be the CRC-32 of the rest: a mismatch is corruption, never data."""
    head = f.read(HEADER_SIZE)
    if offset + HEADER_SIZE > limit or len(head) < HEADER_SIZE:
        if tolerant:
            raise _Truncated(offset, f"a frame header ({limit - offset} of 4 bytes)")
        raise RecordingError(f"{path}: frame header at byte {offset} runs past byte {limit}")
    length = int.from_bytes(head, "big")
    if length > MAX_FRAME:
        if tolerant and _zero_tail(f, offset):
            raise _Truncated(offset, "frames (the tail is zero-filled)")
        raise RecordingError(
            f"{path}: corrupt frame at byte {offset}: length {length} exceeds {MAX_FRAME}"
        )
    end = offset + HEADER_SIZE + length
    if end > limit:
        if tolerant:
            raise _Truncated(offset, f"a frame body ({limit - offset - 4} of {length} bytes)")
        raise RecordingError(f"{path}: frame at byte {offset} runs past byte {limit}")
    payload = f.read(length)
    if len(payload) < length:
        if tolerant:
            raise _Truncated(offset, "a frame body (the file shrank while being read)")
        raise RecordingError(f"{path}: frame at byte {offset} is cut short")
    try:
        return decode_payload(checked_payload(head, payload) if crc else payload)
    except FrameError as exc:
        if tolerant and _zero_tail(f, offset):
            raise _Truncated(offset, "frames (the tail is zero-filled)") from None
        raise RecordingError(f"{path}: corrupt frame at byte {offset}: {exc}") from None


def _zero_tail(f: BinaryIO, offset: int) -> bool:
    """True when everything from ``offset`` to the end is zero bytes: what a crash leaves when
    the file system extended the file but the data never reached it."""
    f.seek(offset)
    while chunk := f.read(1 << 16):
        if chunk.count(0) != len(chunk):
            return False
    return True


def read_footer(f: BinaryIO, path: Path, size: int) -> tuple[int, dict[str, Any]] | None:
    """(index offset, index frame) when the file ends with a valid trailer, else None. A
    trailer that points to something other than an index frame ending right before it is
    corruption."""
    if size < PREFIX_SIZE + TRAILER_SIZE:
        return None
    f.seek(size - TRAILER_SIZE)
    index_offset, end_magic = TRAILER.unpack(f.read(TRAILER_SIZE))
    if end_magic != END_MAGIC:
        return None
    where = size - TRAILER_SIZE
    if not PREFIX_SIZE <= index_offset <= where - HEADER_SIZE:
        raise RecordingError(f"{path}: the trailer at byte {where} points outside the file")
    crc = file_checked(f)
    f.seek(index_offset)
    index = _read_frame(f, path, index_offset, where, crc=crc)
    if index.get("k") != INDEX_KIND or f.tell() != where:
        raise RecordingError(f"{path}: the trailer at byte {where} does not point to the index")
    return index_offset, index


def file_checked(f: BinaryIO) -> bool:
    """Whether the open recording's frames carry checksums (its version byte says)."""
    f.seek(PREFIX_SIZE - 1)
    version = f.read(1)
    return bool(version) and checked(version[0])


def _check_trailer_tail(f: BinaryIO, path: Path, index_offset: int, size: int) -> None:
    """After an index frame found by scanning (no valid trailer at the end of the file): the
    rest must be the start of a trailer cut short, else the file is damaged."""
    start = f.tell()
    rest = f.read(TRAILER_SIZE + 1)
    expected = TRAILER.pack(index_offset, END_MAGIC)
    if len(rest) < TRAILER_SIZE and expected.startswith(rest):
        raise _Truncated(start, f"the trailer ({len(rest)} of 16 bytes)")
    # a cut inside the trailer followed by zeros (the offset's high bytes are zeros too)
    whole = rest.rstrip(b"\0")
    zero_filled = expected.startswith(whole) and _zero_tail(f, start + len(whole))
    if len(whole) < TRAILER_SIZE and zero_filled:
        raise _Truncated(start, "the trailer (the tail is zero-filled)")
    raise RecordingError(f"{path}: damaged trailer after the index at byte {index_offset}")


def index_snapshots(index: dict[str, Any], path: Path, offset: int) -> list[tuple[int, int]]:
    """The (time, byte offset) of every seek snapshot an index frame lists;
    :class:`RecordingError` when the list is malformed."""
    refs = index.get("snapshots")
    if not isinstance(refs, list) or not all(
        isinstance(r, list)
        and len(r) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in r)
        for r in refs
    ):
        raise RecordingError(f"{path}: malformed index at byte {offset}")
    return [(r[0], r[1]) for r in refs]


def _load_snapshot(f: BinaryIO, path: Path, offset: int, limit: int, crc: bool) -> State:
    if not PREFIX_SIZE <= offset < limit:
        raise RecordingError(f"{path}: snapshot offset {offset} is outside the frames")
    f.seek(offset)
    frame = _read_frame(f, path, offset, limit, crc=crc)
    if not _is_seek_snapshot(frame) or not isinstance(frame.get("state"), dict):
        raise RecordingError(f"{path}: no seek snapshot at byte {offset}")
    try:
        return State.from_snapshot(frame["state"])
    except Exception as exc:  # a snapshot is data from disk; any shape error is corruption
        raise RecordingError(
            f"{path}: unusable snapshot at byte {offset}: {type(exc).__name__}: {exc}"
        ) from None


class _open:
    """``open(path, 'rb')`` whose failures are a one-line :class:`RecordingError`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> BinaryIO:
        self.f = open_regular(self.path)
        return self.f

    def __exit__(self, *exc: object) -> None:
        self.f.close()


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``open(path, 'rb')`` for a regular file only, refused at once otherwise.

    A FIFO would block the open (and every read) until some writer came, and a device could
    stream for ever: both are refused from the file's type, checked on the opened descriptor
    (opened without blocking), so a path swapped after a check cannot slip through."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise RecordingError(f"cannot read recording {p}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise RecordingError(f"{p}: is a directory, not a recording")
        if not stat.S_ISREG(mode):
            raise RecordingError(f"{p}: is {_file_kind(mode)}, not a recording file")
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _size(f: BinaryIO, path: Path) -> int:
    try:
        return os.fstat(f.fileno()).st_size
    except OSError as exc:
        raise RecordingError(f"cannot read recording {path}: {exc.strerror}") from None
