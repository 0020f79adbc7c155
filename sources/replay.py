"""Replay straight from a recording file, without reading it all first.

A cleanly closed recording ends with an index of its seek snapshots (``docs/recordings.md``).
Opening one here reads only that index and the ``hello``; a seek decodes the nearest snapshot
before the wanted window and the frames after it; playing on decodes frames as they come. So an
hour of eight GPUs opens in the time it takes to map the file, and a seek costs the events of
one snapshot interval, not of the whole run. Files without an index (still being written, or
cut short) go through the tolerant full reader instead
(:class:`provetop.sources.replay_memory.ReplaySource`). The trailer and index are checked by
:mod:`provetop.recordings.reader`, and every frame is decoded with the bounds of
:mod:`provetop.recordings.framing`.
"""

from __future__ import annotations

import copy
import gc
import mmap
import os
import threading
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack

from provetop.recordings.errors import RecordingError
from provetop.recordings.format import MAGIC, PREFIX_SIZE, READABLE_VERSIONS, checked
from provetop.recordings.framing import (
    HEADER_SIZE,
    UNPACK_LIMITS,
    FrameError,
    checked_payload,
    decode_payload,
)
from provetop.recordings.reader import index_snapshots, open_regular, read_footer
from provetop.recordings.state import PartitionRow, State
from provetop.sources.errors import SourceError
from provetop.sources.replay_memory import ReplaySource, next_point

_MEMORY_KEY = b"\xa1k\xa6memory"  # a map whose first key is k = "memory" (after the header)
HISTORY_BYTES = 24 << 20  # a seek decodes at most about this much before the position
MARKS = 256  # in-memory checkpoints kept (an hour in: ~200 KB each plus pointers to rows)
MARK_SPACING_NS = int(40e9)  # prepare() lays one every this much recorded time


class NotIndexed(Exception):
    """The file has no valid index (not closed cleanly): use the full reader."""


