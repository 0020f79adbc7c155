"""``provetop bench pipeline --device-counts 1,2,...``: the engine on the first N devices per
point, each in its own process, as one table, one JSON and an SVG with the 0.95 x N target; a
point past the host's devices is a row, not the end."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest

from provetop.cli import main
from provetop.engine.bench.devcount import (
    EFFICIENCY_TARGET,
    count_plot,
    derive,
    format_count_table,
    parse_count_list,
    run_count_sweep,
)
from provetop.engine.bench.plot import Series, line_chart
from provetop.engine.settings.config import from_preset
from provetop.engine.settings.tuning import Tuning

SVG = "{http://www.w3.org/2000/svg}"
CPU_CI = ["bench", "pipeline", "--backend", "cpu", "--preset", "ci", "--proofs", "1"]


def test_the_list_parses_counts():
    assert parse_count_list("1, 2,4,8") == [1, 2, 4, 8]
    assert parse_count_list("8") == [8]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--device-counts", "1,,2"], "--device-counts '1,,2': item 2 is empty"),
        (["--device-counts", "1,two"], "item 2: not a device count: 'two'"),
        (["--device-counts", "0"], "--device-counts: a device count is at least 1, got 0"),
        (["--device-counts", "1,2,1"], "item 3 (1) repeats an earlier point"),
        (["--device-counts", "1,2", "--devices", "0,1"], "leave out --devices"),
        (["--device-counts", "1,2", "--device-memory", "8GiB,16GiB"], "not a list"),
        (["--device-counts", "1", "--device-memory", "1KiB"], "too small"),
    ],
)
def test_a_bad_count_sweep_is_one_line_and_exit_2(tmp_path, capsys, extra, said):
    rc = main([*CPU_CI, "--record", str(tmp_path / "run.pvtrec"), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("provetop: error: ") and err.count("\n") == 1, err
    assert said in err
    assert list(tmp_path.iterdir()) == []  # nothing ran


def test_plot_and_point_timeout_take_a_count_list_too(capsys):
    rc = main([*CPU_CI, "--plot", "x.svg"])
    err = capsys.readouterr().err
    assert rc == 2 and "or --device-counts, e.g. 1,2,4,8" in err


def test_the_count_sweep_runs_each_point_on_the_cpu_backend(tmp_path, capsys):
    """1 and 2 modeled devices run (ci preset, one proof per device); 65 is more than the
    engine's 64 modeled devices, so its row says so and nothing runs for it. Each point that
    ran has its own recording and JSON; the 2-device point ran 2 proofs with 2 in flight on
    devices 0 and 1; efficiency and target are against the 1-device point."""
    out, rec, plot = tmp_path / "sweep.json", tmp_path / "run.pvtrec", tmp_path / "sweep.svg"
    args = [*CPU_CI, "--device-counts", "1,2,65", "--device-memory", "128KiB"]
    rc = main([*args, "--out", str(out), "--record", str(rec), "--plot", str(plot)])
    captured = capsys.readouterr()
    assert rc == 0, captured  # every point the host has devices for ran clean
    sweep = json.loads(out.read_text())
    assert sweep["sweep"] == "device_count" and sweep["complete"] is True
    assert sweep["visible_devices"] == 64
    rows = {r["devices"]: r for r in sweep["points"]}
    assert list(rows) == [1, 2, 65]
    far = rows[65]
    assert far["status"] == "not visible" and far["result"] is None and far["recording"] is None
    assert far["error"] == "asks for 65 devices; 64 modeled devices of the cpu backend " + (
        "(the engine's bound)"
    )
    assert not (tmp_path / "run-65gpu.pvtrec").exists()
    for n in (1, 2):
        row = rows[n]
        assert row["status"] == "done", row
        assert row["recording"] == str(tmp_path / f"run-{n}gpu.pvtrec")
        assert json.loads((tmp_path / f"sweep-{n}gpu.json").read_text()) == row["result"]
        cfg = row["result"]["config"]
        assert cfg["devices"] == list(range(n)) and cfg["proofs"] == n
        assert cfg["concurrency"] == n and cfg["device_memory"] == 128 << 10
        assert row["result"]["partitions_lost"] == 0
        host = row["result"]["host_usage"]
        assert host["peak_rss_bytes"] > 0 and host["cpu_s"] > 0 and host["host_cpus"] >= 1
        f = row["figures"]
        assert f["proofs_per_hour"] == pytest.approx(3600 / row["result"]["s_per_proof"])
        assert list(f["gpu_busy_by_device"]) == [str(d) for d in range(n)]
        assert f["slowest_device"] in range(n)
    one, two = rows[1]["figures"], rows[2]["figures"]
    assert one["scaling_efficiency"] == pytest.approx(1.0)
    assert two["target_proofs_per_hour"] == pytest.approx(0.95 * 2 * one["proofs_per_hour"])
    assert two["scaling_efficiency"] == pytest.approx(
        two["proofs_per_hour"] / (2 * one["proofs_per_hour"])
    )
    assert sweep["meta"]["commit"] == rows[1]["result"]["meta"]["commit"]
    # the table: a row per point, the missing devices in words, modeled said
    table = captured.out
    assert table == format_count_table(sweep) + "\n"
    lines = table.splitlines()
    assert lines[0].split()[:4] == ["devices", "proofs", "proofs/h", "target"]
    assert lines[3].split()[0] == "65" and "not visible: asks for 65 devices" in lines[3]
    assert "modeled devices (cpu backend)" in table
    assert "sweep 3/3: 65 devices not visible" in captured.err
    # the plot: every panel, the 0.95 x N line dashed in the first two
    root = ET.parse(plot).getroot()
    panels = root.findall(f"{SVG}g")
    assert [p.get("data-series") for p in panels] == [
        "proofs per hour",
        "scaling efficiency",
        "median gpu_total per partition",
        "GPU busy, least busy device",
        "host peak memory",
        "host CPU used",
    ]
    for panel in panels[:2]:
        (target,) = panel.findall(f"{SVG}g")
        assert target.get("class") == "target"
        (dashed,) = target.findall(f"{SVG}polyline")
        assert dashed.get("stroke-dasharray") and len(dashed.get("points").split()) == 2
    for panel in panels:
        (line,) = panel.findall(f"{SVG}polyline")
        assert len(line.get("points").split()) == 2
        assert "not visible" in [t.text for t in panel.iter(f"{SVG}text")]


def _crash(config, tuning, record, result):
    os._exit(3)


def test_a_count_past_the_visible_devices_never_starts_a_process(tmp_path, capsys):
    """With two devices visible, 4 and 8 are rows at once; only 1 and 2 start a child (which
    crashes here: a row too). Nothing ran clean, so the exit code is 1."""
    base = from_preset("ci", proofs=1)
    out = tmp_path / "s.json"

    def two(backend: str) -> tuple[int, str]:
        return 2, "CUDA devices visible"

    rc = run_count_sweep([1, 2, 4, 8], base, Tuning(), _crash, visible=two, out=str(out))
    rows = json.loads(out.read_text())["points"]
    assert rc == 1
    assert [r["status"] for r in rows] == ["failed", "failed", "not visible", "not visible"]
    assert rows[2]["error"] == "asks for 4 devices; 2 CUDA devices visible"
    assert rows[3]["wall_s"] == 0.0
    assert "8  not visible: asks for 8 devices; 2 CUDA devices visible" in capsys.readouterr().out


def _result(spp: float, by_device: dict[str, tuple[int, float | None, float]]) -> dict:
    return {
        "s_per_proof": spp,
        "gpu_total_ms_median": 1400.0,
        "partitions": 20,
        "partitions_lost": 0,
        "host_usage": {"peak_rss_bytes": 1 << 30, "cpu_cores_used": 3.5, "host_cpus": 16},
        "by_device": {
            d: {
                "partitions_ok": n,
                "gpu_total_ms_median": ms,
                "gpu_busy_fraction": busy,
                "gpu_busy_steady": busy,
            }
            for d, (n, ms, busy) in by_device.items()
        },
    }


def test_the_figures_are_against_the_one_device_point_wherever_it_stands():
    """8 devices listed before 1: the efficiency fills in once the 1-device point is in; the
    slowest device is the largest median, or one that ran nothing."""
    eight = {str(d): (10, 1400.0 + d, 0.95) for d in range(8)}
    sweep = {
        "points": [
            {"devices": 8, "proofs": 16, "result": _result(36.0 / 7.8, eight)},
            {
                "devices": 2,
                "proofs": 4,
                "result": _result(36.0, {"0": (10, 1400.0, 0.9), "1": (0, None, 0.0)}),
            },
        ]
    }
    derive(sweep)
    assert sweep["points"][0]["figures"]["scaling_efficiency"] is None  # no 1-device point yet
    sweep["points"].append(
        {"devices": 1, "proofs": 2, "result": _result(36.0, {"0": (10, 1400.0, 0.96)})}
    )
    derive(sweep)
    f8, f2, f1 = (p["figures"] for p in sweep["points"])
    assert f1["proofs_per_hour"] == pytest.approx(100.0)
    assert f8["proofs_per_hour"] == pytest.approx(780.0)
    assert f8["target_proofs_per_hour"] == pytest.approx(EFFICIENCY_TARGET * 800)
    assert f8["scaling_efficiency"] == pytest.approx(0.975) and f8["meets_target"] is True
    assert f2["scaling_efficiency"] == pytest.approx(0.5) and f2["meets_target"] is False
    assert f8["slowest_device"] == 7
    assert f8["slowest_over_fastest"] == pytest.approx(7 / 1400)
    assert f2["slowest_device"] == 1 and f2["idle_devices"] == [1]
    sweep.update(config={"workers_per_device": 2, "proofs": 2, "concurrency": 1})
    sweep.update(visible_devices=8, visible_what="CUDA devices visible", plot=None)
    table = format_count_table(sweep)
    row8 = table.splitlines()[1]
    assert "97.5% ok" in row8 and "95/95/95/95/95/95/95/95" in row8 and "gpu7 1407.0" in row8
    assert "gpu1 idle (1 ran nothing)" in table.splitlines()[2]
    assert "50.0% low" in table.splitlines()[2]
    ET.fromstring(count_plot(sweep))  # well-formed with every point known


def test_a_target_must_fit_the_labels():
    with pytest.raises(ValueError, match="1 targets for 2 labels"):
        line_chart("t", "s", "x", ["a", "b"], [Series("t", "ms", [1.0, 2.0], [1.0])])
