"""What the source tests share: a sink that records what a source delivers."""

from __future__ import annotations

import socket
import threading


class Collect:
    """A Sink that records what a source delivers."""

    def __init__(self) -> None:
        self.batches: list[list[dict]] = []
        self.statuses: list[str] = []
        self.changed = threading.Condition()

    def events(self, source, batch):
        with self.changed:
            self.batches.append(list(batch))
            self.changed.notify_all()

    def status(self, source, text, level="info"):
        with self.changed:
            self.statuses.append(text)
            self.changed.notify_all()

    def flat(self) -> list[dict]:
        return [e for b in self.batches for e in b]

    def wait(self, predicate, timeout=10.0) -> bool:
        with self.changed:
            return self.changed.wait_for(predicate, timeout)


def close_listener(sock: socket.socket, thread: threading.Thread | None = None) -> None:
    """Close a test server's listening socket so that the thread blocked in its ``accept``
    returns (a plain close leaves it blocked for the rest of the run), and wait for it."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
    if thread is not None:
        thread.join(5)
