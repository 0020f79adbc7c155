"""Replay from events held in memory: seekable through checkpoints of the state.

What :func:`provetop.sources.replay.open_replay` falls back to for a recording without an index
(still
being written, or cut short: :func:`provetop.recordings.reader.open_recording` reads those up to
their
last whole frame), and what a test or an adapter that has the events already replays.
:meth:`ReplaySource.state_at` answers "the state at position p" by folding forward from the
nearest checkpoint: the recording's own seek snapshots when it has them, else snapshots built
once by :meth:`ReplaySource.build_checkpoints` (the dashboard runs it in the background).
"""

from __future__ import annotations

import functools
import os
import threading
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Any

import msgpack

from provetop.recordings.reader import open_recording
from provetop.recordings.state import State
from provetop.sources.errors import SourceError
from provetop.sources.protocol import Sink

__all__ = ["Checkpoint", "ReplaySource", "next_point"]


@dataclass
class Checkpoint:
    """A point replay can restart folding from: ``events[:index]`` are in its state, which is
    either a ``State.snapshot()`` dict or loaded on demand (the recording's seek snapshots)."""

    index: int
    t: int
    snapshot: dict[str, Any] | None = None
    load: Callable[[], State] | None = None

    def state(self) -> State:
        if self.load is not None:
            return self.load()
        assert self.snapshot is not None
        return State.from_snapshot(self.snapshot)


def next_point(faults: list[int], markers: list[int], position: int, forward: bool) -> int | None:
    """The first fault or marker time after (or, backwards, before) ``position``, at least
    1 µs away so that repeating the jump moves on instead of landing on the same point."""
    points = sorted(set(faults) | set(markers))
    if forward:
        later = [t for t in points if t > position + 1000]
        return later[0] if later else None
    earlier = [t for t in points if t < position - 1000]
    return earlier[-1] if earlier else None


class ReplaySource:
    """A recording, seekable. ``state_at(p, window)`` returns the state after every event up to
    position ``p`` with history (timeline segments, memory series) covering at least the last
    ``window`` nanoseconds: it starts from the nearest checkpoint before ``p - window`` and
    folds forward. Checkpoints come from the recording's own snapshots when it has them, else
    they are built once in the background."""

    HISTORY_MAX_EVENTS = 200_000  # fold at most this many events per seek (history beyond: cut)

    def __init__(
        self,
        events: list[dict[str, Any]],
        *,
        label: str = "replay",
        truncated: bool = False,
        checkpoints: list[Checkpoint] | None = None,
        path: str | None = None,
    ) -> None:
        self.events = events
        self.label = label
        self.path = path
        self.truncated = truncated
        self.read_only = True
        # running maximum: producers' threads may emit slightly out of order, bisection needs
        # a sorted key, and "the events up to p" means the prefix whose times stay <= p
        self.times = list(accumulate((int(e.get("t", 0)) for e in events), max))
        self.start = self.times[0] if self.times else 0
        self.end = self.times[-1] if self.times else 0
        self.checkpoints: list[Checkpoint] = sorted(checkpoints or [], key=lambda c: c.index)
        self._ck_times = [c.t for c in self.checkpoints]
        self._ck_lock = threading.Lock()
        self.faults = [e["t"] for e in events if e.get("k") == "fault"]
        self.markers = [e["t"] for e in events if e.get("k") == "marker"]
        self.hello = next((e for e in events[:1000] if e.get("k") == "hello"), None)
        self.recording: Any = None

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> ReplaySource:
        """Read a whole recording file (:func:`provetop.recordings.reader.open_recording`)."""
        rec = open_recording(path)
        source = cls(rec.events, label=Path(path).name, truncated=rec.truncated, path=str(path))
        cks = []
        for ref in rec.snapshots:  # the writer's seek snapshots, loaded only when used
            index = bisect_right(source.times, ref.t)
            cks.append(Checkpoint(index, ref.t, load=functools.partial(rec.state_at, ref.t)))
        source.set_checkpoints(cks)
        source.recording = rec
        return source

    @property
    def event_count(self) -> int:
        """How many events the recording holds (as :class:`provetop.sources.replay.FileReplaySource`
        says from its index)."""
        return len(self.events)

    def set_checkpoints(self, checkpoints: list[Checkpoint]) -> None:
        with self._ck_lock:
            self.checkpoints = sorted(checkpoints, key=lambda c: c.index)
            self._ck_times = [c.t for c in self.checkpoints]

    # -- checkpoints --------------------------------------------------------------------------

    def build_checkpoints(
        self, every_s: float | None = None, stop: threading.Event | None = None
    ) -> None:
        """Fold the whole recording once, keeping a snapshot every ``every_s`` seconds of
        recording time (default: about 200 over the recording, at least 5 s apart)."""
        if self.checkpoints or not self.events:
            return
        span_s = (self.end - self.start) / 1e9
        every = int((every_s or max(5.0, span_s / 200)) * 1e9)
        state = State()
        next_t = self.start + every
        built: list[Checkpoint] = []
        for i, event in enumerate(self.events):
            if stop is not None and stop.is_set():
                return
            if self.times[i] >= next_t:
                # packed and unpacked: a deep copy (the snapshot shares lists with the state
                # still being folded), in exactly the shape a recorded snapshot has
                snap = msgpack.unpackb(msgpack.packb(state.snapshot()), raw=False)
                built.append(Checkpoint(i, state.t, snap))
                next_t = self.times[i] + every
            state.apply(event)
        self.set_checkpoints(built)

    # -- seeking ------------------------------------------------------------------------------

    def index_at(self, position: int) -> int:
        """How many events happened at or before ``position``."""
        return bisect_right(self.times, position)

    def state_at(self, position: int, window: int) -> tuple[State, int]:
        """(state at ``position`` with ``window`` of history, index of the next event)."""
        target = self.index_at(position)
        with self._ck_lock:
            cks, times = self.checkpoints, self._ck_times
        state = State()
        begin = 0
        j = bisect_right(times, position - window) - 1
        while j >= 0 and cks[j].index > target:
            j -= 1
        if j >= 0:
            state = cks[j].state()
            begin = cks[j].index
            if state.hello is None and self.hello is not None:
                state.hello = self.hello
        if target - begin > self.HISTORY_MAX_EVENTS:  # very wide windows: newest part only
            k = bisect_right(times, self.times[max(0, target - self.HISTORY_MAX_EVENTS)]) - 1
            if k > j and k >= 0 and cks[k].index <= target:
                state = cks[k].state()
                begin = cks[k].index
        state.fold(self.events[begin:target])
        return state, target

    def advance(self, state: State, index: int, position: int) -> int:
        """Fold the events after ``index`` up to ``position`` into ``state``; the new index."""
        target = self.index_at(position)
        if target > index:
            state.fold(self.events[index:target])
        return max(index, target)

    def next_point(self, position: int, forward: bool) -> int | None:
        """The next (or previous) fault or marker time from ``position``."""
        return next_point(self.faults, self.markers, position, forward)

    # EventSource-compatible surface (the app drives replay itself)
    def run(self, sink: Sink) -> None:  # pragma: no cover - replay is driven by the app
        sink.status(self, "loaded", "info")

    def send(self, cmd: str, args: dict[str, Any]) -> int:
        raise SourceError("controls are not available in replay")

    def close(self) -> None:
        pass
