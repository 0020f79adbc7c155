"""NVML, the "nvidia-smi view" of a device, read failure-tolerantly.

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
from pathlib import Path
from typing import Any

PROC = Path("/proc")
_lock = threading.Lock()
_state: dict[str, Any] = {"init": None, "error": None}


def _nvml() -> Any | None:
    """The initialised ``pynvml`` module, or None (the reason is kept in :func:`error`)."""
    with _lock:
        if _state["init"] is not None:
            return _state["init"] or None
        try:
            import pynvml

            pynvml.nvmlInit()
            _state["init"] = pynvml
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, ...
            _state["init"] = False
            _state["error"] = f"{type(exc).__name__}: {exc}"
        return _state["init"] or None


def error() -> str | None:
    """Why NVML is unavailable (None when it works or was never asked)."""
    return _state["error"]


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
        """The ``gpu`` event's fields (``recordings.schema.GPU_FIELDS``) this GPU reports now;
        each is read on its own, and one the GPU or driver does not support is left out."""
        if self.handle is None:
            return {}
        return read_gpu(_nvml(), self.handle)


def _read(nv: Any, name: str, *args: Any) -> Any:
    """``nv.name(*args)``, or None when this NVML lacks the function or the GPU the field."""
    fn = getattr(nv, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported, NoPermission, an old driver's missing symbol
        return None


def read_gpu(nv: Any, handle: Any) -> dict[str, int]:
    """Utilisation, power, temperature, clocks, PCIe throughput, fan, ECC and retired pages of
    one device, as far as it reports them (see :meth:`NvmlDevice.gpu`)."""
    out: dict[str, int] = {}
    if nv is None:
        return out
    util = _read(nv, "nvmlDeviceGetUtilizationRates", handle)
    if util is not None:
        out["sm_util_pct"], out["mem_util_pct"] = int(util.gpu), int(util.memory)
    reads = {
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
    processes = read_processes(nv, handle)
    if processes is not None:
        out["processes"] = processes
    return out


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
    """Forget the initialisation (tests swap the ``pynvml`` module)."""
    with _lock:
        _state["init"] = None
        _state["error"] = None
