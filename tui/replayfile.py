"""Replay straight from a recording file, without reading it all first.

A cleanly closed recording ends with an index of its seek snapshots (``docs/recordings.md``).
Opening one here reads only that index and the ``hello``; a seek decodes the nearest snapshot
before the wanted window and the frames after it; playing on decodes frames as they come. So an
hour of eight GPUs opens in the time it takes to map the file, and a seek costs the events of
one snapshot interval, not of the whole run. Files without an index (still being written, or
cut short) go through the tolerant full reader instead (:class:`tui.sources.ReplaySource`).
"""

from __future__ import annotations

import mmap
import os
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack

from recordings.format import END_MAGIC, INDEX_KIND, PREFIX, PREFIX_SIZE, TRAILER, TRAILER_SIZE
from recordings.framing import HEADER_SIZE, MAX_FRAME, MAX_ITEMS, FrameError
from recordings.state import State
from tui.sources import SourceError

_MEMORY_KEY = b"\xa1k\xa6memory"  # a map whose first key is k = "memory" (after the header)
HISTORY_BYTES = 24 << 20  # a seek decodes at most about this much before the position


class NotIndexed(Exception):
    """The file has no valid index (not closed cleanly): use the full reader."""


class FileReplaySource:
    """A seekable recording file (see the module docstring); same surface as ReplaySource."""

    read_only = True

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self.label = Path(path).name
        self.truncated = False
        self._file = open(path, "rb")  # noqa: SIM115 (closed in close())
        try:
            size = os.fstat(self._file.fileno()).st_size
            if size < PREFIX_SIZE + TRAILER_SIZE:
                raise NotIndexed("too short")
            self._mm = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError, NotIndexed):
            self._file.close()
            raise
        mm = self._mm
        if mm[:PREFIX_SIZE] != PREFIX:
            self.close()
            raise NotIndexed("not a recording of this format version")
        index_offset, magic = TRAILER.unpack(mm[size - TRAILER_SIZE :])
        if magic != END_MAGIC or not PREFIX_SIZE <= index_offset < size - TRAILER_SIZE:
            self.close()
            raise NotIndexed("no trailer")
        self.limit = index_offset
        try:
            index, _ = self._frame_at(index_offset, size - TRAILER_SIZE)
            _header, after_header = self._frame_at(PREFIX_SIZE)
            self.hello, _ = self._frame_at(after_header)
        except FrameError as exc:
            self.close()
            raise NotIndexed(str(exc)) from None
        if index.get("k") != INDEX_KIND or self.hello.get("k") != "hello":
            self.close()
            raise NotIndexed("unexpected frames")
        self.first_event = after_header
        self.snapshots: list[tuple[int, int]] = [(int(t), int(o)) for t, o in index["snapshots"]]
        self._snap_times = [t for t, _ in self.snapshots]
        self.start = int(self.hello.get("t", 0))
        self.end = int(index.get("t", self.start))
        self.event_count = int(index.get("events", 0))
        self.faults: list[int] = []
        self.markers: list[int] = []
        self.checkpoints = self.snapshots  # non-empty: nothing to build
        self._snap_cache: dict[int, tuple[dict[str, Any], int]] = {}

    # -- frames -------------------------------------------------------------------------------

    def _frame_at(self, offset: int, limit: int | None = None) -> tuple[dict[str, Any], int]:
        limit = self.limit if limit is None else limit
        end_head = offset + HEADER_SIZE
        if end_head > limit:
            raise FrameError(f"frame header at byte {offset} runs past byte {limit}")
        length = int.from_bytes(self._mm[offset:end_head], "big")
        end = end_head + length
        if end > limit:
            raise FrameError(f"frame at byte {offset} runs past byte {limit}")
        with memoryview(self._mm) as view:
            return _decode(view[end_head:end]), end

    def _events(self, offset: int) -> Iterator[tuple[dict[str, Any], int, int]]:
        """(event, its offset, the next offset) from ``offset`` on, seek snapshots skipped."""
        while offset < self.limit:
            frame, nxt = self._frame_at(offset)
            if not (frame.get("k") == "snapshot" and frame.get("seek") is True):
                yield frame, offset, nxt
            offset = nxt

    # -- the replay surface -------------------------------------------------------------------

    def state_at(self, position: int, window: int) -> tuple[State, int]:
        """(state after the events up to ``position``, with history from at least
        ``position - window``; the offset of the next event)."""
        j = bisect_right(self._snap_times, position - window) - 1
        latest = bisect_right(self._snap_times, position) - 1
        if latest >= 0:  # very wide windows: fold at most HISTORY_BYTES of history
            floor = self.snapshots[latest][1] - HISTORY_BYTES
            while j < latest and (self.snapshots[j][1] if j >= 0 else 0) < floor:
                j += 1
        if j >= 0:
            snap, offset = self._snapshot(j)
            state = State.from_snapshot(snap["state"])
        else:
            state, offset = State(), self.first_event
        offset = self._fold_before(state, offset, position - window)
        return state, self.advance(state, offset, position)

    def _fold_before(self, state: State, offset: int, history_from: int) -> int:
        """Fold the events before the window: only the current state matters there. Memory
        samples (most of the stream) are not even decoded, except the last one of each device,
        which is all the current state keeps of them. Returns the offset of the first event at
        or after ``history_from``."""
        mm, limit = self._mm, self.limit
        memory: list[int] = []
        while offset + HEADER_SIZE <= limit:
            body = offset + HEADER_SIZE
            nxt = body + int.from_bytes(mm[offset:body], "big")
            head = 3 if mm[body] == 0xDE else 1  # map16 (memory samples) or fixmap header
            if mm[body + head : body + head + len(_MEMORY_KEY)] == _MEMORY_KEY:
                memory.append(offset)
                offset = nxt
                continue
            frame, nxt = self._frame_at(offset)
            if frame.get("k") == "snapshot" and frame.get("seek") is True:
                offset = nxt
                continue
            if frame.get("t", 0) >= history_from:
                break
            state.apply(frame)
            offset = nxt
        devices = len((state.hello or self.hello).get("devices") or ()) or 1
        seen: set[int] = set()
        latest: list[dict[str, Any]] = []
        for at in reversed(memory):
            sample, _ = self._frame_at(at)
            if sample.get("device") not in seen:
                seen.add(sample.get("device"))
                latest.append(sample)
            if len(seen) >= devices:
                break
        for sample in sorted(latest, key=lambda e: e.get("device", 0)):  # a full fold's order
            state.memory[sample["device"]] = sample
            state.t = max(state.t, sample.get("t", 0))
        state.events += len(memory)
        return offset

    def _snapshot(self, j: int) -> tuple[dict[str, Any], int]:
        """Seek snapshot ``j`` decoded, and the offset after it; the last few are kept, since
        an operator stepping back and forth lands in the same interval again and again."""
        cached = self._snap_cache.get(j)
        if cached is None:
            cached = self._frame_at(self.snapshots[j][1])
            self._snap_cache[j] = cached
            while len(self._snap_cache) > 3:
                self._snap_cache.pop(next(iter(self._snap_cache)))
        return cached

    def advance(self, state: State, offset: int, position: int) -> int:
        """Fold the events from ``offset`` while their time is <= ``position``.

        This loop is most of a seek (the whole window is folded here), so it is
        :meth:`_events` inlined: one slice of the map per frame, no generator, no per-frame
        bounds helper; a damaged frame still raises FrameError as there."""
        mm, limit, apply = self._mm, self.limit, state.apply
        with memoryview(mm) as view:
            while offset + HEADER_SIZE <= limit:
                body = offset + HEADER_SIZE
                nxt = body + int.from_bytes(mm[offset:body], "big")
                if nxt > limit:
                    raise FrameError(f"frame at byte {offset} runs past byte {limit}")
                event = _decode(view[body:nxt])
                if not (event.get("k") == "snapshot" and event.get("seek") is True):
                    if event.get("t", 0) > position:
                        return offset
                    apply(event)
                offset = nxt
        if offset < limit:  # a header cut by the index: as _frame_at reports it
            raise FrameError(f"frame header at byte {offset} runs past byte {limit}")
        return offset

    def prepare(self) -> None:
        """Find the faults and markers for the replay bar and the n/p jumps: a byte search for
        the kind (events are maps whose first key is ``k``), each hit checked by decoding."""
        found: dict[str, list[int]] = {"fault": [], "marker": []}
        mm = self._mm
        for kind in found:
            needle = b"\xa1k" + bytes([0xA0 | len(kind)]) + kind.encode()
            at = mm.find(needle, self.first_event, self.limit)
            while at >= 0:
                for head in (1, 3):  # fixmap or map16 header before the first key
                    start = at - head - HEADER_SIZE
                    try:
                        frame, _ = self._frame_at(start)
                    except (FrameError, ValueError):
                        continue
                    if frame.get("k") == kind and isinstance(frame.get("t"), int):
                        found[kind].append(frame["t"])
                        break
                at = mm.find(needle, at + 1, self.limit)
        self.faults, self.markers = sorted(found["fault"]), sorted(found["marker"])

    def build_checkpoints(self, *args: Any, **kwargs: Any) -> None:
        self.prepare()

    def next_point(self, position: int, forward: bool) -> int | None:
        points = sorted(set(self.faults) | set(self.markers))
        if forward:
            later = [t for t in points if t > position + 1000]
            return later[0] if later else None
        earlier = [t for t in points if t < position - 1000]
        return earlier[-1] if earlier else None

    def run(self, sink: Any) -> None:  # replay is driven by the app
        sink.status(self, "loaded", "info")

    def send(self, cmd: str, args: dict[str, Any]) -> int:
        raise SourceError("controls are not available in replay")

    def close(self) -> None:
        mm = getattr(self, "_mm", None)
        if mm is not None:
            try:
                mm.close()
            except BufferError:  # a decoded view still alive: the GC will close it
                pass
        self._file.close()


