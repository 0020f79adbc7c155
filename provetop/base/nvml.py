"""NVML, the "nvidia-smi view" of a device, read failure-tolerantly.

Why here, in a leaf module of the ``provetop`` package: two readers need the same reading, the
engine (its ``gpu`` events beside its own memory samples) and ``provetop top``'s source
(``sources/nvml.py``), and sources may not import the engine. This module imports nothing of
ours, so both layers may import it (``docs/architecture.md``).

Why a wrapper: the engine's memory samples carry NVML's figures next to the driver's and the
pools' (the dashboard shows where the three disagree), but NVML is optional. It may be missing
(no ``nvidia-ml-py``), refuse to initialise (no driver, a container without the library), or
not list this process (PID namespaces: NVML reports host PIDs). Every one of those cases must
leave the engine running with the NVML fields absent, never fail a partition.

Facts (``../shared/docs/cuda-memory.md``): the v2 memory structure matches what nvidia-smi
prints (v1 "used" includes the driver's reservation); per-process usage comes from
``nvmlDeviceGetComputeRunningProcesses``; CUDA ordinals and NVML indices differ under
``CUDA_VISIBLE_DEVICES``, so devices are matched by PCI bus id.
"""

from __future__ import annotations

import os
import pwd
import threading
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

PROC = Path("/proc")
_lock = threading.Lock()


@dataclass
class _State:
    """What this process knows of NVML: the initialised ``pynvml`` (False once it failed, None
    before the first try), why it failed, and the one XID watch."""

    init: ModuleType | Literal[False] | None = None
    error: str | None = None
    xids: XidWatch | None = None


_state = _State()


def _nvml() -> ModuleType | None:
    """The initialised ``pynvml`` module, or None (the reason is kept in :func:`error`)."""
    with _lock:
        if _state.init is not None:
            return _state.init or None
        try:
            import pynvml

            pynvml.nvmlInit()
            _state.init = pynvml
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, ...
            _state.init = False
            _state.error = f"{type(exc).__name__}: {exc}"
        return _state.init or None


def error() -> str | None:
    """Why NVML is unavailable (None when it works or was never asked)."""
    return _state.error


def module() -> ModuleType | None:
    """The initialised ``pynvml`` module, or None when NVML is unavailable (:func:`error` says
    why): what a reader that enumerates every local GPU starts from."""
    return _nvml()


