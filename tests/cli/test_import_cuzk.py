"""``provetop import-cuzk``: the committed fixture and fresh modeled runs, read back through
the recording reader and the state reducer."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from provetop.cli import main
from provetop.recordings.reader import open_recording, read_state
from provetop.sources.cuzk import sim

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cuzk"


def test_fixture_round_trip(tmp_path, capsys):
    out = tmp_path / "cuzk.pvtrec"
    code = main(
        [
            "import-cuzk",
            str(FIXTURES / "daemon.log"),
            "--status-snapshots",
            str(FIXTURES / "status"),
            "-o",
            str(out),
        ]
    )
    assert code == 0
    err = capsys.readouterr().err
    assert "2 unknown" in err and "1 malformed" in err and "1 truncated" in err
    assert "this line is not from cuzk" in err

    state = read_state(out)
    assert state.hello["source"] == "cuzk" and state.hello["read_only"] is True
    assert state.hello["backend"] == "cuda" and state.hello["modeled"] is False
    assert state.engine_state == "done"
    truth = json.loads((FIXTURES / "truth.json").read_text())
    assert len(state.partitions) == len(truth)
    for row in truth:
        p = state.partitions[(row["proof"], row["partition"])]
        if row["skipped"]:
            assert p.ok is False and "skipped" in p.failure
            continue
        assert p.worker == row["worker"] and p.device == 0
        assert p.prestage == row["prestage"], row
        assert p.mutex_wait_ms == row["mutex_wait_ms"], row
        if row["failed"]:
            assert p.ok is False and "out of memory" in p.failure
        else:
            assert p.ok is True and p.gpu_total_ms == row["gpu_total_ms"], row
    reasons = {k: state.partitions[(0, k)].prestage_reason for k in range(6)}
    assert "needs 12288 MiB" in reasons[1] and "512 MiB margin" in reasons[1]  # skip_vram
    assert "no prestage_setup line" in reasons[2]  # malloc failed with memory reported free
    assert "cudaHostRegister" in reasons[3]
    assert "cudaErrorMemoryAllocation" in reasons[5]
    totals = state.totals()
    assert totals["proofs_done"] == 1 and totals["proofs_failed"] == 1
    # OOMs: the cudaMalloc of (0,2), the setup fallback of (0,5) and of (1,1), (1,1) failing
    assert totals["ooms"] == 4
    assert ("gpu", 0) in state.lanes()
    rec = open_recording(out)
    assert not rec.truncated
    times = [e["t"] for e in rec.events]
    assert times == sorted(times)
    # seeking lands on the same partitions as a full read
    mid = rec.state_at(times[len(times) // 2])
    assert set(mid.partitions) <= set(state.partitions)


def test_fresh_modeled_run_round_trip(tmp_path):
    rng = random.Random(random.randrange(1 << 30))
    run = sim.simulate(rng, jobs=3, partitions=4, workers_per_device=2)
    log = tmp_path / "daemon.log"
    log.write_text(run.text())
    out = tmp_path / "run.pvtrec"
    assert main(["import-cuzk", str(log), "-o", str(out)]) == 0
    state = read_state(out)
    for c in run.calls:
        p = state.partitions[(c.job, c.partition)]
        assert (p.ok, p.worker, p.gpu_total_ms, p.mutex_wait_ms) == (
            True,
            c.worker,
            c.gpu_total,
            c.wait,
        )
        assert p.phases_ms["synthesis"] == c.synth_ms
    assert state.totals()["proofs_done"] == 3
    end = max(c.end for c in run.calls)
    assert state.s_per_proof() == pytest.approx(
        (end - min(c.synth_start for c in run.calls)) / 1000 / 3
    )


def test_bad_arguments_and_bad_snapshots(tmp_path, capsys):
    assert main(["import-cuzk", str(tmp_path / "nope.log"), "-o", str(tmp_path / "x")]) == 2
    assert "no such cuzk log" in capsys.readouterr().err
    log = tmp_path / "daemon.log"
    log.write_text("nothing from cuzk here\nTIMELINE,10,GPU_PICKUP,j,worker=3,partition=0\n")
    snaps = tmp_path / "status"
    snaps.mkdir()
    (snaps / "a.json").write_text("{not json")
    (snaps / "b.json").write_text("[]")
    out = tmp_path / "x.pvtrec"
    assert main(["import-cuzk", str(log), "--status-snapshots", str(snaps), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "2 unreadable status snapshots" in err and "1 unknown" in err
    state = read_state(out)
    assert [f["kind"] for f in state.faults] == ["source"]


def test_summary_and_perfetto_export_work_on_an_imported_cuzk_run(tmp_path, capsys):
    out = tmp_path / "cuzk.pvtrec"
    assert main(["import-cuzk", str(FIXTURES / "daemon.log"), "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["summary", str(out)]) == 0
    text = capsys.readouterr().out
    assert "cudaHostRegister" in text and "skip" in text and "proofs: 1 done, 1 failed" in text
    trace = tmp_path / "cuzk.json"
    assert main(["export", str(out), "-o", str(trace)]) == 0
    data = json.loads(trace.read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    names = {e.get("name") for e in events if e.get("ph") == "X"}
    assert {"synthesis", "mutex_wait", "ntt_msm_h", "batch_add", "tail_msm"} <= names
