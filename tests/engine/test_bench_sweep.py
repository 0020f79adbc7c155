"""``provetop bench pipeline --device-memory A,B,...``: one bench per point, each in its own
process, as one table, one JSON and an SVG; a point that cannot run is a row, not the end."""

from __future__ import annotations

import json
import os
import time
import xml.etree.ElementTree as ET

import pytest

from provetop.cli import main
from provetop.engine.bench.pipeline import sweep_point
from provetop.engine.bench.plot import Series, line_chart, nice_ticks
from provetop.engine.bench.sweep import Point, format_sweep_table, parse_memory_list, run_sweep
from provetop.engine.settings.config import from_preset
from provetop.engine.settings.tuning import Tuning

SVG = "{http://www.w3.org/2000/svg}"
KIB = 1 << 10


def test_the_list_parses_sizes_and_uncapped():
    points = parse_memory_list("8GiB, 12 GiB,uncapped")
    assert points == [Point("8GiB", 8 << 30), Point("12GiB", 12 << 30), Point("uncapped", None)]
    assert parse_memory_list("16GiB") == [Point("16GiB", 16 << 30)]
    assert parse_memory_list("UNCAPPED") == [Point("uncapped", None)]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("8GiB,,x", "--device-memory '8GiB,,x': item 2 is empty"),
        ("8GiB,x", "item 2: not a size: 'x'"),
        ("8GiB,", "'8GiB,': item 2 is empty"),
        ("16GiB,16384MiB", "item 2 (16384MiB) repeats an earlier point"),
        ("uncapped,uncapped", "repeats an earlier point"),
        ("lots", "--device-memory: not a size: 'lots'"),
    ],
)
def test_a_bad_list_is_one_line_and_exit_2(tmp_path, capsys, text, said):
    rec = tmp_path / "run.pvtrec"
    args = ["bench", "pipeline", "--backend", "cpu", "--preset", "ci", "--record", str(rec)]
    rc = main([*args, "--device-memory", text])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("provetop: error: ") and err.count("\n") == 1, err
    assert said in err
    assert list(tmp_path.iterdir()) == []  # nothing ran


def test_plot_and_point_timeout_need_a_list(capsys):
    for extra in (["--plot", "x.svg"], ["--point-timeout", "5"]):
        rc = main(["bench", "pipeline", "--backend", "cpu", "--preset", "ci", *extra])
        err = capsys.readouterr().err
        assert rc == 2 and "needs a --device-memory list" in err and err.count("\n") == 1
    rc = main(["bench", "pipeline", "--device-memory", "1MiB,2MiB", "--point-timeout", "0"])
    assert rc == 2 and "--point-timeout must be above 0" in capsys.readouterr().err


def test_the_sweep_runs_each_point_on_the_cpu_backend(tmp_path, capsys):
    """Four points on the modeled device of the cpu backend (ci preset, 2 partitions): 1 KiB
    is refused by the flag's check, 32 KiB by the memory plan (no plan fits: the line names
    the memory that would), 128 KiB and uncapped (the model's 16 GiB) complete. Each point that
    ran has its own recording and JSON, named by its memory; the sweep's JSON holds every point;
    the SVG is well-formed XML with a line per panel."""
    out, rec, plot = tmp_path / "sweep.json", tmp_path / "run.pvtrec", tmp_path / "sweep.svg"
    args = ["bench", "pipeline", "--backend", "cpu", "--preset", "ci", "--proofs", "1"]
    args += ["--device-memory", "1KiB,32KiB,128KiB,uncapped"]
    rc = main([*args, "--out", str(out), "--record", str(rec), "--plot", str(plot)])
    captured = capsys.readouterr()
    assert rc == 1  # a point could not run
    sweep = json.loads(out.read_text())
    assert sweep["complete"] is True and sweep["sweep"] == "device_memory"
    rows = {r["device_memory"]: r for r in sweep["points"]}
    assert list(rows) == ["1KiB", "32KiB", "128KiB", "uncapped"]
    assert [r["device_memory_bytes"] for r in rows.values()] == [KIB, 32 * KIB, 128 * KIB, None]
    refused = rows["1KiB"]
    assert refused["status"] == "refused" and refused["result"] is None
    assert refused["recording"] is None
    assert "too small" in refused["error"]
    assert not (tmp_path / "run-1KiB.pvtrec").exists()
    assert not (tmp_path / "sweep-1KiB.json").exists()
    planless = rows["32KiB"]
    assert planless["status"] == "refused" and planless["recording"] is None
    assert "smallest plan" in planless["error"] and "at least" in planless["error"]
    for label in ("128KiB", "uncapped"):
        row = rows[label]
        assert row["status"] == "done", row
        assert row["recording"] == str(tmp_path / f"run-{label}.pvtrec")
        assert row["json"] == str(tmp_path / f"sweep-{label}.json")
        assert json.loads((tmp_path / f"sweep-{label}.json").read_text()) == row["result"]
        assert row["result"]["config"]["device_memory"] == row["device_memory_bytes"]
    assert rows["128KiB"]["result"]["partitions_lost"] == 0
    # the sweep's own meta: its command and tuning, and the environment of the first point run
    point_meta = rows["128KiB"]["result"]["meta"]
    assert sweep["meta"]["commit"] == point_meta["commit"]
    assert sweep["meta"]["date_utc"] == point_meta["date_utc"]
    assert sweep["meta"]["command"] and "tuning" in sweep["meta"]
    uncapped = rows["uncapped"]["result"]
    assert uncapped["partitions_lost"] == 0 and uncapped["modeled"] is True
    assert uncapped["device_capacity"] == [16 << 30]  # the model's default card
    assert rows["128KiB"]["result"]["device_capacity"] == [128 * KIB]
    # the table: a row per point, the refusal in words
    table = captured.out
    assert table == format_sweep_table(sweep) + "\n"
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["device", "memory", "capacity"]
    assert lines[1].startswith("1KiB") and "refused: --device-memory is too small" in lines[1]
    assert lines[2].startswith("32KiB") and "refused" in lines[2]
    assert lines[4].startswith("uncapped") and "16.00 GiB*" in lines[4]
    assert "sweep 4/4: uncapped done" in captured.err
    # the plot: well-formed, both panels, a line through the two points with a value
    root = ET.parse(plot).getroot()
    assert root.tag == f"{SVG}svg"
    panels = root.findall(f"{SVG}g")
    assert [p.get("data-series") for p in panels] == [
        "median gpu_total per partition",
        "seconds per proof",
    ]
    for panel in panels:
        (line,) = panel.findall(f"{SVG}polyline")
        assert len(line.get("points").split()) == 2
        texts = [t.text for t in panel.iter(f"{SVG}text")]
        assert texts.count("refused") == 2  # both refused points are marked on the axis
        assert len(panel.findall(f"{SVG}circle")) == 2


