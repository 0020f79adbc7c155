"""The socket the injection library of every traced process connects to.

Why a socket and not a FIFO per process: the command runs a program that may start others (a
shell script, a prover's worker processes); each process that initialises CUDA connects on its
own and is one stream, and the same connection carries the commands back to that process's
library (a trim, the answer to a heal request). The socket lives in a fresh directory only the
user can enter (0700), like the engine's.

One reader thread per connection: it reads the bytes, decodes them and hands the records to
the session (``on_records``); at the end of the stream ``on_close``. A bad stream (not the
library's, another version) ends that connection with ``on_error`` and nothing else.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable

from provetop.sources.trace.records import Header, Record, StreamDecoder, TraceFormatError

RECV_BYTES = 1 << 18  # a drain of the library writes up to 320 KiB at once (writer.h, BATCH)
ACCEPT_BACKLOG = 64  # processes starting CUDA at the same instant, queued before accept


class Stream:
    """One traced process's connection: what the session reads and where it sends commands."""

    def __init__(self, sock: socket.socket, number: int) -> None:
        self.sock = sock
        self.number = number
        self.decoder = StreamDecoder()
        self.header: Header | None = None
        self.closed = False
        self.error: str | None = None
        self._send_lock = threading.Lock()

    @property
    def pid(self) -> int:
        return self.header.pid if self.header is not None else -1

    def send(self, data: bytes) -> bool:
        """Write a command to the library; False when the process is gone."""
        with self._send_lock:
            try:
                self.sock.sendall(data)
            except OSError:
                return False
        return True


class TraceListener:
    """Accepts the libraries' connections; see the module docstring."""

    def __init__(
        self,
        on_header: Callable[[Stream], None],
        on_records: Callable[[Stream, list[Record]], None],
        on_close: Callable[[Stream], None],
        on_error: Callable[[Stream, str], None],
    ) -> None:
        self.on_header = on_header
        self.on_records = on_records
        self.on_close = on_close
        self.on_error = on_error
        self.path = ""
        self.streams: list[Stream] = []
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._dir: str | None = None
        self._readers: list[threading.Thread] = []
        self._closing = threading.Event()

    def start(self) -> str:
        """Bind and listen; the path to give the library (``PROVETOP_TRACE_OUT=unix:PATH``)."""
        base = os.environ.get("XDG_RUNTIME_DIR")
        self._dir = tempfile.mkdtemp(
            prefix="provetop-trace-", dir=base if base and os.path.isdir(base) else None
        )
        self.path = os.path.join(self._dir, "library.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(self.path)
        finally:
            os.umask(old)
        sock.listen(ACCEPT_BACKLOG)
        self._sock = sock
        threading.Thread(target=self._accept, name="trace-accept", daemon=True).start()
        return self.path

    def _accept(self) -> None:
        assert self._sock is not None
        number = 0
        while not self._closing.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            number += 1
            stream = Stream(conn, number)
            reader = threading.Thread(
                target=self._read, args=(stream,), name=f"trace-stream-{number}", daemon=True
            )
            with self._lock:
                self.streams.append(stream)
                self._readers.append(reader)
            reader.start()

    def _read(self, stream: Stream) -> None:
        try:
            while True:
                try:
                    data = stream.sock.recv(RECV_BYTES)
                except OSError:
                    data = b""
                if not data:
                    break
                try:
                    records = stream.decoder.feed(data)
                except TraceFormatError as exc:
                    stream.error = str(exc)
                    self.on_error(stream, str(exc))
                    return
                if stream.header is None and stream.decoder.header is not None:
                    stream.header = stream.decoder.header
                    self.on_header(stream)
                if records:
                    self.on_records(stream, records)
        finally:
            stream.closed = True
            try:
                stream.sock.close()
            except OSError:
                pass
            if stream.header is not None and stream.error is None:
                self.on_close(stream)

    def live(self) -> list[Stream]:
        """The streams still open, with their header read."""
        with self._lock:
            return [s for s in self.streams if not s.closed and s.header is not None]

    def wait_streams(self, timeout: float) -> bool:
        """Wait until every stream has ended (the program and its children exited, and their
        libraries flushed); False when some are still open after ``timeout`` seconds."""
        with self._lock:
            readers = list(self._readers)
        deadline = time.monotonic() + timeout
        for reader in readers:
            reader.join(max(0.0, deadline - time.monotonic()))
        return not any(r.is_alive() for r in readers)

    def close(self) -> None:
        self._closing.set()
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
        with self._lock:
            streams = list(self.streams)
        for s in streams:
            try:
                s.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            os.unlink(self.path)
        except OSError:
            pass
        if self._dir is not None:
            try:
                os.rmdir(self._dir)
            except OSError:
                pass
