"""Read a growing log like ``tail -F``: complete lines only, through rotation and truncation.

A cuzk daemon's stderr usually lands in a file that logrotate renames (or copies and truncates)
while the dashboard reads it. :class:`FileFollower` is polled: each :meth:`FileFollower.poll`
returns the complete lines appended since the last call. It

- keeps a partial last line until its newline arrives (a line is never split in two);
- notices rotation (the path now names another file): it drains the old file to its end first,
  then reads the new one from its start;
- notices truncation (the file got shorter than what was read): it restarts at the start;
- waits for a missing file (not there yet, or between rotation steps) instead of failing.

A partial line left when a file is abandoned (rotation, truncation, :meth:`close`), and the
first :data:`MAX_LINE` bytes of a longer line, are handed out by :meth:`take_partial` so the
caller can count them as truncated. Reading is linear in the bytes read (each byte is looked
at once for a newline), and one poll reads at most :data:`POLL_BYTES`. ``"-"`` reads standard
input through :class:`StreamFollower`, on a thread because a pipe cannot be polled portably.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Iterator
from typing import BinaryIO, Protocol

from provetop.sources.protocol import THREAD_PREFIX

CHUNK = 1 << 16
# A line longer than this is cut: its first MAX_LINE bytes are handed out as a partial (cut)
# line and the rest is skipped up to the next newline. Without a cap a 100 MB line with no
# newline was held (and re-split, quadratically) in memory.
MAX_LINE = 1 << 20
# One poll reads at most this much, so a caller's loop (and its quit key) gets control back
# within milliseconds whatever arrives; the rest is read by the next polls.
POLL_BYTES = 8 << 20


class Follower(Protocol):
    """What the cuzk source reads a log through: a followed file or standard input."""

    rotations: int  # the path named another file (log rotation)
    truncations: int  # the file got shorter than what was read
    eof: bool  # the input ended for good: standard input closed (a file may always grow)

    def poll(self) -> list[str]: ...

    def take_partial(self) -> list[str]: ...

    def close(self) -> list[str]: ...


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip("\r")


class FileFollower:
    """Poll-driven follower of one path (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str], *, from_start: bool = True) -> None:
        self.path = os.fspath(path)
        self.from_start = from_start
        self.rotations = 0
        self.truncations = 0
        self.eof = False  # a followed file never ends: it may grow, or come back
        self.partials: list[str] = []
        self._file: BinaryIO | None = None
        self._ident: tuple[int, int] | None = None
        self._pos = 0
        self._buf = bytearray()
        self._skipping = False  # inside a line longer than MAX_LINE, already handed out
        self.long_lines = 0
        self._first_open = True

    def poll(self) -> list[str]:
        """Complete lines appended since the last call (maybe none)."""
        lines: list[str] = []
        if self._file is None and not self._open():
            return lines
        assert self._file is not None
        try:
            st = os.fstat(self._file.fileno())
        except OSError:
            self._abandon()
            return lines
        if st.st_size < self._pos:  # truncated in place (copytruncate)
            self.truncations += 1
            self._keep_partial()
            self._file.seek(0)
            self._pos = 0
        lines += self._read_available()
        try:
            now = os.stat(self.path)
            rotated = (now.st_dev, now.st_ino) != self._ident
        except OSError:
            rotated = True  # renamed away and not yet recreated
        if rotated:
            lines += self._read_available()  # drain what the old file still had
            self._abandon()
            if os.path.exists(self.path):
                self.rotations += 1
                if self._open(rotated=True):
                    lines += self._read_available()
            else:
                self._pending_rotation = True
        return lines

    def take_partial(self) -> list[str]:
        """Partial lines left behind by abandoned files (each was cut short)."""
        out, self.partials = self.partials, []
        return out

    def close(self) -> list[str]:
        """Stop following; returns the partial last line, if any, as cut short."""
        self._keep_partial()
        if self._file is not None:
            self._file.close()
            self._file = None
        return self.take_partial()

    # -- internals ------------------------------------------------------------------------------

    _pending_rotation = False

    def _open(self, rotated: bool = False) -> bool:
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - kept open while following
        except OSError:
            return False
        st = os.fstat(f.fileno())
        if self._pending_rotation and not rotated:
            self.rotations += 1
            rotated = True
        self._pending_rotation = False
        self._file = f
        self._ident = (st.st_dev, st.st_ino)
        if self._first_open and not self.from_start and not rotated:
            f.seek(0, os.SEEK_END)
            self._pos = f.tell()
        else:
            self._pos = 0
        self._first_open = False
        self._buf = bytearray()
        self._skipping = False
        return True

    def _read_available(self) -> list[str]:
        if self._file is None:
            return []
        out: list[str] = []
        budget = POLL_BYTES
        while budget > 0:
            chunk = self._file.read(min(CHUNK, budget))
            if not chunk:
                break
            budget -= len(chunk)
            self._pos += len(chunk)
            out += self._split(chunk)
        return out

    def _split(self, chunk: bytes) -> list[str]:
        """Complete lines ending in ``chunk``; the rest waits in the buffer (capped)."""
        out: list[str] = []
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                self._append(chunk, start, len(chunk))
                return out
            self._append(chunk, start, nl)
            if self._skipping:  # the end of a line already handed out cut
                self._skipping = False
            else:
                out.append(_decode(bytes(self._buf)))
            self._buf = bytearray()
            start = nl + 1

    def _append(self, chunk: bytes, start: int, end: int) -> None:
        if self._skipping:
            return
        room = MAX_LINE - len(self._buf)
        if end - start <= room:
            self._buf += chunk[start:end]
            return
        self._buf += chunk[start : start + room]
        self.partials.append(_decode(bytes(self._buf)))
        self.long_lines += 1
        self._buf = bytearray()
        self._skipping = True

    def _keep_partial(self) -> None:
        if self._buf:
            self.partials.append(_decode(bytes(self._buf)))
            self._buf = bytearray()
        self._skipping = False

    def _abandon(self) -> None:
        self._keep_partial()
        if self._file is not None:
            self._file.close()
        self._file = None
        self._ident = None


