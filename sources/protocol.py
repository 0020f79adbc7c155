"""What a source is to its reader: the :class:`EventSource` protocol and the :class:`Sink` it
feeds.

Sources know nothing about Textual. A live source runs a blocking loop (the dashboard runs it
in a thread worker) and hands events to a :class:`Sink` in batches, because handing a UI
thousands of single events per second is what makes dashboards stutter. A replay source is
driven by its reader's clock instead: it answers "the state at position p" quickly thanks to
checkpoints (:mod:`sources.replay`).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["BATCH_MAX", "BATCH_SECONDS", "EventSource", "Sink"]

BATCH_SECONDS = 0.05  # a live batch is flushed at least this often
BATCH_MAX = 5000  # ... or when it holds this many events


class Sink(Protocol):
    """What a source feeds. Both methods may be called from any thread."""

    def events(self, source: EventSource, batch: list[dict[str, Any]]) -> None: ...

    def status(self, source: EventSource, text: str, level: str = "info") -> None: ...


@runtime_checkable
class EventSource(Protocol):
    """A producer of telemetry events the dashboard can watch.

    ``run`` blocks until :meth:`close` and delivers batches to the sink; a batch starting with
    ``hello`` begins a new session (the app starts a fresh state). ``read_only`` sources refuse
    :meth:`send` with :class:`sources.errors.SourceError`; the dashboard greys their controls
    out."""

    label: str
    read_only: bool

    def run(self, sink: Sink) -> None: ...

    def close(self) -> None: ...

    def send(self, cmd: str, args: dict[str, Any]) -> int: ...
