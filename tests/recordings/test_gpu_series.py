"""NVML ``gpu`` samples in ``summary`` (medians per GPU) and in the Perfetto export (counter
tracks), from a recording written with recorded-style H200 samples (not read from a card)."""

from __future__ import annotations

import provetop.recordings.state as state_module
from provetop.recordings.export_perfetto import export_perfetto
from provetop.recordings.reader import open_recording
from provetop.recordings.schema import make
from provetop.recordings.summary import build_summary, format_summary
from provetop.recordings.writer import RecordingWriter
from tests.recordings.fixtures import hello

SECOND = 1_000_000_000


def _h200(t: int, device: int, util: int) -> dict:
    """An H200 SXM sample shaped like NVML's (no fan: the module reports none)."""
    return make(
        "gpu",
        t,
        device=device,
        sm_util_pct=util,
        mem_util_pct=util // 2,
        power_mw=100_000 + util * 5_600,
        power_limit_mw=700_000,
        temp_c=40 + util // 4,
        sm_clock_mhz=1980,
        mem_clock_mhz=2619,
        pcie_rx_bytes_s=util * (1 << 28),
        pcie_tx_bytes_s=util * (1 << 24),
    )


def _write(path, events) -> None:
    with RecordingWriter(path, snapshot_every_s=0.1) as w:
        for e in events:
            w.write(e)


def _run(tmp_path, samples: int = 9):
    utils = [90, 95, 10, 93, 97, 0, 92, 94, 96][:samples]
    events = [dict(hello(devices=2, modeled=False), backend="cuda")]
    for i, util in enumerate(utils, start=1):
        events.append(_h200(i * SECOND, 0, util))
    events.append(_h200(SECOND, 1, 50))
    path = tmp_path / "h200.pvtrec"
    _write(path, events)
    return path


def test_summary_has_a_line_of_medians_per_gpu(tmp_path, monkeypatch):
    monkeypatch.setattr(state_module, "GPU_HISTORY", 3)  # the whole file counts, not the last 3
    summary = build_summary(_run(tmp_path))
    gpu0 = summary["gpu"]["0"]
    assert gpu0["samples"] == 9 and gpu0["sm_util_pct"] == 93 and gpu0["power_limit_w"] == 700
    assert gpu0["power_w"] == (100_000 + 93 * 5_600) / 1000 and gpu0["temp_c"] == 63
    text = format_summary(summary)
    assert "gpu0 NVML, medians of 9 samples: SM utilisation 93 %, memory controller 46 %, " in text
    assert "power 621 W of 700 W, temperature 63 °C" in text
    assert "gpu1 NVML, medians of 1 samples: SM utilisation 50 %" in text


def test_a_cpu_run_has_no_gpu_lines(tmp_path):
    path = tmp_path / "cpu.pvtrec"
    _write(path, [hello()])
    summary = build_summary(path)
    assert summary["gpu"] == {} and "NVML" not in format_summary(summary)


def test_perfetto_has_counter_tracks_of_the_samples(tmp_path):
    trace = export_perfetto(_run(tmp_path))
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C" and e["pid"] == 1]
    by_track: dict[str, list] = {}
    for e in counters:
        by_track.setdefault(e["name"], []).append(e)
    assert set(by_track) == {
        "utilisation (%)",
        "power (W)",
        "temperature (°C)",
        "clocks (MHz)",
        "PCIe (bytes/s)",
    }
    power = by_track["power (W)"]
    assert len(power) == 9 and power[2]["ts"] == 3 * SECOND / 1000
    assert power[2]["args"] == {"draw": 156.0, "limit": 700.0}
    assert by_track["utilisation (%)"][5]["args"] == {"sm": 0, "memory": 0}
    names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"]
    assert any(n.startswith("gpu1") for n in names)


def test_an_opened_recording_gives_the_same_figures(tmp_path):
    path = _run(tmp_path)
    rec = open_recording(path)
    assert build_summary(rec)["gpu"] == build_summary(path)["gpu"]
    counters = [e for e in export_perfetto(rec)["traceEvents"] if e["ph"] == "C"]
    assert len(counters) == len([e for e in export_perfetto(path)["traceEvents"] if e["ph"] == "C"])
