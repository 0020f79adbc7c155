"""What a source is to its reader: the :class:`EventSource` protocol and the :class:`Sink` it
feeds.

Sources know nothing about Textual. A live source runs a blocking loop (the dashboard runs it
in a thread worker) and hands events to a :class:`Sink` in batches, because handing a UI
thousands of single events per second is what makes dashboards stutter. A replay source is
driven by its reader's clock instead: it answers "the state at position p" quickly thanks to
checkpoints (:mod:`provetop.sources.replay`).

Beyond the protocol, a source may have a few optional capabilities, each a small protocol a
reader asks about with ``isinstance``: :class:`Connects` (where it connects to),
:class:`Reconnecting` (its retries after a failed connection), :class:`KeepsEvents` (what it
received, for "save the run"), :class:`Prepares` (work to do in the background once opened) and
:class:`MachineMonitor` (the machine's view, not an engine's).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar, runtime_checkable

from provetop.recordings.address import Address

__all__ = [
    "BATCH_MAX",
    "BATCH_SECONDS",
    "THREAD_PREFIX",
    "Connects",
    "EventSource",
    "KeepsEvents",
    "MachineMonitor",
    "Prepares",
    "Reconnecting",
    "Sink",
    "names_its_thread",
]

BATCH_SECONDS = 0.05  # a live batch is flushed at least this often
BATCH_MAX = 5000  # ... or when it holds this many events
# Every thread a source starts, and every thread while a source's ``run`` holds it, is named
# from this prefix: a stack dump says which source a thread serves, and the tests check by it
# that no source outlives its test.
THREAD_PREFIX = "source-"

S = TypeVar("S", bound="EventSource")


class Sink(Protocol):
    """What a source feeds. Both methods may be called from any thread."""

    def events(self, source: EventSource, batch: list[dict[str, Any]]) -> None: ...

    def status(self, source: EventSource, text: str, level: str = "info") -> None: ...


@runtime_checkable
class EventSource(Protocol):
    """A producer of telemetry events the dashboard can watch.

    ``run`` blocks until :meth:`close` and delivers batches to the sink; a batch starting with
    ``hello`` begins a new session (the app starts a fresh state). ``read_only`` sources refuse
    :meth:`send` with :class:`provetop.sources.errors.SourceError`; the dashboard greys their
    controls
    out. ``label`` names the source in a list of them (a source may rename itself, for
    example after the peer's ``hello``)."""

    @property
    def label(self) -> str: ...

    read_only: bool

    def run(self, sink: Sink) -> None: ...

    def close(self) -> None: ...

    def send(self, cmd: str, args: dict[str, Any]) -> int: ...


@runtime_checkable
class Connects(Protocol):
    """A source that connects to an engine's socket at ``address``."""

    @property
    def address(self) -> Address: ...


@runtime_checkable
class Reconnecting(Protocol):
    """A source that, after a failed connection attempt, waits and tries again: ``failures``
    attempts failed in a row; ``retry_at`` is the ``time.monotonic()`` of the next one while
    it waits, else None."""

    @property
    def failures(self) -> int: ...

    @property
    def retry_at(self) -> float | None: ...


@runtime_checkable
class KeepsEvents(Protocol):
    """A source that keeps what it received, so a reader can save it as a recording."""

    def received_events(self) -> Iterable[dict[str, Any]]:
        """What was received (and kept), in order."""
        ...


@runtime_checkable
class Prepares(Protocol):
    """A source with work to do once it is opened (a replay file finding its faults and
    markers); a reader runs :meth:`prepare` in the background, and the source works, only
    slower, until it returns."""

    def prepare(self) -> None: ...


@runtime_checkable
class MachineMonitor(Protocol):
    """A source that is the machine's view (its GPUs) rather than an engine's, where
    ``monitor`` is true: the dashboard shows an engine that attaches later in its place."""

    monitor: bool


def names_its_thread(
    run: Callable[[S, Sink], None],
) -> Callable[[S, Sink], None]:
    """For a source's blocking ``run``: while it runs, the thread it holds (a dashboard's
    worker, a test's thread, the headless runner's) is named ``source-<label>``, and gets its
    name back when ``run`` returns. Why: ``run`` blocks until :meth:`EventSource.close`, so a
    source nobody closed holds its thread for good; by its name that thread is found."""

    @functools.wraps(run)
    def named(self: S, sink: Sink) -> None:
        thread = threading.current_thread()
        before = thread.name
        thread.name = f"{THREAD_PREFIX}{self.label}"
        try:
            run(self, sink)
        finally:
            thread.name = before

    return named
