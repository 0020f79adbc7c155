"""Turn a traced program's records into provetop's telemetry events: the same ``memory``,
``alloc`` and ``fault`` events the engine emits (``recordings/schema.py``), so the reducer,
the dashboard, recordings and the exporters take a traced program as they take the engine.

What the library can see from outside and what it cannot, field by field of ``memory``
(MEMORY_FIELDS):

- ``async_used`` / ``async_reserved`` / ``async_high``: the device's stream-ordered pools'
  USED_MEM_CURRENT / RESERVED_MEM_CURRENT / RESERVED_MEM_HIGH, summed over every pool known on
  the device (its default pool, its current pool, the pools the program made). With one pool
  (the usual case) ``async_high`` is that pool's watermark; with several, the sum of their
  watermarks, an upper bound of the sum's peak.
- ``sync_used``: every byte of plain device memory the program holds (cuMemAlloc and
  cuMemAllocPitch not yet freed, plus VMM physical memory, cuMemCreate not yet released). A
  caching allocator's cached blocks (CuPy's MemoryPool, PyTorch's caching allocator) are
  allocated as far as the driver knows, so they count here.
- ``sync_cached``: not observable from outside (the cache is the program's bookkeeping): 0,
  and named in ``unobserved``. The phantom the reducer derives is then the stream-ordered part
  alone.
- ``ballast``: a provetop engine's own device (``--device-memory``); a traced program has none
  that the library could tell from any other cudaMalloc: 0, and named in ``unobserved``.
- ``pinned_host``: the process's pinned host memory (cuMemHostRegister, cuMemHostAlloc,
  cuMemAllocHost), the same figure in every device's sample (host memory belongs to none).
- ``driver_free`` / ``driver_total``: cuMemGetInfo on a context of the program's.
- the NVML fields: not the library's to read (the trace command samples NVML itself).

Extra fields (consumers ignore fields they do not know): ``pid``, ``plain`` (cuMemAlloc
bytes), ``vmm``, ``managed``, ``async_used_high`` (the engine's name for USED_MEM_HIGH, summed),
``async_pools`` (each pool: handle, reserved, used, watermarks, release threshold, whether it is
the default/current/created one), ``dropped`` (records the ring had no room for),
``unobserved``.

Not every record becomes an event: frees and small allocations only move the figures of the
next sample. An ``alloc`` event is made for an allocation of at least ``alloc_min`` bytes
(:data:`ALLOC_EVENT_MIN`), and for a program's own cuMemPoolTrimTo (decision ``trim``). An
allocation that returned CUDA_ERROR_OUT_OF_MEMORY is a ``fault`` of kind ``oom`` with the
device's memory read at that instant in ``pools`` and the stream-ordered pools'
reserved-but-unused bytes in ``phantom``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from provetop.base.units import fmt_bytes
from provetop.recordings.schema import make
from provetop.sources.trace.heal import verdict
from provetop.sources.trace.records import (
    API_ALLOCATOR,
    CUPTI_RESULTS,
    HEAL_ALLOC,
    HEAL_ASKED,
    KIND_ALLOC,
    KIND_DEVICE,
    KIND_EXIT,
    KIND_HEAL,
    KIND_HEAL_REQUEST,
    KIND_OOM_STATE,
    KIND_POOL_TRIM,
    KIND_SAMPLE,
    KIND_STATUS,
    POOL_CREATED,
    POOL_CURRENT,
    POOL_DEFAULT,
    STATUS_NO_CUPTI,
    STATUS_NO_DRIVER,
    STATUS_NO_SOCKET,
    STATUS_RING_FULL,
    DeviceState,
    Grouper,
    Header,
    Oom,
    Record,
)

# The smallest allocation that becomes an ``alloc`` event. Why a floor: allocation loops are
# common (a cudaMallocAsync/free pair per microsecond in a stream-ordered program), and an
# event each would grow a recording by ~100 bytes per microsecond; every allocation still moves
# the next ``memory`` sample. Why 64 MiB: at most ~1,200 such blocks fit on an 80 GB card at
# once, so a program can emit them no faster than it fills and empties the card, and the
# buffers the engine itself reports (pre-stage, H slots, MSM scratch at 2^20 points and up)
# are all above it.
ALLOC_EVENT_MIN = 64 << 20
# MEMORY_FIELDS whose value a trace cannot know (module docstring): sent as 0 and named so.
UNOBSERVED = ("sync_cached", "ballast")
# proof, partition and worker of an event that belongs to the run, not to a partition: the
# engine's own convention (its 'plan' and 'srs' alloc events)
_RUN_IDS = {"proof": -1, "partition": -1, "worker": -1}


@dataclass(frozen=True)
class DeviceInfo:
    """A device as a traced process's DEVICE record names it: what NVML's devices are matched
    with (CUDA ordinals follow the process's CUDA_VISIBLE_DEVICES, NVML's indices do not)."""

    ordinal: int  # the CUDA device ordinal inside the traced process
    pci_bus_id: str  # NVML's form, "00000000:BB:DD.0"; "" when the driver did not say
    uuid: str  # NVML's form, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"; "" when unknown
    total: int  # bytes (cuDeviceTotalMem)

    @classmethod
    def of(cls, r: Record) -> DeviceInfo:
        domain, bus, dev, lo, hi, total = r.v[:6]
        raw = lo.to_bytes(8, "little") + hi.to_bytes(8, "little")
        uuid = ""
        if any(raw):
            h = raw.hex()
            uuid = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        pci = f"{domain:08X}:{bus:02X}:{dev:02X}.0" if (domain or bus or dev) else ""
        return cls(r.device, pci, uuid, total)


class Lanes(Protocol):
    """Where a traced process's device goes in the events: the ``device`` index of its
    ``memory``, ``alloc`` and ``fault`` events. Several processes may share one GPU, and the
    reducer keeps one memory picture per index, so each (process, device) gets a lane of its
    own (``provetop.trace.lanes``); one process alone keeps its CUDA ordinals."""

    def see(self, pid: int, info: DeviceInfo) -> None: ...

    def lane(self, pid: int, ordinal: int) -> int: ...


class OwnOrdinals:
    """The lanes of one process read alone (a stream file): its CUDA ordinals."""

    def see(self, pid: int, info: DeviceInfo) -> None:
        pass

    def lane(self, pid: int, ordinal: int) -> int:
        return ordinal


def memory_fields(state: DeviceState) -> dict[str, Any]:
    """The MEMORY_FIELDS of one device's state (a sample or the instant of an OOM), with the
    trace's extra fields: what a ``memory`` event carries (less ``device``) and what a
    ``fault``'s ``pools`` holds."""
    pools = state.pools
    return {
        "sync_used": state.plain + state.vmm,
        "sync_cached": 0,
        "async_used": sum(p.used for p in pools),
        "async_reserved": sum(p.reserved for p in pools),
        "async_high": sum(p.reserved_high for p in pools),
        "pinned_host": state.pinned_host,
        "ballast": 0,
        "driver_free": state.driver_free,
        "driver_total": state.driver_total,
        "modeled": False,
        "plain": state.plain,
        "vmm": state.vmm,
        "managed": state.managed,
        "async_used_high": sum(p.used_high for p in pools),
        "async_pools": [
            {
                "pool": f"{p.handle:#x}",
                "reserved": p.reserved,
                "used": p.used,
                "reserved_high": p.reserved_high,
                "used_high": p.used_high,
                "release_threshold": p.threshold,
                "default": bool(p.flags & POOL_DEFAULT),
                "current": bool(p.flags & POOL_CURRENT),
                "created": bool(p.flags & POOL_CREATED),
            }
            for p in pools
        ],
        "dropped": state.dropped,
        "unobserved": list(UNOBSERVED),
    }


