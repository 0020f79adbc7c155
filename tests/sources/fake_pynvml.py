"""A stand-in ``pynvml`` that replays recorded NVML readings (``tests/fixtures/nvml/*.json``,
the format ``tools/record_nvml.py`` writes), for the tests of ``provetop top`` without a GPU.

What it returns is replayed, never read from a card: each device steps to its next recorded
reading when its utilisation is read (the first field ``provetop.base.nvml.read_gpu`` asks for), and
stays on the last one. A reading recorded as null raises "not supported", as NVML does. XID
events are queued by the test (:meth:`FakeNvml.xid`) and delivered by ``nvmlEventSetWait_v2``.
"""

from __future__ import annotations

import json
import queue
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvml"
H200X2 = FIXTURES / "h200x2-recorded-style.json"


class NVMLError(Exception):
    def __init__(self, value: int, text: str) -> None:
        super().__init__(text)
        self.value = value


NOT_SUPPORTED, TIMEOUT = 3, 10


class FakeNvml(types.ModuleType):
    """The module; install with :meth:`install` (monkeypatching ``sys.modules['pynvml']``)."""

    NVML_ERROR_NOT_SUPPORTED = NOT_SUPPORTED
    NVML_ERROR_TIMEOUT = TIMEOUT
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    nvmlEventTypeXidCriticalError = 8
    nvmlMemory_v2 = 0x2000028
    NVMLError = NVMLError

    def __init__(self, record: dict[str, Any] | Path = H200X2) -> None:
        super().__init__("pynvml")
        if isinstance(record, Path):
            record = json.loads(record.read_text())
        self.record = record
        self.devices = record["devices"]
        self.handles = [SimpleNamespace(index=i) for i in range(len(self.devices))]
        self.cursor = [-1] * len(self.devices)
        self.registered: set[int] = set()
        self.events: queue.Queue = queue.Queue()
        self.freed = False

    # -- test side ------------------------------------------------------------------------------

    def install(self, monkeypatch) -> FakeNvml:
        monkeypatch.setitem(sys.modules, "pynvml", self)
        return self

    def xid(self, device: int, code: int) -> None:
        """Queue one XID critical error event on ``device``."""
        self.events.put(SimpleNamespace(device=self.handles[device], eventType=8, eventData=code))

    # -- pynvml ---------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.record["driver"]

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return self.handles[index]

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return handle.index

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self.devices[handle.index]["name"]

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return SimpleNamespace(busId=self.devices[handle.index]["pci_bus_id"])

    def _now(self, handle: Any, key: str) -> Any:
        samples = self.record["samples"]
        i = min(max(0, self.cursor[handle.index]), len(samples) - 1)
        value = samples[i][handle.index].get(key)
        if value is None:
            raise NVMLError(NOT_SUPPORTED, "Not Supported")
        return value

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        self.cursor[handle.index] += 1
        gpu, memory = self._now(handle, "util")
        return SimpleNamespace(gpu=gpu, memory=memory)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self._now(handle, "power_mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return self._now(handle, "power_limit_mw")

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return self._now(handle, "temp_c")

    def nvmlDeviceGetClockInfo(self, handle: Any, clock: int) -> int:
        return self._now(handle, "sm_clock_mhz" if clock == 1 else "mem_clock_mhz")

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int:
        return self._now(handle, "pcie_rx_kb_s" if counter == 1 else "pcie_tx_kb_s")

    def nvmlDeviceGetFanSpeed(self, handle: Any) -> int:
        return self._now(handle, "fan_pct")

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, kind: int, counter: int) -> int:
        return self._now(handle, "ecc_uncorrected" if kind else "ecc_corrected")

    def nvmlDeviceGetRetiredPages(self, handle: Any, cause: int) -> list[int]:
        return list(range(self._now(handle, "retired_pages")[cause]))

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        used, free, total = self._now(handle, "memory")
        return SimpleNamespace(used=used, free=free, total=total)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        return [SimpleNamespace(pid=p, usedGpuMemory=u) for p, u in self._now(handle, "processes")]

    def nvmlEventSetCreate(self) -> Any:
        return object()

    def nvmlDeviceRegisterEvents(self, handle: Any, kinds: int, event_set: Any) -> None:
        if not (self.devices[handle.index].get("xid_events") or 0) & kinds:
            raise NVMLError(NOT_SUPPORTED, "Not Supported")
        self.registered.add(handle.index)

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        try:
            return self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise NVMLError(TIMEOUT, "Timeout") from None

    def nvmlEventSetFree(self, event_set: Any) -> None:
        self.freed = True


class MissingNvml(types.ModuleType):
    """A ``pynvml`` whose library is not there (a machine without the NVIDIA driver)."""

    def __init__(self) -> None:
        super().__init__("pynvml")

    def nvmlInit(self) -> None:
        raise NVMLError(12, "NVML Shared Library Not Found")

    def install(self, monkeypatch) -> MissingNvml:
        monkeypatch.setitem(sys.modules, "pynvml", self)
        return self
