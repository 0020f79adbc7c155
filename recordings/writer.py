"""Writing recording files: every event the engine emits, framed, flushed, seekable.

The engine's recorder thread calls :meth:`RecordingWriter.write` for every event (the recording
never drops). ``write`` only validates, encodes, folds the event into the writer's own
:class:`~provetop.recordings.state.State` and appends to an in-memory buffer; a background thread
moves
the buffer to the file every ``flush_every_s`` seconds, so a SIGKILL loses at most that much.
Every ``snapshot_every_s`` seconds of recorded time the writer adds a *seek snapshot* (the
reducer's current state, trimmed to the live engine's window plus running totals, so the
writer's memory does not grow with the run), and :meth:`RecordingWriter.close` appends an
index of the snapshots and a fixed trailer so a reader can find them without scanning. The
layout is in ``docs/recordings.md`` and :mod:`provetop.recordings.format`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from provetop.base.files import create_private, make_private_dirs
from provetop.base.version import __version__
from provetop.recordings.errors import RecordingError
from provetop.recordings.format import (
    END_MAGIC,
    FORMAT_VERSION,
    HEADER_KIND,
    INDEX_KIND,
    PREFIX,
    SUFFIX,
    TRAILER,
)
from provetop.recordings.framing import FrameError, encode_checked_frame
from provetop.recordings.schema import validate
from provetop.recordings.state import State, Window

SYNC_FLUSH_BYTES = 1 << 20  # without the background thread, flush at least every MiB


def default_recording_dir() -> Path:
    """Where recordings go unless ``--record`` says otherwise: the user's data directory
    (``$XDG_DATA_HOME/provetop/recordings``, else ``~/.local/share/provetop/recordings``)."""
    base = os.environ.get("XDG_DATA_HOME")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".local" / "share"
    return root / "provetop" / "recordings"


def default_recording_path(engine_id: str | None = None, directory: Path | None = None) -> Path:
    """A fresh file name in the recordings directory: ``YYYYmmdd-HHMMSS-<engine_id>.pvtrec``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    safe = "".join(c for c in (engine_id or str(os.getpid())) if c.isalnum() or c in "-_")[:40]
    return (directory or default_recording_dir()) / f"{stamp}-{safe or 'run'}{SUFFIX}"