class StreamFollower:
    """Lines of a stream (standard input) read on a daemon thread; same polling interface."""

    def __init__(self, stream: BinaryIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stdin.buffer
        self._queue: queue.Queue[tuple[str, bool] | None] = queue.Queue()
        self.eof = False
        self.rotations = self.truncations = 0
        self.partials: list[str] = []
        name = f"{THREAD_PREFIX}cuzk-stdin"
        self._thread = threading.Thread(target=self._pump, name=name, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            for line, complete in _bounded_lines(self._stream):
                self._queue.put((line, complete))
        except (OSError, ValueError):
            pass
        self._queue.put(None)

    def poll(self, timeout: float = 0.0) -> list[str]:
        lines: list[str] = []
        try:
            item = self._queue.get(timeout=timeout) if timeout > 0 else self._queue.get_nowait()
            while True:
                if item is None:
                    self.eof = True
                    break
                line, complete = item
                if complete:
                    lines.append(line)
                else:
                    self.partials.append(line)
                item = self._queue.get_nowait()
        except queue.Empty:
            pass
        return lines

    def take_partial(self) -> list[str]:
        out, self.partials = self.partials, []
        return out

    def close(self) -> list[str]:
        return self.take_partial()


def claim_stdin() -> BinaryIO:
    """Take a piped log off standard input and give file descriptor 0 back to the terminal.

    ``cuzk-daemon 2>&1 | provetop watch --cuzk-log -``: the log arrives on stdin, but the
    dashboard (Textual) reads its keys from descriptor 0. The pipe is moved to a new descriptor
    (returned as a binary stream) and ``/dev/tty`` is opened onto 0. Without a terminal (a
    headless run) descriptor 0 is left as it was."""
    stream = os.fdopen(os.dup(0), "rb")
    if not os.isatty(0):
        try:
            tty = os.open("/dev/tty", os.O_RDONLY)
        except OSError:
            return stream
        os.dup2(tty, 0)
        os.close(tty)
    return stream


def open_follower(path: str, *, from_start: bool = True, reopen_tty: bool = False) -> Follower:
    """``"-"`` follows standard input (``reopen_tty``: through :func:`claim_stdin`), anything
    else a file path."""
    if path == "-":
        return StreamFollower(claim_stdin() if reopen_tty else None)
    return FileFollower(path, from_start=from_start)


def iter_lines(path: str) -> Iterator[tuple[str, bool]]:
    """A whole log, streamed (``import-cuzk``): (line, complete); only a last line without its
    newline comes with ``complete`` False."""
    stream = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    try:
        yield from _bounded_lines(stream)
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()


def _bounded_lines(stream: BinaryIO) -> Iterator[tuple[str, bool]]:
    """(line, complete) from a binary stream, at most MAX_LINE bytes held: a longer line comes
    out cut (``complete`` False) and its rest is skipped up to its newline."""
    skipping = False
    while True:
        raw = stream.readline(MAX_LINE + 1)
        if not raw:
            return
        ends = raw.endswith(b"\n")
        if skipping:
            skipping = not ends
            continue
        if ends:
            yield _decode(raw[:-1]), True
        elif len(raw) > MAX_LINE:
            yield _decode(raw[:MAX_LINE]), False
            skipping = True
        else:
            yield _decode(raw), False  # end of stream without newline