def _reject_ext(code: int, data: bytes) -> Any:
    raise FrameError(f"msgpack extension type {code} is not allowed")


_UNPACK_LIMITS: dict[str, Any] = {
    "raw": False,
    "strict_map_key": True,
    "ext_hook": _reject_ext,
    "timestamp": 0,
    "max_str_len": MAX_FRAME,
    "max_bin_len": MAX_FRAME,
    "max_array_len": MAX_ITEMS,
    "max_map_len": MAX_ITEMS,
    "max_ext_len": MAX_FRAME,
}


def _decode(payload: memoryview) -> dict[str, Any]:
    """One frame's map. The bounds of recordings.framing (sizes, no extension types) without
    its Python-level depth walk, which would double the cost of a seek; msgpack's own nesting
    limit still holds, and replay catches whatever a damaged frame makes the reducer raise."""
    try:
        obj = msgpack.unpackb(payload, **_UNPACK_LIMITS)
    except FrameError:
        raise
    except Exception as exc:  # msgpack raises several types on bad input
        raise FrameError(f"undecodable frame: {exc or type(exc).__name__}") from None
    if not isinstance(obj, dict):
        raise FrameError("a frame that is not a map")
    return obj


def open_replay(path: str | os.PathLike[str]) -> Any:
    """The fastest way to replay ``path``: lazily when it has an index, else fully read."""
    try:
        return FileReplaySource(path)
    except NotIndexed:
        from tui.sources import ReplaySource

        return ReplaySource.open(path)