def local_devices(nv: Any) -> list[dict[str, Any]]:
    """Every GPU NVML lists, by NVML index: ``index``, ``handle``, ``name``, ``capacity``
    (bytes) and ``pci_bus_id`` where NVML says; a device whose handle cannot be had is left
    out (NVML indices ignore ``CUDA_VISIBLE_DEVICES``: this is the machine's view)."""
    count = _read(nv, "nvmlDeviceGetCount")
    out: list[dict[str, Any]] = []
    for index in range(int(count or 0)):
        handle = _read(nv, "nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            continue
        entry: dict[str, Any] = {"index": index, "handle": handle}
        name = _read(nv, "nvmlDeviceGetName", handle)
        entry["name"] = name.decode() if isinstance(name, bytes) else str(name or "NVIDIA GPU")
        info = _read(nv, "nvmlDeviceGetMemoryInfo", handle)
        if info is not None:
            entry["capacity"] = int(info.total)
        pci = _read(nv, "nvmlDeviceGetPciInfo", handle)
        bus = getattr(pci, "busId", None)
        if bus is not None:
            entry["pci_bus_id"] = bus.decode() if isinstance(bus, bytes) else str(bus)
        out.append(entry)
    return out


def driver_version(nv: Any) -> str | None:
    """The driver's version string, or None."""
    value = _read(nv, "nvmlSystemGetDriverVersion")
    return value.decode() if isinstance(value, bytes) else (str(value) if value else None)


class NvmlDevice:
    """One device's NVML handle; :meth:`memory` never raises."""

    def __init__(self, pci_bus_id: str | None = None, index: int | None = None) -> None:
        self.handle: Any = None
        self.error: str | None = None
        nv = _nvml()
        if nv is None:
            self.error = error()
            return
        try:
            if pci_bus_id:
                self.handle = nv.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode())
            else:
                self.handle = nv.nvmlDeviceGetHandleByIndex(int(index or 0))
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def memory(self, pid: int | None = None) -> dict[str, int]:
        """``nvml_used``, ``nvml_free``, ``nvml_total`` (v2) and ``process_used`` (this
        process, when NVML lists it); keys are left out when NVML cannot say."""
        out: dict[str, int] = {}
        if self.handle is None:
            return out
        nv = _nvml()
        if nv is None:  # only after a reset() whose next initialisation failed
            self.error = error()
            return out
        try:
            info = nv.nvmlDeviceGetMemoryInfo(self.handle, version=nv.nvmlMemory_v2)
            out.update(nvml_used=int(info.used), nvml_free=int(info.free))
            out["nvml_total"] = int(info.total)
        except Exception:
            try:  # an older driver without the v2 structure: v1 (used includes the reservation)
                info = nv.nvmlDeviceGetMemoryInfo(self.handle)
                out.update(nvml_used=int(info.used), nvml_free=int(info.free))
                out["nvml_total"] = int(info.total)
            except Exception as exc:
                self.error = f"{type(exc).__name__}: {exc}"
        used = process_usage(nv, self.handle, os.getpid() if pid is None else pid)
        if used is not None:
            out["process_used"] = used
        return out

    def gpu(self) -> dict[str, int]:
        """The ``gpu`` event's fields (``provetop.recordings.schema.GPU_FIELDS``) this GPU reports
        now;
        each is read on its own, and one the GPU or driver does not support is left out. The
        XID counts come from the process's one :class:`XidWatch` (started at the first call)."""
        if self.handle is None:
            return {}
        nv = _nvml()
        index = _read(nv, "nvmlDeviceGetIndex", self.handle)
        xids = shared_xid_watch(nv) if isinstance(index, int) else None
        return read_gpu(nv, self.handle, xids, index if isinstance(index, int) else None)


