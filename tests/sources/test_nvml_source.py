"""``provetop top``'s source: every local GPU as ``gpu`` events, read by ``provetop.base.nvml``'s
own code from a fake ``pynvml`` that replays recorded-style readings (tests/sources/
fake_pynvml.py; not read from a card), XID counts from queued events, and the plain "no NVML"
case. One GPU test reads a real card."""

from __future__ import annotations

import threading

import pytest

import provetop.base.nvml as nvml_module
from provetop.recordings.schema import validate
from provetop.sources.nvml import NvmlSource
from tests.sources.fake_pynvml import FakeNvml, MissingNvml
from tests.sources.helpers import Collect


@pytest.fixture(autouse=True)
def fresh_nvml():
    nvml_module.reset()
    yield
    nvml_module.reset()


def _run(source: NvmlSource, sink: Collect) -> threading.Thread:
    thread = threading.Thread(target=source.run, args=(sink,), daemon=True)
    thread.start()
    return thread


def _gpu(sink: Collect, device: int) -> list[dict]:
    return [e for e in sink.flat() if e["k"] == "gpu" and e["device"] == device]


def test_replayed_readings_become_gpu_events_of_every_device(monkeypatch):
    fake = FakeNvml().install(monkeypatch)
    source, sink = NvmlSource(interval=0.02), Collect()
    thread = _run(source, sink)
    try:
        assert sink.wait(lambda: len(_gpu(sink, 1)) >= 6)
    finally:
        source.close()
        thread.join(5)
    hello = sink.flat()[0]
    assert hello["k"] == "hello" and hello["source"] == "nvml" and hello["read_only"]
    assert [d["name"] for d in hello["devices"]] == ["NVIDIA H200", "NVIDIA H200"]
    assert hello["devices"][0]["capacity"] == 150_754_820_096
    assert hello["config"]["driver"] == "580.159.04"
    for e in sink.flat():
        validate(e)
    recorded = fake.record["samples"]
    for device in (0, 1):
        events = _gpu(sink, device)
        for i, e in enumerate(events[:6]):  # the readings in recorded order
            want = recorded[i][device]
            assert [e["sm_util_pct"], e["mem_util_pct"]] == want["util"]
            assert e["pcie_rx_bytes_s"] == want["pcie_rx_kb_s"] * 1024
            assert e["mem_used"] == want["memory"][0] and e["mem_total"] == want["memory"][2]
            assert e["power_mw"] < e["power_limit_mw"] == 700_000
            assert "fan_pct" not in e  # recorded as not supported: not invented
            assert e["xid_count"] == 0 and "xid_last" not in e
            assert [p["pid"] for p in e["processes"]] == [p for p, _ in want["processes"]]
    assert fake.freed  # the XID event set is given back on close


def test_xid_events_are_counted_per_device(monkeypatch):
    fake = FakeNvml().install(monkeypatch)
    source, sink = NvmlSource(interval=0.02), Collect()
    thread = _run(source, sink)
    try:
        assert sink.wait(lambda: bool(_gpu(sink, 1)))
        fake.xid(1, 79)
        fake.xid(1, 48)
        assert sink.wait(lambda: _gpu(sink, 1)[-1].get("xid_count") == 2)
    finally:
        source.close()
        thread.join(5)
    assert _gpu(sink, 1)[-1]["xid_last"] == 48
    assert _gpu(sink, 0)[-1]["xid_count"] == 0


def test_a_gpu_without_xid_events_has_no_count(monkeypatch):
    fake = FakeNvml()
    fake.devices[0]["xid_events"] = 0
    fake.install(monkeypatch)
    source, sink = NvmlSource(interval=0.02), Collect()
    thread = _run(source, sink)
    try:
        assert sink.wait(lambda: len(_gpu(sink, 1)) >= 2)
    finally:
        source.close()
        thread.join(5)
    assert "xid_count" not in _gpu(sink, 0)[-1]
    assert _gpu(sink, 1)[-1]["xid_count"] == 0


def test_without_nvml_the_hello_says_why_and_no_figure_follows(monkeypatch):
    MissingNvml().install(monkeypatch)
    source, sink = NvmlSource(interval=0.02), Collect()
    thread = _run(source, sink)
    try:
        assert sink.wait(lambda: len(sink.flat()) >= 2)
    finally:
        source.close()
        thread.join(5)
    hello = sink.flat()[0]
    assert hello["devices"] == []
    assert "NVML Shared Library Not Found" in hello["config"]["nvml_error"]
    assert not [e for e in sink.flat() if e["k"] == "gpu"]
    assert not thread.is_alive()


@pytest.mark.gpu
def test_reads_a_real_gpu():
    """On a GPU machine: ``top``'s source reads every card; utilisation is a percentage and
    the power is below the enforced limit."""
    if nvml_module.module() is None:
        pytest.skip(f"NVML unavailable: {nvml_module.error()}")
    source, sink = NvmlSource(interval=0.2), Collect()
    thread = _run(source, sink)
    try:
        assert sink.wait(lambda: len(_gpu(sink, 0)) >= 3)
    finally:
        source.close()
        thread.join(5)
    hello = sink.flat()[0]
    assert hello["devices"], hello["config"]
    for device in range(len(hello["devices"])):
        for e in _gpu(sink, device):
            validate(e)
            assert 0 <= e["sm_util_pct"] <= 100 and 0 <= e["mem_util_pct"] <= 100
            assert 0 < e["power_mw"] <= e["power_limit_mw"]
            assert 0 <= e["mem_used"] <= e["mem_total"]  # an idle H200 reports 0 MiB used
    last = _gpu(sink, 0)[-1]
    print("top source, gpu0:", {k: v for k, v in last.items() if k != "processes"})