def _crash(config, tuning, record, result):
    """A point whose process dies without a word (a crash in a kernel, say)."""
    os._exit(3)


def _sleep(config, tuning, record, result):
    """A point that never finishes (an engine stuck waiting, say)."""
    time.sleep(60)


def test_a_crashed_or_slow_point_is_a_row_and_the_sweep_goes_on(tmp_path, capsys):
    base = from_preset("ci", proofs=1)
    points = [Point("1MiB", 1 << 20), Point("2MiB", 2 << 20)]
    out = tmp_path / "s.json"
    rc = run_sweep(points, base, Tuning(), _crash, out=str(out))
    assert rc == 1
    rows = json.loads(out.read_text())["points"]
    assert [r["status"] for r in rows] == ["failed", "failed"]
    assert rows[0]["error"] == "the point's process exited with code 3"
    assert "failed: the point's process exited with code 3" in capsys.readouterr().out
    rc = run_sweep(points, base, Tuning(), _sleep, out=str(out), point_timeout=0.5)
    rows = json.loads(out.read_text())["points"]
    assert rc == 1 and [r["status"] for r in rows] == ["timed out", "timed out"]
    assert all(r["wall_s"] < 30 for r in rows)
    assert "timed out: ran past --point-timeout 0.5 s" in capsys.readouterr().out


def test_bad_paths_are_refused_before_any_point_runs(tmp_path, capsys):
    (tmp_path / "run-2MiB.pvtrec").write_text("keep me")
    (tmp_path / "dir.svg").mkdir()
    rec = tmp_path / "run.pvtrec"
    args = ["bench", "pipeline", "--backend", "cpu", "--preset", "ci", "--device-memory"]
    for extra, said in (
        (["--record", str(rec)], "run-2MiB.pvtrec exists"),
        (["--plot", str(tmp_path / "dir.svg")], "dir.svg is a directory"),
        (["--out", str(tmp_path / "no" / "s.json")], "no such directory"),
    ):
        rc = main([*args, "1MiB,2MiB", *extra])
        err = capsys.readouterr().err
        assert rc == 2 and said in err and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.svg", "run-2MiB.pvtrec"]


def test_nice_ticks_cover_the_top_in_round_steps():
    assert nice_ticks(1765) == [0, 500, 1000, 1500, 2000]
    assert nice_ticks(49.2) == [0, 10, 20, 30, 40, 50]
    assert nice_ticks(0.8) == pytest.approx([0, 0.2, 0.4, 0.6, 0.8])
    assert nice_ticks(0) == [0.0, 1.0]


def test_the_chart_escapes_its_text_and_breaks_lines_at_missing_values():
    svg = line_chart(
        "a <title> & more",
        "sub",
        "x",
        ["8GiB", "12GiB", "16GiB", "24GiB", "40GiB"],
        [Series("t", "ms", [1.0, 2.0, None, 3.0, 4.0])],
        ["", "", "refused <early>", "", ""],
    )
    root = ET.fromstring(svg)
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "a <title> & more" in texts and "refused <early>" in texts
    lines = root.findall(f".//{SVG}polyline")
    assert [len(p.get("points").split()) for p in lines] == [2, 2]
    with pytest.raises(ValueError):
        line_chart("t", "s", "x", ["a", "b"], [Series("t", "ms", [1.0])])


def test_a_point_whose_engine_cannot_start_reports_refused(tmp_path):
    """The child's side: an engine that refuses to start (here its recording cannot be
    opened: the parent is a file) is written back as refused, with the engine's line."""
    (tmp_path / "file").write_text("")
    result = tmp_path / "point.json"
    sweep_point(from_preset("ci", proofs=1), Tuning(), str(tmp_path / "file" / "r"), str(result))
    doc = json.loads(result.read_text())
    assert doc["status"] == "refused" and "cannot write recording" in doc["error"], doc