def _read(nv: Any, name: str, *args: Any) -> Any:
    """``nv.name(*args)``, or None when this NVML lacks the function or the GPU the field."""
    fn = getattr(nv, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported, NoPermission, an old driver's missing symbol
        return None


def read_gpu(
    nv: Any, handle: Any, xids: XidWatch | None = None, index: int | None = None
) -> dict[str, Any]:
    """Utilisation, memory, power, temperature, clocks, PCIe throughput, fan, ECC, retired
    pages, XID counts (from ``xids``, for NVML index ``index``) and the compute processes of
    one device, as far as it reports them (see :meth:`NvmlDevice.gpu`)."""
    out: dict[str, Any] = {}
    if nv is None:
        return out
    util = _read(nv, "nvmlDeviceGetUtilizationRates", handle)
    if util is not None:
        out["sm_util_pct"], out["mem_util_pct"] = int(util.gpu), int(util.memory)
    reads: dict[str, tuple[str, *tuple[Any, ...]]] = {
        "power_mw": ("nvmlDeviceGetPowerUsage", handle),
        "power_limit_mw": ("nvmlDeviceGetEnforcedPowerLimit", handle),
        "temp_c": ("nvmlDeviceGetTemperature", handle, getattr(nv, "NVML_TEMPERATURE_GPU", 0)),
        "sm_clock_mhz": ("nvmlDeviceGetClockInfo", handle, getattr(nv, "NVML_CLOCK_SM", 1)),
        "mem_clock_mhz": ("nvmlDeviceGetClockInfo", handle, getattr(nv, "NVML_CLOCK_MEM", 2)),
        "fan_pct": ("nvmlDeviceGetFanSpeed", handle),
    }
    for key, (name, *args) in reads.items():
        value = _read(nv, name, *args)
        if isinstance(value, int | float):
            out[key] = int(value)
    for key, counter in (("pcie_rx_bytes_s", "NVML_PCIE_UTIL_RX_BYTES"),
                         ("pcie_tx_bytes_s", "NVML_PCIE_UTIL_TX_BYTES")):  # fmt: skip
        value = _read(nv, "nvmlDeviceGetPcieThroughput", handle, getattr(nv, counter, 1))
        if isinstance(value, int | float):
            out[key] = int(value) * 1024  # NVML reports KB/s
    for key, kind in (("ecc_corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED"),
                      ("ecc_uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED")):  # fmt: skip
        value = _read(
            nv,
            "nvmlDeviceGetTotalEccErrors",
            handle,
            getattr(nv, kind, 0 if key == "ecc_corrected" else 1),
            getattr(nv, "NVML_VOLATILE_ECC", 0),
        )
        if isinstance(value, int | float):
            out[key] = int(value)
    pages = 0
    seen = False
    for cause in ("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS",
                  "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"):  # fmt: skip
        if not hasattr(nv, cause):
            continue
        retired = _read(nv, "nvmlDeviceGetRetiredPages", handle, getattr(nv, cause))
        if retired is not None:
            pages += len(retired)
            seen = True
    if seen:
        out["retired_pages"] = pages
    memory = _read(nv, "nvmlDeviceGetMemoryInfo", handle, getattr(nv, "nvmlMemory_v2", None))
    if memory is None:  # an older driver without the v2 structure
        memory = _read(nv, "nvmlDeviceGetMemoryInfo", handle)
    if memory is not None:
        out["mem_used"], out["mem_total"] = int(memory.used), int(memory.total)
    if xids is not None and index is not None:
        out.update(xids.fields(index))
    processes = read_processes(nv, handle)
    if processes is not None:
        out["processes"] = processes
    return out


class XidWatch:
    """Counts the XID critical errors NVML reports, per device, on a thread of its own.

    Why a thread: NVML delivers XIDs as events (``nvmlDeviceRegisterEvents`` with
    ``nvmlEventTypeXidCriticalError``, then ``nvmlEventSetWait``), not as a counter to read;
    an XID between two samples is otherwise lost. The wait times out every ``wait_ms`` so
    :meth:`close` is seen. A device NVML refuses to register (a GPU or driver without the
    event, a container without the permission) has no count: :meth:`fields` gives nothing for
    it and the reader shows "n/a". The counts start at zero when the watch starts."""

    def __init__(self, nv: Any, handles: dict[int, Any], wait_ms: int = 500) -> None:
        self.nv = nv
        self.wait_ms = wait_ms
        self.counts: dict[int, int] = {}  # NVML index -> XIDs seen (registered devices only)
        self.last: dict[int, int] = {}  # NVML index -> the last XID code seen
        self.error: str | None = None
        self._by_handle: list[tuple[Any, int]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._set: Any = None
        kind = getattr(nv, "nvmlEventTypeXidCriticalError", None)
        try:
            if kind is None:
                raise RuntimeError("this NVML has no XID event type")
            self._set = nv.nvmlEventSetCreate()
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            return
        for index, handle in handles.items():
            try:
                nv.nvmlDeviceRegisterEvents(handle, kind, self._set)
            except Exception as exc:  # NotSupported: this device reports no XID events
                self.error = f"{type(exc).__name__}: {exc}"
                continue
            self.counts[index] = 0
            self._by_handle.append((handle, index))
        if self.counts:
            self._thread = threading.Thread(target=self._run, name="nvml-xid", daemon=True)
            self._thread.start()

    def _index_of(self, device: Any) -> int | None:
        for handle, index in self._by_handle:
            if handle is device:
                return index
        found = _read(self.nv, "nvmlDeviceGetIndex", device)
        return found if isinstance(found, int) else None

    def _run(self) -> None:
        nv = self.nv
        wait = getattr(nv, "nvmlEventSetWait_v2", None) or nv.nvmlEventSetWait
        timeout = getattr(nv, "NVML_ERROR_TIMEOUT", 10)
        while not self._stop.is_set():
            try:
                data = wait(self._set, self.wait_ms)
            except Exception as exc:
                if getattr(exc, "value", None) == timeout:
                    continue
                self.error = f"{type(exc).__name__}: {exc}"
                self._stop.wait(self.wait_ms / 1000)  # a broken wait must not spin
                continue
            index = self._index_of(getattr(data, "device", None))
            if index is None or index not in self.counts:
                continue
            with self._lock:
                self.counts[index] += 1
                code = getattr(data, "eventData", None)
                if isinstance(code, int):
                    self.last[index] = code

    def fields(self, index: int) -> dict[str, int]:
        """``xid_count`` (and ``xid_last`` once one was seen) of a registered device; empty
        for one NVML would not register (not supported)."""
        with self._lock:
            if index not in self.counts:
                return {}
            out = {"xid_count": self.counts[index]}
            if index in self.last:
                out["xid_last"] = self.last[index]
            return out

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.wait_ms / 1000 + 1)
        if self._set is not None:
            _read(self.nv, "nvmlEventSetFree", self._set)
            self._set = None


def shared_xid_watch(nv: Any) -> XidWatch | None:
    """The process's one XID watch over every local GPU (the engine's devices share it);
    None without NVML."""
    if nv is None:
        return None
    with _lock:
        watch = _state.xids
        if watch is None:
            handles = {d["index"]: d["handle"] for d in local_devices(nv)}
            watch = _state.xids = XidWatch(nv, handles)
        return watch


def read_processes(nv: Any, handle: Any, proc: Path = PROC) -> list[dict[str, Any]] | None:
    """The compute processes NVML lists on the device (pid, GPU memory) with their user and
    command from ``/proc`` where it lets us read them; None when NVML cannot list them.

    Why ``/proc`` and not NVML's process name: NVML gives only the executable, and an operator
    tells two Python workers apart by their command line. A pid from another PID namespace
    (a container) is usually not in our ``/proc``: it is listed without user and command."""
    try:
        listed = nv.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception:
        return None
    out: list[dict[str, Any]] = []
    for p in listed or ():
        pid = getattr(p, "pid", None)
        if not isinstance(pid, int):
            continue
        entry: dict[str, Any] = {"pid": pid}
        used = getattr(p, "usedGpuMemory", None)
        if isinstance(used, int) and used >= 0:  # NVML's "not available" is None or huge
            if used < 1 << 60:
                entry["used"] = used
        entry.update(_proc_info(proc, pid))
        out.append(entry)
    return out


def _proc_info(proc: Path, pid: int) -> dict[str, str]:
    """``user`` and ``command`` of a pid from ``/proc``; a key is left out when unreadable."""
    info: dict[str, str] = {}
    base = proc / str(pid)
    try:
        uid = base.stat().st_uid
        try:
            info["user"] = pwd.getpwuid(uid).pw_name
        except KeyError:  # a uid without a name (containers)
            info["user"] = str(uid)
    except OSError:
        return info
    try:
        raw = (base / "cmdline").read_bytes()
        command = raw.replace(b"\0", b" ").strip().decode(errors="replace")
        if not command:  # a kernel thread or a zombie: the short name instead
            command = (base / "comm").read_text(errors="replace").strip()
        if command:
            info["command"] = command
    except OSError:
        pass
    return info


def process_usage(nv: Any, handle: Any, pid: int) -> int | None:
    """This process's device memory as NVML lists it, or None when it is not listed (a PID
    namespace) or NVML cannot report it."""
    try:
        procs = nv.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception:
        return None
    for p in procs:
        if int(getattr(p, "pid", -1)) == pid:
            used = getattr(p, "usedGpuMemory", None)
            return int(used) if used is not None else None
    return None


def reset() -> None:
    """Forget the initialisation and stop the XID watch (tests swap the ``pynvml`` module)."""
    with _lock:
        watch, _state.xids = _state.xids, None
        _state.init = None
        _state.error = None
    if watch is not None:
        watch.close()
