"""Read a growing log like ``tail -F``: complete lines only, through rotation and truncation.

A cuzk daemon's stderr usually lands in a file that logrotate renames (or copies and truncates)
while the dashboard reads it. :class:`FileFollower` is polled: each :meth:`FileFollower.poll`
returns the complete lines appended since the last call. It

- keeps a partial last line until its newline arrives (a line is never split in two);
- notices rotation (the path now names another file): it drains the old file to its end first,
  then reads the new one from its start;
- notices truncation (the file got shorter than what was read): it restarts at the start;
- waits for a missing file (not there yet, or between rotation steps) instead of failing.

A partial line left when a file is abandoned (rotation, truncation, :meth:`close`) is handed
out by :meth:`take_partial` so the caller can count it as truncated. ``"-"`` reads standard
input through :class:`StreamFollower`, on a thread because a pipe cannot be polled portably.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Iterator
from typing import BinaryIO

CHUNK = 1 << 16


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip("\r")


class FileFollower:
    """Poll-driven follower of one path (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str], *, from_start: bool = True) -> None:
        self.path = os.fspath(path)
        self.from_start = from_start
        self.rotations = 0
        self.truncations = 0
        self.partials: list[str] = []
        self._file: BinaryIO | None = None
        self._ident: tuple[int, int] | None = None
        self._pos = 0
        self._buf = b""
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
        self._buf = b""
        return True

    def _read_available(self) -> list[str]:
        if self._file is None:
            return []
        out: list[str] = []
        while True:
            chunk = self._file.read(CHUNK)
            if not chunk:
                break
            self._pos += len(chunk)
            self._buf += chunk
            *complete, self._buf = self._buf.split(b"\n")
            out += [_decode(line) for line in complete]
        return out

    def _keep_partial(self) -> None:
        if self._buf:
            self.partials.append(_decode(self._buf))
            self._buf = b""

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
        self._thread = threading.Thread(target=self._pump, name="cuzk-stdin", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            for raw in iter(self._stream.readline, b""):
                if raw.endswith(b"\n"):
                    self._queue.put((_decode(raw[:-1]), True))
                else:
                    self._queue.put((_decode(raw), False))  # end of stream without newline
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


def open_follower(
    path: str, *, from_start: bool = True, reopen_tty: bool = False
) -> FileFollower | StreamFollower:
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
        for raw in stream:
            if raw.endswith(b"\n"):
                yield _decode(raw[:-1]), True
            else:
                yield _decode(raw), False
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
