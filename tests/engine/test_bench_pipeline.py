"""``provetop bench pipeline`` on the cpu backend: the figures come from a real run's
recording and agree with the summary of the same file."""

from __future__ import annotations

import json

from provetop.cli import main
from provetop.engine.bench.pipeline import format_table, reduce_recording
from provetop.recordings.summary import build_summary


def test_bench_pipeline_cpu_run_reduces_its_recording(tmp_path, capsys, monkeypatch):
    from provetop.engine.settings.tuning import Tuning
    from provetop.recordings.reader import open_recording

    monkeypatch.setenv("PROVETOP_MSM_HOST_BUFFERS", "6")  # recorded, not used on the cpu backend
    out = tmp_path / "res.json"
    rec = tmp_path / "run.pvtrec"
    args = ["bench", "pipeline", "--backend", "cpu", "--preset", "small", "--proofs", "1"]
    rc = main([*args, "--record", str(rec), "--out", str(out)])
    assert rc == 0
    table = capsys.readouterr().out
    assert "4/4 ok" in table and "modeled device" in table
    assert "witness: synthetic approximation of a PoRep witness" in table
    res = json.loads(out.read_text())
    assert res["partitions"] == res["partitions_ok"] == res["partitions_verified"] == 4
    assert res["partitions_lost"] == 0 and res["recording"] == str(rec)
    assert res["meta"]["command"]
    tuning = Tuning.from_env({"PROVETOP_MSM_HOST_BUFFERS": "6"}).as_dict()
    assert res["meta"]["tuning"] == tuning == open_recording(rec).hello["tuning"]
    summary = build_summary(rec)
    gpu = sorted(a["gpu_total_ms"] for a in summary["attempts"])
    assert res["gpu_total_ms_median"] == (gpu[1] + gpu[2]) / 2
    assert 0 < res["gpu_busy_steady"] <= 1
    # the host cycle: synthesis per worker from the summary's own rows
    synth = {}
    for a in summary["attempts"]:
        synth.setdefault(str(a["worker"]), []).append(a["phases_ms"]["synthesis"])
    assert set(res["synthesis_ms_median_by_worker"]) == set(synth)
    for w, v in synth.items():
        v.sort()
        mid = len(v) // 2
        want = v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2
        assert res["synthesis_ms_median_by_worker"][w] == want
    assert res["host_phase_ms_median"]["upload"] is not None
    assert res["copy_ms_median"]["upload"] is None  # the modeled device times no copies
    assert "host cycle median ms: synthesis" in table
    again = reduce_recording(rec)  # the figures are a function of the file alone
    assert {k: res[k] for k in again} == json.loads(json.dumps(again))
    assert format_table(reduce_recording(rec)).splitlines()[0] == table.splitlines()[0]


def test_bench_pipeline_refuses_an_existing_record_path(tmp_path, capsys):
    rec = tmp_path / "exists"
    rec.write_text("keep me")
    rc = main(["bench", "pipeline", "--backend", "cpu", "--preset", "ci", "--record", str(rec)])
    assert rc != 0 and rec.read_text() == "keep me"
    assert "exists" in capsys.readouterr().err


def test_bench_pipeline_reports_the_upload_copy_time_of_a_recording(tmp_path, capsys):
    """The copy column comes from the upload phases' ``gpu_ms`` (a CUDA run's upload-stream
    events). It once read an event list that the folding reader never keeps, and said "-" on
    the H200."""
    from provetop.recordings.reader import open_recording
    from provetop.recordings.writer import RecordingWriter

    src = tmp_path / "cpu.pvtrec"
    args = ["bench", "pipeline", "--backend", "cpu", "--preset", "small", "--proofs", "1"]
    assert main([*args, "--record", str(src), "--out", str(tmp_path / "r.json")]) == 0
    capsys.readouterr()
    copied = tmp_path / "copies.pvtrec"
    times = []
    with RecordingWriter(copied, background_flush=False) as w:
        for e in open_recording(src).events:
            if e["k"] == "phase_end" and e["phase"] == "upload":
                times.append(100.0 + 10 * len(times))
                e = {**e, "gpu_ms": times[-1]}
            w.write(e)
    assert len(times) == 4
    res = reduce_recording(copied)
    assert res["copy_ms_median"]["upload"] == (times[1] + times[2]) / 2
    assert "(copy 115)" in format_table(res)


def test_bench_pipeline_reports_the_checks_and_the_unchecked_gpu_total(tmp_path, capsys):
    """A CUDA run's checked partitions carry check_inputs and check_sums in their region:
    their medians and the gpu_total of the partitions without a check (``verified`` nil) are
    printed; a run without those phases (cpu, older recordings) prints no such line."""
    from provetop.recordings.reader import open_recording
    from provetop.recordings.writer import RecordingWriter

    src = tmp_path / "cpu.pvtrec"
    args = ["bench", "pipeline", "--backend", "cpu", "--preset", "small", "--proofs", "1"]
    assert main([*args, "--record", str(src), "--out", str(tmp_path / "r.json")]) == 0
    capsys.readouterr()
    plain = reduce_recording(src)
    assert plain["check_ms_median"] == {"check_inputs": None, "check_sums": None}
    assert plain["gpu_total_ms_median_unchecked"] is None  # every partition was checked
    assert "checks in the region" not in format_table(plain)
    edited = tmp_path / "checks.pvtrec"
    with RecordingWriter(edited, background_flush=False) as w:
        for e in open_recording(src).events:
            if e["k"] == "partition_done":
                p = e["partition"]
                if p % 2 == 0:  # checked: the two sums inside its region
                    phases = {**e["phases_ms"], "check_inputs": 200.0 + p, "check_sums": 150.0}
                    e = {**e, "phases_ms": phases, "gpu_total_ms": 2000.0 + p}
                else:
                    e = {**e, "verified": None, "gpu_total_ms": 1600.0 + p}
            w.write(e)
    res = reduce_recording(edited)
    assert res["check_ms_median"] == {"check_inputs": 201.0, "check_sums": 150.0}
    assert res["gpu_total_ms_median_unchecked"] == 1602.0
    assert "inputs 201, sums 150; gpu_total of unchecked partitions 1602.0" in format_table(res)


def test_bench_pipeline_refuses_a_bad_setting_with_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PROVETOP_MSM_HOST_BUFFERS", "1")
    rec = tmp_path / "run.pvtrec"
    rc = main(["bench", "pipeline", "--backend", "cpu", "--preset", "ci", "--record", str(rec)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "PROVETOP_MSM_HOST_BUFFERS" in err
    assert not rec.exists()