class TraceEvents:
    """One traced process's records to schema events, in order.

    ``origin_ns`` is the CLOCK_MONOTONIC instant that is ``t = 0`` of the events (the records'
    clock is the host's monotonic clock, shared by every process on it, so several traced
    processes can share one origin); default: the library's start in this process
    (``header.t0_mono_ns``, whose wall-clock twin is ``header.t0_wall_ns``)."""

    def __init__(
        self,
        header: Header,
        *,
        origin_ns: int | None = None,
        alloc_min: int = ALLOC_EVENT_MIN,
        lanes: Lanes | None = None,
    ) -> None:
        self.header = header
        self.lanes: Lanes = lanes if lanes is not None else OwnOrdinals()
        self.devices: dict[int, DeviceInfo] = {}
        # the library's requests for other processes' memory (KIND_HEAL_REQUEST), in order,
        # for the trace command to act on (take_requests)
        self.requests: list[Record] = []
        # the newest memory picture of each CUDA ordinal: its pools' unused bytes are what a
        # heal request from another process may reclaim here
        self.latest: dict[int, DeviceState] = {}
        self.origin_ns = header.t0_mono_ns if origin_ns is None else origin_ns
        self.alloc_min = alloc_min
        self.exited = False
        self.dropped = 0
        self.ooms = 0
        self._grouper = Grouper()

    def feed(self, records: Iterable[Record]) -> list[dict[str, Any]]:
        """The events the records complete (a group still open waits for its last record)."""
        return self._events(self._grouper.push(records))

    def close(self) -> list[dict[str, Any]]:
        """The events of a group the stream ended inside (a killed program)."""
        return self._events(self._grouper.close())

    def _t(self, t_ns: int) -> int:
        return max(0, t_ns - self.origin_ns)

    def _lane(self, ordinal: int) -> int:
        return self.lanes.lane(self.header.pid, ordinal) if ordinal >= 0 else ordinal

    def take_requests(self) -> list[Record]:
        """The heal requests read since the last call."""
        out, self.requests = self.requests, []
        return out

    def unused(self, ordinal: int) -> int:
        """The reserved-but-unused bytes of ``ordinal``'s pools at the newest sample."""
        state = self.latest.get(ordinal)
        return state.pool_unused if state is not None else 0

    def ordinal_of(self, pci_bus_id: str) -> int | None:
        """The CUDA ordinal this process gives the device at ``pci_bus_id``, if it uses it."""
        return next((o for o, d in self.devices.items() if d.pci_bus_id == pci_bus_id), None)

    def _events(self, items: Iterable[Record | DeviceState | Oom]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for item in items:
            if isinstance(item, DeviceState):
                ev = self._memory(item)
            elif isinstance(item, Oom):
                ev = self._oom(item)
            else:
                ev = self._record(item)
            if ev is not None:
                out.append(ev)
        return out

    def _memory(self, state: DeviceState) -> dict[str, Any] | None:
        self.dropped = max(self.dropped, state.dropped)
        if state.record.kind != KIND_SAMPLE or state.device < 0 or not state.complete:
            return None  # a cut-short group: its sums would be wrong
        self.latest[state.device] = state
        return make(
            "memory",
            self._t(state.t_ns),
            device=self._lane(state.device),
            cuda_device=state.device,
            pid=self.header.pid,
            **memory_fields(state),
        )

    def _oom(self, oom: Oom) -> dict[str, Any]:
        self.ooms += 1
        a = oom.alloc
        allocator = API_ALLOCATOR.get(a.api, "sync")
        fields: dict[str, Any] = {
            "site": a.api_name,
            "requested": a.v[1],
            "pid": self.header.pid,
            "tid": a.tid,
            "allocator": allocator,
            "result": a.result,
        }
        if a.device >= 0:
            fields["device"] = self._lane(a.device)
            fields["cuda_device"] = a.device
        state = (
            oom.state if oom.state is not None and oom.state.record.kind == KIND_OOM_STATE else None
        )
        if state is not None:
            self.dropped = max(self.dropped, state.dropped)
            phantom = state.pool_unused
            fields["pools"] = memory_fields(state)
            fields["phantom"] = phantom
            if allocator == "async":
                why = f"the stream-ordered pools hold {fmt_bytes(phantom)} reserved and unused"
            else:
                v = verdict(a.v[1], state.driver_free, phantom)
                fields["case"] = v.case
                why = v.words()  # the log line adds the phantom and the free bytes
        else:
            why = "the device's memory was not read (the ring had no room for it)"
        message = f"{a.api_name} of {fmt_bytes(a.v[1])} refused (out of memory): {why}"
        return make("fault", self._t(a.t_ns), kind="oom", message=message, **fields)

    def _record(self, r: Record) -> dict[str, Any] | None:
        if r.kind == KIND_EXIT:
            self.exited = True
            self.dropped = max(self.dropped, r.v[6])
            return None
        if r.kind == KIND_STATUS:
            return self._status(r)
        if r.kind == KIND_DEVICE:
            info = DeviceInfo.of(r)
            self.devices[r.device] = info
            self.lanes.see(self.header.pid, info)
            return None
        if r.kind == KIND_HEAL:
            return self._heal(r)
        if r.kind == KIND_HEAL_REQUEST:
            self.requests.append(r)
            return None
        if r.kind == KIND_POOL_TRIM and r.result == 0:
            return make(
                "alloc",
                self._t(r.t_ns),
                **_RUN_IDS,
                device=self._lane(r.device),
                site=r.api_name,
                pool="async",
                requested=r.v[1],
                decision="trim",
                reason=f"the program trimmed pool {r.v[0]:#x} to keep {fmt_bytes(r.v[1])}",
                pid=self.header.pid,
            )
        if r.kind == KIND_ALLOC and r.result == 0 and r.v[1] >= self.alloc_min:
            return make(
                "alloc",
                self._t(r.t_ns),
                **_RUN_IDS,
                device=self._lane(r.device),
                site=r.api_name,
                pool=API_ALLOCATOR.get(r.api, "sync"),
                requested=r.v[1],
                decision="ok",
                pid=self.header.pid,
                ptr=f"{r.v[0]:#x}",
            )
        return None

    def _heal(self, r: Record) -> dict[str, Any]:
        """A trim the library made: before a plain allocation (``--heal``) or on a command
        (the operator's ``trim``, or another traced process's heal request)."""
        asked, before, after, unused, took_ns, cid, pools = r.v
        reclaimed = max(0, after - before)
        took = f"{took_ns / 1e6:.2f} ms"
        if r.flags & HEAL_ALLOC:
            site = "heal"
            why = (
                f"before a {r.api_name} of {fmt_bytes(asked)} with {fmt_bytes(before)} free: "
                f"trimmed {pools} pool(s) holding {fmt_bytes(unused)} unused, "
                f"reclaimed {fmt_bytes(reclaimed)} in {took}"
            )
            if r.flags & HEAL_ASKED:
                why += "; not enough alone, the other traced processes were asked"
        else:
            site = "trim"
            why = (
                f"trim on request: {pools} pool(s) holding {fmt_bytes(unused)} unused, "
                f"reclaimed {fmt_bytes(reclaimed)} in {took}"
            )
        return make(
            "alloc",
            self._t(r.t_ns),
            **_RUN_IDS,
            device=self._lane(r.device),
            cuda_device=r.device,
            site=site,
            pool="async",
            requested=asked or unused,
            decision="trim",
            reason=why,
            free=before,
            reclaimed=reclaimed,
            took_ns=took_ns,
            command_id=cid,
            result=r.result,
            pid=self.header.pid,
        )

    def _status(self, r: Record) -> dict[str, Any] | None:
        code, detail = r.v[0], r.v[1]
        if code == STATUS_NO_CUPTI:
            why = CUPTI_RESULTS.get(detail, f"CUptiResult {detail}")
            message = f"trace: CUPTI refused the library's callbacks: {why}; nothing is traced"
        elif code == STATUS_NO_DRIVER:
            message = "trace: the driver's memory entry points were not found; nothing is traced"
        elif code == STATUS_NO_SOCKET:
            message = f"trace: the library could not connect to the trace (errno {detail})"
        elif code == STATUS_RING_FULL:
            message = (
                f"trace: the record ring ({detail} slots) was full: records are being dropped "
                "(the samples stay right; allocation events are missing)"
            )
        else:
            return None
        return make("fault", self._t(r.t_ns), kind="source", message=message, pid=self.header.pid)
