"""NVML's utilisation, power, temperature... read field by field: what a GPU does not report is
left out of the ``gpu`` event, never an error; the modeled devices send no ``gpu`` event."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

import provetop.base.nvml as nvml_module
from provetop.base.errors import UsageError
from provetop.base.nvml import NvmlDevice, read_gpu, read_processes
from provetop.engine.devices.modeled import ModeledDevice
from provetop.engine.run.options import add_engine_arguments, config_from_args
from provetop.engine.telemetry.bus import Bus
from provetop.engine.telemetry.sampler import Sampler
from provetop.recordings.schema import GPU_FIELDS, validate


class NotSupported(Exception):
    pass


def fake_nvml(fan: bool = True, ecc: bool = True, processes=None):
    def unsupported(*args):
        raise NotSupported("NVML_ERROR_NOT_SUPPORTED")

    return SimpleNamespace(
        NVML_TEMPERATURE_GPU=0,
        NVML_CLOCK_SM=1,
        NVML_CLOCK_MEM=2,
        NVML_PCIE_UTIL_TX_BYTES=0,
        NVML_PCIE_UTIL_RX_BYTES=1,
        NVML_MEMORY_ERROR_TYPE_CORRECTED=0,
        NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1,
        NVML_VOLATILE_ECC=0,
        NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS=0,
        NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR=1,
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=93, memory=41),
        nvmlDeviceGetPowerUsage=lambda h: 655_123,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700_000,
        nvmlDeviceGetTemperature=lambda h, s: 64,
        nvmlDeviceGetClockInfo=lambda h, c: {1: 1980, 2: 2619}[c],
        nvmlDeviceGetPcieThroughput=lambda h, c: {0: 1000, 1: 24_000_000}[c],
        nvmlDeviceGetFanSpeed=(lambda h: 35) if fan else unsupported,
        nvmlDeviceGetTotalEccErrors=(lambda h, t, c: 3 * t) if ecc else unsupported,
        nvmlDeviceGetRetiredPages=(lambda h, cause: [1, 2][: cause + 1]) if ecc else unsupported,
        nvmlDeviceGetMemoryInfo=lambda h, v=None: SimpleNamespace(used=5, free=7, total=12),
        nvmlDeviceGetComputeRunningProcesses=(
            (lambda h: processes) if processes is not None else unsupported
        ),
    )


def test_every_field_of_a_gpu_that_reports_them():
    out = read_gpu(fake_nvml(processes=[]), object())
    assert set(out) == set(GPU_FIELDS) - {"xid_count", "xid_last"}  # no XID watch given
    assert out["mem_used"] == 5 and out["mem_total"] == 12
    assert out["power_mw"] == 655_123 and out["pcie_rx_bytes_s"] == 24_000_000 * 1024
    assert out["ecc_uncorrected"] == 3 and out["retired_pages"] == 3
    validate({"k": "gpu", "t": 0, "device": 0, **out})


def test_fields_a_gpu_does_not_report_are_absent():
    out = read_gpu(fake_nvml(fan=False, ecc=False), object())
    assert "fan_pct" not in out and "ecc_corrected" not in out and "retired_pages" not in out
    assert out["temp_c"] == 64
    assert read_gpu(None, object()) == {}
    broken = SimpleNamespace()  # an NVML without any of these functions
    assert read_gpu(broken, object()) == {}


def test_the_sampler_emits_gpu_only_for_devices_with_nvml():
    bus = Bus()
    sub = bus.subscribe("t")
    modeled = ModeledDevice(0, 1 << 30, 1 << 30)
    with_nvml = ModeledDevice(1, 1 << 30, 1 << 30)
    with_nvml.nvml = SimpleNamespace(gpu=lambda: {"temp_c": 50})  # type: ignore[attr-defined]
    failing = ModeledDevice(2, 1 << 30, 1 << 30)
    failing.nvml = SimpleNamespace(gpu=lambda: 1 / 0)  # type: ignore[attr-defined]
    Sampler(bus, [modeled, with_nvml, failing]).sample_gpu()
    bus.flush()
    gpu = [e for e in sub.drain() if e["k"] == "gpu"]
    bus.close()
    assert [(e["device"], e["temp_c"]) for e in gpu] == [(1, 50)]


def _proc(root: Path, pid: int, cmdline: bytes, comm: str = "") -> None:
    d = root / str(pid)
    d.mkdir()
    (d / "cmdline").write_bytes(cmdline)
    (d / "comm").write_text(comm + "\n")


def test_processes_with_user_and_command_from_proc(tmp_path):
    """A fake pynvml lists three processes: ours (readable in a fake /proc), a kernel-thread
    style one with an empty cmdline, and one from another PID namespace (not in /proc)."""
    _proc(tmp_path, 4242, b"python3\0-m\0provetop\0engine\0")
    _proc(tmp_path, 77, b"", comm="nv-worker")
    listed = [
        SimpleNamespace(pid=4242, usedGpuMemory=80 << 30),
        SimpleNamespace(pid=77, usedGpuMemory=None),  # NVML cannot say (no permission)
        SimpleNamespace(pid=991, usedGpuMemory=1 << 30),
    ]
    out = read_processes(fake_nvml(processes=listed), object(), proc=tmp_path)
    me = os.getuid()
    assert out is not None
    assert out[0]["pid"] == 4242 and out[0]["used"] == 80 << 30
    assert out[0]["command"] == "python3 -m provetop engine"
    assert out[0]["user"] and (out[0]["user"] == str(me) or not out[0]["user"].isdigit())
    assert out[1] == {"pid": 77, "user": out[0]["user"], "command": "nv-worker"}
    assert out[2] == {"pid": 991, "used": 1 << 30}
    event = {"k": "gpu", "t": 0, "device": 0, "processes": out}
    validate(event)


def test_processes_absent_when_nvml_cannot_list_them():
    assert read_processes(fake_nvml(), object()) is None
    assert "processes" not in read_gpu(fake_nvml(), object())
    assert read_gpu(fake_nvml(processes=[]), object())["processes"] == []


class _Ticks:
    """A stop event whose wait returns at once: ``n`` ticks, then stop."""

    def __init__(self, n: int) -> None:
        self.n = n

    def wait(self, timeout: float) -> bool:
        self.n -= 1
        return self.n < 0

    def set(self) -> None:
        self.n = 0


def test_the_nvml_interval_sets_the_gpu_sampling_rate():
    bus = Bus()
    sub = bus.subscribe("t")
    device = ModeledDevice(0, 1 << 30, 1 << 30)
    device.nvml = SimpleNamespace(gpu=lambda: {"temp_c": 50})  # type: ignore[attr-defined]
    sampler = Sampler(bus, [device], hz=10.0, nvml_interval=0.5)
    assert sampler.gpu_every == 5
    sampler._stop = _Ticks(20)  # type: ignore[assignment]
    sampler._run()
    bus.flush()
    kinds = [e["k"] for e in sub.drain()]
    bus.close()
    assert kinds.count("gpu") == 4 and kinds.count("counters") == 2 and kinds.count("memory") == 20
    assert Sampler(bus, [], hz=10.0, nvml_interval=0.01).gpu_every == 1  # at most every tick


def test_nvml_interval_flag_reaches_the_config_and_is_checked():
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    args = parser.parse_args(["--backend", "cpu", "--nvml-interval", "2.5"])
    config = config_from_args(args)
    assert config.nvml_interval == 2.5 and config.to_dict()["nvml_interval"] == 2.5
    assert config_from_args(parser.parse_args(["--backend", "cpu"])).nvml_interval == 1.0
    for bad in ("0", "-1", "7200"):
        with pytest.raises(UsageError, match="--nvml-interval must be above 0"):
            config_from_args(parser.parse_args(["--backend", "cpu", "--nvml-interval", bad]))


@pytest.mark.gpu
def test_gpu_reads_a_real_card(cp):
    """On a GPU machine: the figures of device 0 are in range and this process, holding device
    memory, is among the compute processes with its user and command (read from /proc)."""
    if nvml_module._nvml() is None:
        pytest.skip(f"NVML unavailable: {nvml_module.error()}")
    held = cp.zeros(64 << 20, dtype=cp.uint8)  # 64 MiB: puts this process on the GPU
    cp.cuda.Device(0).synchronize()
    bus_id = cp.cuda.Device(0).pci_bus_id
    out = NvmlDevice(pci_bus_id=bus_id).gpu()
    validate({"k": "gpu", "t": 0, "device": 0, **out})
    assert 0 <= out["sm_util_pct"] <= 100 and 0 <= out["mem_util_pct"] <= 100
    assert 0 < out["power_mw"] <= out["power_limit_mw"]
    assert 0 < out["temp_c"] < 100 and out["sm_clock_mhz"] > 0 and out["mem_clock_mhz"] > 0
    mine = [p for p in out["processes"] if p["pid"] == os.getpid()]
    if not mine:  # a PID namespace: NVML lists host pids
        pytest.skip(f"this pid {os.getpid()} is not among NVML's {out['processes']}")
    assert mine[0]["command"].split()[0].endswith(("python", "python3", "pytest")) or (
        "pytest" in mine[0]["command"]
    )
    print("NVML gpu sample:", {k: v for k, v in out.items() if k != "processes"})
    print("processes:", out["processes"])
    del held
