"""Decode the injection library's record stream: the Python side of
``kernels/cuda/src/inject/records.h``.

Why a mirror and not a parser of the header at run time: the header is C, shipped as package
data of ``kernels`` (which ``sources`` may not import), and the stream has to decode where no
CUDA source is installed (a file copied off the GPU machine). So the constants are written out
here once, and ``tests/sources/test_trace_records.py`` parses ``records.h`` and fails when the
two disagree. ``docs/trace-records.md`` describes the layout in words.

Reading is incremental (:class:`StreamDecoder`): the stream usually arrives through a FIFO in
reads of any size, and a stream cut mid-record (the traced program was killed) decodes up to its
last whole record, flagged as truncated. :class:`Grouper` puts the records that belong together
back together: a SAMPLE or OOM_STATE record and the POOL records after it, an out-of-memory
ALLOC and its OOM_STATE.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"PVTRACE1"
MAGIC_SIZE = 8
VERSION = 2
HEADER_SIZE = 64
RECORD_SIZE = 80
VALUES = 7

KIND_ALLOC = 1
KIND_FREE = 2
KIND_POOL_CREATE = 3
KIND_POOL_DESTROY = 4
KIND_POOL_TRIM = 5
KIND_POOL_SET_ATTR = 6
KIND_SAMPLE = 7
KIND_OOM_STATE = 8
KIND_POOL = 9
KIND_EXIT = 10
KIND_STATUS = 11
KIND_DEVICE = 12
KIND_HEAL = 13
KIND_HEAL_REQUEST = 14

HEAL_ALLOC = 1
HEAL_COMMAND = 2
HEAL_ASKED = 4

POOL_DEFAULT = 1
POOL_CURRENT = 2
POOL_CREATED = 4

STATUS_SUBSCRIBED = 1
STATUS_NO_CUPTI = 2
STATUS_NO_DRIVER = 3
STATUS_RING_FULL = 4
STATUS_NO_SOCKET = 5

# commands, the reader to the library (struct PvtCommand)
COMMAND_SIZE = 32
OP_TRIM = 1
OP_HEAL_DONE = 2

API_SAMPLER = 0
API_MEM_ALLOC = 1
API_MEM_ALLOC_PITCH = 2
API_MEM_FREE = 3
API_MEM_ALLOC_MANAGED = 4
API_MEM_ALLOC_ASYNC = 5
API_MEM_ALLOC_ASYNC_PTSZ = 6
API_MEM_FREE_ASYNC = 7
API_MEM_FREE_ASYNC_PTSZ = 8
API_MEM_ALLOC_FROM_POOL = 9
API_MEM_ALLOC_FROM_POOL_PTSZ = 10
API_MEM_POOL_CREATE = 11
API_MEM_POOL_DESTROY = 12
API_MEM_POOL_TRIM_TO = 13
API_MEM_POOL_SET_ATTR = 14
API_MEM_HOST_REGISTER = 15
API_MEM_HOST_UNREGISTER = 16
API_MEM_HOST_ALLOC = 17
API_MEM_ALLOC_HOST = 18
API_MEM_FREE_HOST = 19
API_MEM_CREATE = 20
API_MEM_RELEASE = 21

CUDA_SUCCESS = 0
CUDA_ERROR_OUT_OF_MEMORY = 2

# The driver call behind each api number, and the allocator it belongs to: 'sync' (plain
# device memory, cuMemAlloc), 'async' (a stream-ordered pool), 'host' (pinned host memory),
# 'managed', 'vmm' (physical memory of the virtual memory management calls).
API_NAMES: dict[int, str] = {
    API_SAMPLER: "sampler",
    API_MEM_ALLOC: "cuMemAlloc_v2",
    API_MEM_ALLOC_PITCH: "cuMemAllocPitch_v2",
    API_MEM_FREE: "cuMemFree_v2",
    API_MEM_ALLOC_MANAGED: "cuMemAllocManaged",
    API_MEM_ALLOC_ASYNC: "cuMemAllocAsync",
    API_MEM_ALLOC_ASYNC_PTSZ: "cuMemAllocAsync_ptsz",
    API_MEM_FREE_ASYNC: "cuMemFreeAsync",
    API_MEM_FREE_ASYNC_PTSZ: "cuMemFreeAsync_ptsz",
    API_MEM_ALLOC_FROM_POOL: "cuMemAllocFromPoolAsync",
    API_MEM_ALLOC_FROM_POOL_PTSZ: "cuMemAllocFromPoolAsync_ptsz",
    API_MEM_POOL_CREATE: "cuMemPoolCreate",
    API_MEM_POOL_DESTROY: "cuMemPoolDestroy",
    API_MEM_POOL_TRIM_TO: "cuMemPoolTrimTo",
    API_MEM_POOL_SET_ATTR: "cuMemPoolSetAttribute",
    API_MEM_HOST_REGISTER: "cuMemHostRegister_v2",
    API_MEM_HOST_UNREGISTER: "cuMemHostUnregister",
    API_MEM_HOST_ALLOC: "cuMemHostAlloc",
    API_MEM_ALLOC_HOST: "cuMemAllocHost_v2",
    API_MEM_FREE_HOST: "cuMemFreeHost",
    API_MEM_CREATE: "cuMemCreate",
    API_MEM_RELEASE: "cuMemRelease",
}
API_ALLOCATOR: dict[int, str] = {
    API_MEM_ALLOC: "sync",
    API_MEM_ALLOC_PITCH: "sync",
    API_MEM_FREE: "sync",
    API_MEM_ALLOC_MANAGED: "managed",
    API_MEM_ALLOC_ASYNC: "async",
    API_MEM_ALLOC_ASYNC_PTSZ: "async",
    API_MEM_FREE_ASYNC: "async",
    API_MEM_FREE_ASYNC_PTSZ: "async",
    API_MEM_ALLOC_FROM_POOL: "async",
    API_MEM_ALLOC_FROM_POOL_PTSZ: "async",
    API_MEM_HOST_REGISTER: "host",
    API_MEM_HOST_UNREGISTER: "host",
    API_MEM_HOST_ALLOC: "host",
    API_MEM_ALLOC_HOST: "host",
    API_MEM_FREE_HOST: "host",
    API_MEM_CREATE: "vmm",
    API_MEM_RELEASE: "vmm",
}
# CUptiResult values a reader may meet in a STATUS record or the header
CUPTI_RESULTS: dict[int, str] = {
    0: "CUPTI_SUCCESS",
    39: "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (another tool, e.g. a profiler, "
    "already holds CUPTI in this process)",
}

# struct PvtHeader: magic[8], version, header_size, record_size, reserved0 (u16 each), pid,
# ppid (u32), t0_mono_ns, t0_wall_ns (u64), interval_ms, ring_slots, cupti_version (u32),
# cupti_result (i32), reserved1 (u64)
HEADER = struct.Struct("<8sHHHHIIQQIIIiQ")
# struct PvtRecord: t_ns (u64), kind, api (u16), device (i16), flags (u16), result (i32),
# tid (u32), v[7] (u64)
RECORD = struct.Struct(f"<QHHhHiI{VALUES}Q")
# struct PvtCommand: op (u32), device (i32), id, arg, reserved (u64)
COMMAND = struct.Struct("<IiQQQ")


class TraceFormatError(ValueError):
    """The bytes are not a record stream this version reads: the message says what was found."""


@dataclass(frozen=True)
class Header:
    version: int
    pid: int
    ppid: int
    t0_mono_ns: int
    t0_wall_ns: int
    interval_ms: int
    ring_slots: int
    cupti_version: int
    cupti_result: int

    @property
    def subscribed(self) -> bool:
        """True when CUPTI accepted the library's callbacks (otherwise only the header and a
        STATUS record come)."""
        return self.cupti_result == 0


@dataclass(frozen=True, slots=True)
class Record:
    t_ns: int
    kind: int
    api: int
    device: int
    flags: int
    result: int
    tid: int
    v: tuple[int, ...]

    @property
    def api_name(self) -> str:
        return API_NAMES.get(self.api, f"api {self.api}")

    @property
    def oom(self) -> bool:
        return self.kind == KIND_ALLOC and self.result == CUDA_ERROR_OUT_OF_MEMORY


def parse_header(data: bytes) -> Header:
    """The stream's header from its first :data:`HEADER_SIZE` bytes; :class:`TraceFormatError`
    for anything else than a stream of this version."""
    if len(data) < HEADER_SIZE:
        raise TraceFormatError(f"trace header cut short: {len(data)} of {HEADER_SIZE} bytes")
    magic, version, header_size, record_size, _, *rest = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise TraceFormatError(f"not a provetop trace stream: magic {magic!r}, not {MAGIC!r}")
    if version != VERSION:
        raise TraceFormatError(
            f"trace stream version {version}; this provetop reads version {VERSION} "
            "(rebuild the injection library with this provetop: python -m "
            "provetop.kernels.cuda.inject_build --force)"
        )
    if header_size != HEADER_SIZE or record_size != RECORD_SIZE:
        raise TraceFormatError(
            f"trace stream of version {version} with a {header_size}-byte header and "
            f"{record_size}-byte records; this version's are {HEADER_SIZE} and {RECORD_SIZE}"
        )
    pid, ppid, t0_mono, t0_wall, interval, slots, cupti_version, cupti_result, _ = rest
    return Header(
        version, pid, ppid, t0_mono, t0_wall, interval, slots, cupti_version, cupti_result
    )


def encode_header(header: Header) -> bytes:
    """The bytes of ``header`` (tests and tools that write a stream as the library does)."""
    h = header
    return HEADER.pack(
        MAGIC, h.version, HEADER_SIZE, RECORD_SIZE, 0, h.pid, h.ppid, h.t0_mono_ns,
        h.t0_wall_ns, h.interval_ms, h.ring_slots, h.cupti_version, h.cupti_result, 0,
    )  # fmt: skip


def encode_command(op: int, device: int = -1, id: int = 0, arg: int = 0) -> bytes:
    """One command for the library (``OP_TRIM``, ``OP_HEAL_DONE``), as its thread reads it."""
    return COMMAND.pack(op, device, id, arg, 0)


def encode_record(r: Record) -> bytes:
    """The bytes of one record (tests and tools)."""
    values = tuple(r.v) + (0,) * (VALUES - len(r.v))
    return RECORD.pack(r.t_ns, r.kind, r.api, r.device, r.flags, r.result, r.tid, *values)


class StreamDecoder:
    """Bytes in, records out, in reads of any size.

    ``header`` is None until the first :data:`HEADER_SIZE` bytes have come; a bad header raises
    :class:`TraceFormatError` from :meth:`feed`. ``pending`` counts the bytes held back (part of
    the header or of a record); at the end of the stream, a non-zero ``pending`` means the
    stream was cut short."""

    def __init__(self) -> None:
        self.header: Header | None = None
        self._buf = bytearray()
        self.records_read = 0

    @property
    def pending(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[Record]:
        self._buf += data
        if self.header is None:
            if len(self._buf) < HEADER_SIZE:
                if self._buf and not MAGIC.startswith(bytes(self._buf[:MAGIC_SIZE])):
                    parse_header(bytes(self._buf).ljust(HEADER_SIZE, b"\0"))  # raises: magic
                return []
            self.header = parse_header(bytes(self._buf[:HEADER_SIZE]))
            del self._buf[:HEADER_SIZE]
        whole = len(self._buf) - len(self._buf) % RECORD_SIZE
        if whole == 0:
            return []
        out = [
            Record(t, kind, api, dev, flags, res, tid, tuple(v))
            for t, kind, api, dev, flags, res, tid, *v in RECORD.iter_unpack(
                memoryview(self._buf)[:whole]
            )
        ]
        del self._buf[:whole]
        self.records_read += len(out)
        return out


@dataclass
class Stream:
    """A whole stream, read at once (:func:`decode`, :func:`read_file`)."""

    header: Header | None
    records: list[Record]
    truncated: bool  # the bytes ended inside the header or a record
    exited: bool  # an EXIT record came: the program ran its exit handlers

    @property
    def complete(self) -> bool:
        return self.exited and not self.truncated


def decode(data: bytes) -> Stream:
    """Every record of a stream held in memory."""
    dec = StreamDecoder()
    records = dec.feed(data)
    return Stream(dec.header, records, dec.pending > 0, any(r.kind == KIND_EXIT for r in records))


def read_file(path: str | Path) -> Stream:
    """Every record of a stream file (what a FIFO's reader saved, or a file the library wrote)."""
    return decode(Path(path).read_bytes())


# ---- groups -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolState:
    """One stream-ordered pool as a POOL record read it."""

    handle: int
    reserved: int
    reserved_high: int
    used: int
    used_high: int
    threshold: int
    flags: int
    result: int

    @classmethod
    def of(cls, r: Record) -> PoolState:
        return cls(r.v[0], r.v[1], r.v[2], r.v[3], r.v[4], r.v[5], r.flags, r.result)

    @property
    def unused(self) -> int:
        """Reserved but not in use: what a plain cuMemAlloc cannot get while the pool holds it."""
        return max(0, self.reserved - self.used)


@dataclass(frozen=True)
class DeviceState:
    """A SAMPLE or OOM_STATE record with its pools: one device's memory at one instant."""

    record: Record
    pools: tuple[PoolState, ...]
    complete: bool  # every POOL record the head announced came

    @property
    def device(self) -> int:
        return self.record.device

    @property
    def t_ns(self) -> int:
        return self.record.t_ns

    @property
    def driver_free(self) -> int:
        return self.record.v[0]

    @property
    def driver_total(self) -> int:
        return self.record.v[1]

    @property
    def plain(self) -> int:
        return self.record.v[2]

    @property
    def managed(self) -> int:
        return self.record.v[3]

    @property
    def vmm(self) -> int:
        return self.record.v[4]

    @property
    def pinned_host(self) -> int:
        return self.record.v[5]

    @property
    def dropped(self) -> int:
        return self.record.v[6]

    @property
    def pool_unused(self) -> int:
        """The stream-ordered pools' reserved-but-unused bytes, all pools of the device."""
        return sum(p.unused for p in self.pools)


@dataclass(frozen=True)
class Oom:
    """An allocation that returned CUDA_ERROR_OUT_OF_MEMORY, with the device's memory read on
    the failing thread at the call's exit (None when the group did not fit in the ring)."""

    alloc: Record
    state: DeviceState | None


Item = Record | DeviceState | Oom


class Grouper:
    """Records in, items out: POOL records folded into their SAMPLE/OOM_STATE head, an OOM
    ALLOC joined with its OOM_STATE; every other record passes through. The library writes a
    group as one block, so a group is open only until its last POOL record (or the end of the
    stream: :meth:`close` returns what was left open, marked incomplete)."""

    def __init__(self) -> None:
        self._head: Record | None = None
        self._pools: list[PoolState] = []
        self._oom: Record | None = None

    def push(self, records: Iterable[Record]) -> list[Item]:
        out: list[Item] = []
        for r in records:
            self._one(r, out)
        return out

    def close(self) -> list[Item]:
        out: list[Item] = []
        self._close_group(out, complete=False)
        if self._oom is not None:
            out.append(Oom(self._oom, None))
            self._oom = None
        return out

    def _one(self, r: Record, out: list[Item]) -> None:
        if self._head is not None:
            if r.kind == KIND_POOL:
                self._pools.append(PoolState.of(r))
                if len(self._pools) >= self._head.flags:
                    self._close_group(out, complete=True)
                return
            self._close_group(out, complete=False)  # not written by this library: be lenient
        if self._oom is not None and r.kind != KIND_OOM_STATE:
            out.append(Oom(self._oom, None))  # the group did not fit in the ring
            self._oom = None
        if r.kind in (KIND_SAMPLE, KIND_OOM_STATE):
            self._head, self._pools = r, []
            if r.flags == 0:
                self._close_group(out, complete=True)
        elif r.oom:
            self._oom = r
        else:  # a stray POOL record (not written by this library) passes through too
            out.append(r)

    def _close_group(self, out: list[Item], complete: bool) -> None:
        if self._head is None:
            return
        state = DeviceState(self._head, tuple(self._pools), complete)
        self._head, self._pools = None, []
        if state.record.kind == KIND_OOM_STATE and self._oom is not None:
            out.append(Oom(self._oom, state))
            self._oom = None
        else:
            out.append(state)