class RecordingWriter:
    """Append-only writer of one recording file (see the module docstring).

    ``write`` is meant for one thread (the recorder); the background flusher is the only other
    thread touching the writer, and it shares only the pending buffer (under a short lock).

    A write error (disk full) stops the writing for good. It is reported once, at once, to
    ``on_error(message)`` (from whichever thread met it, usually the flusher); with such a
    callback later ``write`` calls drop their event quietly, without one, they raise a
    :class:`RecordingError`. ``close`` raises it too. Each raise is a fresh exception: the same
    one raised again and again would chain a traceback (and its frames) per event.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        snapshot_every_s: float = 10.0,
        flush_every_s: float = 0.5,
        fsync: bool = False,
        validate_events: bool = True,
        background_flush: bool = True,
        writer: str | None = None,
        exclusive: bool = False,
        on_error: Callable[[str], None] | None = None,
        window: Window | None = Window(),  # noqa: B008 (frozen: one shared value is safe)
    ) -> None:
        self.path = Path(path)
        self.window = window
        self.on_error: Callable[[str], None] | None = None  # set once the file is open
        self.snapshot_every_ns = int(max(0.0, snapshot_every_s) * 1e9)
        self.flush_every_s = max(0.01, float(flush_every_s))
        self.fsync = fsync
        self.validate_events = validate_events
        self.state = State()
        self.snapshots: list[tuple[int, int]] = []  # (t, byte offset) of every seek snapshot
        self.events_written = 0
        self.closed = False
        self._write_lock = threading.RLock()  # write(), write_snapshot() and close() exclude
        self._lock = threading.Lock()  # guards _pending and error
        self._io_lock = threading.Lock()  # one writer of the file at a time
        self._pending = bytearray()
        self._last_flush = time.monotonic()
        self.error: str | None = None  # the first write error, in one line; then no more I/O
        self.events_dropped = 0  # events not written after that error
        self._last_snapshot_t: int | None = None
        self.reducer_error: str | None = None  # set when an event could not be folded
        # A snapshot holds the window's partition rows (every row with window=None); the next
        # one waits until at least as many bytes of events follow the last one. Snapshots then
        # take at most about half of the file (not a quadratic share), building them costs O(1)
        # amortised per event byte, and a seek folds at most about a snapshot's worth of events.
        self._last_snapshot_size = 0
        self._last_snapshot_end = 0
        try:
            # private whatever the umask: new directories 0700, the file 0600 (it holds what a
            # client of the engine can read: host name, pid, every event)
            make_private_dirs(self.path.parent)
            # exclusive: create or fail in one step (O_EXCL), so a file (or a link) that appears
            # between a caller's existence check and this open is never truncated
            fd = create_private(self.path, exclusive=exclusive)
            self._file = os.fdopen(fd, "wb", buffering=0)  # closed in close()
        except FileExistsError:
            raise RecordingError(
                f"cannot write recording {self.path}: the path exists (never overwritten)"
            ) from None
        except OSError as exc:
            raise RecordingError(
                f"cannot write recording {self.path}: {exc.strerror or exc}"
            ) from None
        if writer is None:
            writer = f"provetop {__version__}"
        header = {
            "k": HEADER_KIND,
            "t": 0,
            "format": FORMAT_VERSION,
            "checksum": "crc32",  # the last 4 bytes of every frame (docs/recordings.md)
            "writer": writer,
            "created_ns": time.time_ns(),
            "snapshot_every_s": float(snapshot_every_s),
            "flush_every_s": float(flush_every_s),
        }
        self._pending += PREFIX + encode_checked_frame(header)
        self.offset = len(self._pending)  # logical end of file: flushed plus pending bytes
        self.flush()  # an unwritable file fails here, raised to the caller (not reported)
        self.on_error = on_error
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        if background_flush:
            self._flusher = threading.Thread(
                target=self._flush_loop, name="recording-flush", daemon=True
            )
            self._flusher.start()

    # -- writing ------------------------------------------------------------------------------

    def write(self, event: dict[str, Any]) -> None:
        """Record one event. The first event must be ``hello``. Raises
        :class:`~provetop.recordings.schema.SchemaError` for an invalid event (nothing is written)
        and
        :class:`RecordingError` when the file cannot be written (disk full, closed)."""
        with self._write_lock:
            self._write(event)

    def _write(self, event: dict[str, Any]) -> None:
        if self.closed:
            raise RecordingError(f"recording {self.path} is closed")
        if self.error is not None:
            self.events_dropped += 1
            if self.on_error is not None:
                return  # reported once already
            raise RecordingError(self.error)
        if self.validate_events:
            validate(event)
        if self.events_written == 0 and event.get("k") != "hello":
            raise RecordingError(
                f"the first event of a recording must be hello, not {event.get('k')!r}"
            )
        frame = encode_checked_frame(event)
        with self._lock:
            self._pending += frame
            self.offset += len(frame)
            pending = len(self._pending)
        self.events_written += 1
        if self._flusher is None and (
            pending >= SYNC_FLUSH_BYTES or time.monotonic() - self._last_flush >= self.flush_every_s
        ):
            try:
                self.flush()  # no background thread: flush from the caller, on the same cadence
            except RecordingError:
                if self.on_error is None:
                    raise
                return
        if self.reducer_error is not None:
            return
        try:
            self.state.apply(event)
        except Exception as exc:  # schema-valid but unfoldable values: keep recording
            self.reducer_error = f"event {self.events_written - 1}: {type(exc).__name__}: {exc}"
            return  # and write no more seek snapshots: they could not be trusted
        if self._last_snapshot_t is None:
            self._last_snapshot_t = self.state.t
        elif (
            self.state.t - self._last_snapshot_t >= self.snapshot_every_ns
            and self.offset - self._last_snapshot_end >= self._last_snapshot_size
        ):
            self._write_snapshot()

    def write_snapshot(self) -> bool:
        """Append a seek snapshot of the current state now; False when it could not be encoded
        (too large), in which case the recording simply has one seek point fewer."""
        with self._write_lock:
            if self.closed:
                return False
            return self._write_snapshot()

    def _write_snapshot(self) -> bool:
        if self.events_written == 0 or self.reducer_error is not None:
            return False
        t = self.state.t
        self._last_snapshot_t = t
        if self.window is not None:
            # the live engine's window: older rows, faults and proofs are in the file already,
            # the snapshot counts them in ``trimmed`` (so totals stay exact), and the writer's
            # memory stays bounded however long the run (it grew ~1.7 KB per partition)
            self.state.trim(self.window)
        try:
            seek = {"k": "snapshot", "t": t, "seek": True, "state": self.snapshot()}
            frame = encode_checked_frame(seek)
        except FrameError:
            return False
        with self._lock:
            self.snapshots.append((t, self.offset))
            self._pending += frame
            self.offset += len(frame)
        self._last_snapshot_size = len(frame)
        self._last_snapshot_end = self.offset
        # Snapshots carry no history, so the writer's own history can go: with the window its
        # memory stays bounded, however long the run.
        self.state.segments.clear()
        self.state.series.clear()
        self.state.attempts.clear()
        self.state.log.clear()
        return True

    def snapshot(self) -> dict[str, Any]:
        """The reducer's current state as written into seek snapshots."""
        return self.state.snapshot()

    def flush(self) -> None:
        """Move pending bytes to the file (the kernel's page cache: they survive a SIGKILL of
        this process); with ``fsync=True`` also to the disk."""
        with self._io_lock:
            with self._lock:
                if self.error is not None:
                    raise RecordingError(self.error)
                data, self._pending = self._pending, bytearray()
            self._last_flush = time.monotonic()
            if not data:
                return
            try:
                view = memoryview(data)
                while view:
                    n = self._file.write(view)
                    view = view[n:]
                if self.fsync:
                    os.fsync(self._file.fileno())
            except (OSError, ValueError) as exc:
                message = self._fail(exc)
                raise RecordingError(message) from None

    def _fail(self, exc: BaseException) -> str:
        """Keep the first write error (as a line, not the exception and its frames), tell
        ``on_error`` once, and return the line."""
        reason = (exc.strerror if isinstance(exc, OSError) else None) or exc
        message = f"cannot write recording {self.path}: {reason}"
        with self._lock:
            first = self.error is None
            if self.error is None:
                self.error = message
                self._pending = bytearray()  # nothing more will reach the file
            else:
                message = self.error
        if first and self.on_error is not None:
            try:
                self.on_error(message)
            except Exception:  # noqa: BLE001 (a reporting bug must not hide the error)
                pass
        return message

    def _flush_loop(self) -> None:
        while not self._stop.wait(self.flush_every_s):
            try:
                self.flush()
            except RecordingError:
                return  # kept in self.error, reported to on_error; raised by close()

    # -- closing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Write a final seek snapshot, the index and the trailer, flush, fsync and close.
        Idempotent."""
        with self._write_lock:  # a write() racing with close() lands before the index or fails
            self._close()

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._stop.set()
        if self._flusher is not None:
            self._flusher.join()
        try:
            if self.error is None:
                stale = not self.snapshots or self.snapshots[-1][0] != self.state.t
                if self.events_written and stale:
                    self._write_snapshot()  # a no-op after a reducer error
                index = {
                    "k": INDEX_KIND,
                    "t": self.state.t,
                    "snapshots": [[t, off] for t, off in self.snapshots],
                    "events": self.events_written,
                }
                with self._lock:
                    index_offset = self.offset
                    trailer = TRAILER.pack(index_offset, END_MAGIC)
                    self._pending += encode_checked_frame(index) + trailer
                self.flush()
                os.fsync(self._file.fileno())
        except RecordingError:
            pass  # kept in self.error, raised below
        except OSError as exc:
            self._fail(exc)
        finally:
            self._file.close()
        if self.error is not None:
            raise RecordingError(self.error)

    def discard(self) -> None:
        """Close without index or trailer and remove the file: for a run that never started,
        whose recording must not read back as a complete (empty) run. Idempotent."""
        with self._write_lock:
            if not self.closed:
                self.closed = True
                self._stop.set()
                if self._flusher is not None:
                    self._flusher.join()
                self._file.close()
            try:
                self.path.unlink()
            except OSError:
                pass

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