class FileReplaySource:
    """A seekable recording file (see the module docstring); same surface as ReplaySource."""

    read_only = True

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self._closed = False
        self.label = Path(path).name
        self.truncated = False
        self._file = open_regular(path)  # a FIFO or a device: RecordingError, never a wait
        try:
            size = os.fstat(self._file.fileno()).st_size
            prefix = self._file.read(PREFIX_SIZE)
            if len(prefix) < PREFIX_SIZE or prefix[:-1] != MAGIC:
                raise NotIndexed("not a recording")
            if prefix[-1] not in READABLE_VERSIONS:
                raise NotIndexed("not a recording of a format version this reader knows")
            # version 2: every frame ends with its CRC-32, checked as it is decoded
            self._crc = checked(prefix[-1])
            footer = read_footer(self._file, Path(path), size)  # the reader's trailer checks
            if footer is None:
                raise NotIndexed("no trailer")
            index_offset, index = footer
            snapshots = index_snapshots(index, Path(path), index_offset)
            self._mm = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError, NotIndexed, RecordingError) as exc:
            self._file.close()
            raise NotIndexed(str(exc)) from None
        self.limit = index_offset
        try:
            _header, after_header = self._frame_at(PREFIX_SIZE)
            self.hello, _ = self._frame_at(after_header)
        except FrameError as exc:
            self.close()
            raise NotIndexed(str(exc)) from None
        if self.hello.get("k") != "hello":
            self.close()
            raise NotIndexed("unexpected frames")
        self.first_event = after_header
        self.snapshots: list[tuple[int, int]] = snapshots
        self._snap_times = [t for t, _ in self.snapshots]
        self.start = int(self.hello.get("t", 0))
        self.end = int(index.get("t", self.start))
        self.event_count = int(index.get("events", 0))
        self.faults: list[int] = []
        self.markers: list[int] = []
        self.checkpoints = self.snapshots  # non-empty: nothing to build
        self._snap_cache: dict[int, tuple[dict[str, Any], list[Any], int]] = {}
        # Finished partition rows, shared by every seek (see _load_snapshot): their encoded
        # bytes -> the one PartitionRow built from them; _shared holds those rows' ids.
        self._rows: dict[bytes, PartitionRow] = {}
        self._shared: set[int] = set()
        self._lock = threading.Lock()  # prepare() runs in a worker thread beside the seeks
        # In-memory checkpoints taken by earlier seeks where their window began:
        # (offset, state.t, the state without rows packed, its rows), ordered by offset.
        self._marks: list[tuple[int, int, bytes, list[PartitionRow]]] = []

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
            body = view[end_head:end]
            if self._crc:
                body = checked_payload(view[offset:end_head], body)  # type: ignore[assignment]
            return _decode(body), end

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
        ``position - window``; the offset of the next event).

        The cyclic garbage collector is held off meanwhile: a seek allocates some 10^5
        acyclic objects, enough to trigger full collections that walk every shared row and
        checkpoint (up to doubling a seek, at random); they run after it instead."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._state_at(position, window)
        finally:
            if enabled:
                gc.enable()

    def _state_at(self, position: int, window: int) -> tuple[State, int]:
        j = bisect_right(self._snap_times, position - window) - 1
        latest = bisect_right(self._snap_times, position) - 1
        if latest >= 0:  # very wide windows: fold at most HISTORY_BYTES of history
            floor = self.snapshots[latest][1] - HISTORY_BYTES
            while j < latest and (self.snapshots[j][1] if j >= 0 else 0) < floor:
                j += 1
        start = self.snapshots[j][1] if j >= 0 else self.first_event
        mark = self._mark_before(position - window, start)
        if mark is not None:
            state, offset = mark
        elif j >= 0:
            state, offset = self._state_from_snapshot(j)
        else:
            state, offset = State(), self.first_event
        folded = offset
        offset = self._fold_before(state, offset, position - window)
        if offset != folded:
            self._take_mark(state, offset)
        return state, self.advance(state, offset, position)

    def _mark_before(self, history_from: int, after: int) -> tuple[State, int] | None:
        """The latest in-memory checkpoint past byte ``after`` holding only events before
        ``history_from`` (so none that the window needs as history), rebuilt; else None."""
        with self._lock:
            best = None
            for mark in self._marks:
                if mark[0] > after and mark[1] < history_from:
                    best = mark
        if best is None:
            return None
        offset, _t, packed, rows = best
        state = State.from_snapshot(msgpack.unpackb(packed, raw=False, strict_map_key=False))
        partitions = state.partitions
        for row in rows:
            if id(row) not in self._shared:
                row = copy.copy(row)  # running: the fold will change it
            partitions[(row.proof, row.partition)] = row
        return state, offset

    def _take_mark(self, state: State, offset: int) -> None:
        """Keep ``state`` (every event before ``offset`` folded) as an in-memory checkpoint,
        the way seek snapshots keep it (no history), so a later seek near this one folds from
        here instead of from the snapshot. Finished rows are shared, running ones copied."""
        rows = state.partitions
        state.partitions = {}
        try:
            packed = msgpack.packb(state.snapshot())  # a deep copy of everything but rows
        finally:
            state.partitions = rows
        kept: list[PartitionRow] = []
        shared = self._shared
        for row in rows.values():
            if id(row) not in shared:
                if row.ok is None:
                    row = copy.copy(row)
                else:
                    shared.add(id(row))  # finished: from now on copied before any change
            kept.append(row)
        with self._lock:
            self._marks.append((offset, state.t, packed, kept))
            self._marks.sort(key=lambda m: m[0])
            if len(self._marks) > MARKS:  # drop the one nearest a neighbour
                gaps = [
                    self._marks[i + 1][0] - self._marks[i][0] for i in range(len(self._marks) - 1)
                ]
                del self._marks[gaps.index(min(gaps)) + 1]

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
            if frame.get("k") == "partition_done":
                self._unshare(state, frame)
            state.apply(frame)
            offset = nxt
        devices = len((state.hello or self.hello).get("devices") or ()) or 1
        seen: set[int | None] = set()  # devices; None: a damaged sample without one
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

    def _state_from_snapshot(self, j: int) -> tuple[State, int]:
        """The state of seek snapshot ``j`` and the offset after it. Finished partition rows
        are the bulk of a late snapshot (every row of the run) and never change once finished,
        so they are decoded once per file and shared by every seek (:meth:`_unshare` copies
        one before the reducer could change it); only the rest is rebuilt per seek."""
        rest, rows, offset = self._snapshot(j)
        state = State.from_snapshot(rest)
        partitions = state.partitions
        for row in rows:
            if not isinstance(row, PartitionRow):
                row = PartitionRow(**row)  # still running: the fold will change it
            partitions[(row.proof, row.partition)] = row
        return state, offset

    def _unshare(self, state: State, event: dict[str, Any]) -> None:
        """Before a ``partition_done`` is folded: give ``state`` its own copy of the row it
        may update in place (a repeated report of a finished attempt), never the shared one.
        (Every other change to a finished row replaces it with a new row.)"""
        # a damaged frame may lack these (the reducer raises on it next): then no row matches
        key: tuple[Any, Any] = (event.get("proof"), event.get("partition"))
        row = state.partitions.get(key)
        if row is not None and id(row) in self._shared:
            state.partitions[key] = copy.copy(row)  # phases_ms is replaced, never updated

    def _snapshot(self, j: int) -> tuple[dict[str, Any], list[Any], int]:
        """Seek snapshot ``j``: its state without the partition rows, the rows (shared
        PartitionRows when finished, else their fields), and the offset after it. The last
        few are kept, since an operator stepping back and forth lands in the same interval
        again and again."""
        with self._lock:
            cached = self._snap_cache.get(j)
            if cached is None:
                cached = self._load_snapshot(self.snapshots[j][1])
                self._snap_cache[j] = cached
                while len(self._snap_cache) > 3:
                    self._snap_cache.pop(next(iter(self._snap_cache)))
            return cached

    def _load_snapshot(self, offset: int) -> tuple[dict[str, Any], list[Any], int]:
        """Decode a seek snapshot, each partition row only when its bytes were not seen
        before (a byte-identical encoding is the same row). Anything unexpected (a damaged or
        differently shaped frame) goes through the plain decoder, which reports it."""
        end_head = offset + HEADER_SIZE
        if end_head > self.limit:
            raise FrameError(f"frame header at byte {offset} runs past byte {self.limit}")
        end = end_head + int.from_bytes(self._mm[offset:end_head], "big")
        if end > self.limit:
            raise FrameError(f"frame at byte {offset} runs past byte {self.limit}")
        payload = self._mm[end_head:end]
        if self._crc:
            payload = bytes(checked_payload(self._mm[offset:end_head], payload))
        try:
            rest, raw_rows = _split_snapshot(payload)
        except Exception:  # noqa: BLE001 (the plain decoder says what is wrong)
            frame, _ = self._frame_at(offset)
            state = dict(frame["state"])
            rows: list[Any] = list(state.pop("partitions", []))
            return state, rows, end
        rows = []
        for raw in raw_rows:
            row = self._rows.get(raw)
            if row is None:
                fields = _decode(memoryview(raw))
                if fields.get("ok") is None:
                    rows.append(fields)
                    continue
                row = PartitionRow(**fields)
                self._rows[raw] = row
                self._shared.add(id(row))
            rows.append(row)
        return rest, rows, end

    def advance(self, state: State, offset: int, position: int) -> int:
        """Fold the events from ``offset`` while their time is <= ``position``.

        This loop is most of a seek (the whole window is folded here), so it is
        :meth:`_events` inlined: one slice of the map per frame, no generator, no per-frame
        bounds helper; a damaged frame still raises FrameError as there."""
        mm, limit, apply, crc = self._mm, self.limit, state.apply, self._crc
        with memoryview(mm) as view:
            while offset + HEADER_SIZE <= limit:
                body = offset + HEADER_SIZE
                nxt = body + int.from_bytes(mm[offset:body], "big")
                if nxt > limit:
                    raise FrameError(f"frame at byte {offset} runs past byte {limit}")
                payload = view[body:nxt]
                if crc:
                    payload = checked_payload(view[offset:body], payload)  # type: ignore[assignment]
                event = _decode(payload)
                kind = event.get("k")
                if not (kind == "snapshot" and event.get("seek") is True):
                    if event.get("t", 0) > position:
                        return offset
                    if kind == "partition_done":
                        self._unshare(state, event)
                    apply(event)
                offset = nxt
        if offset < limit:  # a header cut by the index: as _frame_at reports it
            raise FrameError(f"frame header at byte {offset} runs past byte {limit}")
        return offset

    def prepare(self) -> None:
        """Find the faults and markers for the replay bar and the n/p jumps: a byte search for
        the kind (events are maps whose first key is ``k``), each hit checked by decoding.
        Then lay in-memory checkpoints between the file's seek snapshots (:meth:`_lay_marks`).
        The app runs this in a worker thread: seeks work meanwhile, only slower."""
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
        if self.snapshots:  # the last snapshot holds (nearly) every finished row: share them
            self._snapshot(len(self.snapshots) - 1)
        try:
            self._lay_marks()
        except (ValueError, FrameError):
            if not self._closed:  # closed under it (the app quit): nothing to report
                raise

    def _lay_marks(self) -> None:
        """An in-memory checkpoint every MARK_SPACING_NS between the seek snapshots, so that a
        seek folds at most that much before its window (late in a long run snapshots are over
        two minutes apart). Folding there skips the memory samples undecoded, so this costs
        about one decode of the file's other events, once."""
        for j in range(len(self.snapshots) - 1):
            begin, end = self._snap_times[j], self._snap_times[j + 1]
            if end - begin < 2 * MARK_SPACING_NS:
                continue
            if self._closed:
                return
            state, offset = self._state_from_snapshot(j)
            for cut in range(begin + MARK_SPACING_NS, end - MARK_SPACING_NS // 2, MARK_SPACING_NS):
                offset = self._fold_before(state, offset, cut)
                self._take_mark(state, offset)

    def build_checkpoints(self, *args: Any, **kwargs: Any) -> None:
        self.prepare()

    def next_point(self, position: int, forward: bool) -> int | None:
        return next_point(self.faults, self.markers, position, forward)

    def run(self, sink: Any) -> None:  # replay is driven by the app
        sink.status(self, "loaded", "info")

    def send(self, cmd: str, args: dict[str, Any]) -> int:
        raise SourceError("controls are not available in replay")

    def close(self) -> None:
        self._closed = True  # stops prepare() between intervals
        try:  # mapped in __init__, which closes the file itself when it fails before that
            self._mm.close()
        except BufferError:  # a decoded view still alive: the GC will close it
            pass
        self._file.close()


def _decode(payload: memoryview) -> dict[str, Any]:
    """One frame's map, with the bounds of provetop.recordings.framing but without its Python-level
    nesting walk, which would double the cost of a seek."""
    return decode_payload(payload, walk=False)


def _split_snapshot(payload: bytes) -> tuple[dict[str, Any], list[bytes]]:
    """A seek snapshot frame split into its state without ``partitions`` (decoded) and the
    encoded bytes of each partition row (skipped over, not decoded). Raises on any shape
    but ``{..., "state": {..., "partitions": [row, ...]}}`` with nothing after it."""
    unpacker = msgpack.Unpacker(max_buffer_size=max(len(payload), 1), **UNPACK_LIMITS)
    unpacker.feed(payload)
    frame: dict[str, Any] = {}
    rows: list[bytes] = []
    for _ in range(unpacker.read_map_header()):
        key = unpacker.unpack()
        if key != "state":
            frame[key] = unpacker.unpack()
            continue
        state: dict[str, Any] = {}
        for _ in range(unpacker.read_map_header()):
            name = unpacker.unpack()
            if name != "partitions":
                state[name] = unpacker.unpack()
                continue
            rows = []
            for _ in range(unpacker.read_array_header()):
                start = unpacker.tell()
                unpacker.skip()
                rows.append(payload[start : unpacker.tell()])
        frame[key] = state
    if unpacker.tell() != len(payload) or not isinstance(frame.get("state"), dict):
        raise FrameError("not a seek snapshot of the expected shape")
    if frame.get("k") != "snapshot":
        raise FrameError("not a snapshot")
    return frame["state"], rows


def open_replay(path: str | os.PathLike[str]) -> FileReplaySource | ReplaySource:
    """The fastest way to replay ``path``: lazily when it has an index, else fully read."""
    try:
        return FileReplaySource(path)
    except NotIndexed:
        return ReplaySource.open(path)
