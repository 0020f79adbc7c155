"""Record what NVML reports for every local GPU, as JSON the tests replay through a fake pynvml.

Run on a GPU machine from the repository root::

    PYTHONPATH=. python tools/record_nvml.py tests/fixtures/nvml/NAME.json [--samples 6]

Why raw readings and not ``gpu`` events: the tests replay them through ``provetop.base.nvml``'s own
reading code (``tests/sources/fake_pynvml.py``), so the conversion (KB/s to bytes, ECC kinds,
retired pages, memory v2) is exercised as on a card. A reading NVML refuses is stored as null
and the fake raises "not supported" for it. XID events cannot be recorded on demand (one comes
only with a fault), so ``xids`` is left empty; tests add their own.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import pynvml as nv


def _try(fn, *args) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None


def _reading(handle) -> dict[str, Any]:
    util = _try(nv.nvmlDeviceGetUtilizationRates, handle)
    mem = _try(nv.nvmlDeviceGetMemoryInfo, handle, nv.nvmlMemory_v2)
    procs = _try(nv.nvmlDeviceGetComputeRunningProcesses, handle)
    sbe = _try(nv.nvmlDeviceGetRetiredPages, handle,
               nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)  # fmt: skip
    dbe = _try(nv.nvmlDeviceGetRetiredPages, handle,
               nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)  # fmt: skip
    ecc = nv.NVML_VOLATILE_ECC
    return {
        "util": None if util is None else [util.gpu, util.memory],
        "power_mw": _try(nv.nvmlDeviceGetPowerUsage, handle),
        "power_limit_mw": _try(nv.nvmlDeviceGetEnforcedPowerLimit, handle),
        "temp_c": _try(nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU),
        "sm_clock_mhz": _try(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM),
        "mem_clock_mhz": _try(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_MEM),
        "pcie_rx_kb_s": _try(nv.nvmlDeviceGetPcieThroughput, handle, nv.NVML_PCIE_UTIL_RX_BYTES),
        "pcie_tx_kb_s": _try(nv.nvmlDeviceGetPcieThroughput, handle, nv.NVML_PCIE_UTIL_TX_BYTES),
        "fan_pct": _try(nv.nvmlDeviceGetFanSpeed, handle),
        "ecc_corrected": _try(
            nv.nvmlDeviceGetTotalEccErrors, handle, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, ecc
        ),  # fmt: skip
        "ecc_uncorrected": _try(
            nv.nvmlDeviceGetTotalEccErrors, handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, ecc
        ),  # fmt: skip
        "retired_pages": None if sbe is None and dbe is None else [len(sbe or ()), len(dbe or ())],
        "memory": None if mem is None else [mem.used, mem.free, mem.total],
        "processes": None if procs is None else [[p.pid, p.usedGpuMemory] for p in procs],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--samples", type=int, default=6)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    nv.nvmlInit()
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
    devices = []
    for h in handles:
        name = nv.nvmlDeviceGetName(h)
        bus = nv.nvmlDeviceGetPciInfo(h).busId
        devices.append({
            "name": name.decode() if isinstance(name, bytes) else name,
            "pci_bus_id": bus.decode() if isinstance(bus, bytes) else bus,
            "xid_events": _try(nv.nvmlDeviceGetSupportedEventTypes, h),
        })  # fmt: skip
    samples = []
    for _ in range(args.samples):
        samples.append([_reading(h) for h in handles])
        time.sleep(args.interval)
    driver = nv.nvmlSystemGetDriverVersion()
    record = {
        "label": f"recorded with tools/record_nvml.py on {time.strftime('%Y-%m-%d')}",
        "driver": driver.decode() if isinstance(driver, bytes) else driver,
        "devices": devices,
        "samples": samples,
        "xids": [],
    }
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
    print(f"{len(samples)} samples of {len(devices)} GPUs in {args.out}")


if __name__ == "__main__":
    main()
