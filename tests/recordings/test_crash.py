"""Crash safety with the real engine: SIGKILL mid-run, then read, summarise and export."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provetop.recordings.reader import RecordingError, open_recording
from provetop.recordings.summary import build_summary, format_summary

ROOT = Path(__file__).resolve().parents[2]


def _partitions_done(path: Path) -> int:
    try:
        return sum(1 for e in open_recording(path).events if e["k"] == "partition_done")
    except RecordingError:
        return 0


def test_sigkill_mid_run_loses_at_most_a_second(tmp_path):
    rec_path = tmp_path / "killed.pvtrec"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_RUNTIME_DIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "provetop", "engine", "--backend", "cpu", "--preset", "ci"]
    cmd += ["--proofs", "10000", "--exit-when-done", "--record", str(rec_path)]
    cmd += ["--listen", f"unix:{tmp_path / 'e.sock'}"]
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while _partitions_done(rec_path) < 2:
            if proc.poll() is not None:
                pytest.fail(f"engine exited early: {proc.stderr.read().decode()[-2000:]}")
            assert time.monotonic() < deadline, "the engine recorded no partition in 60 s"
            time.sleep(0.1)
        time.sleep(1.3)  # a second of steady running, so the flush cadence is what is measured
        killed_wall_ns = time.time_ns()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    rec = open_recording(rec_path)
    assert rec.truncated and not rec.complete
    assert "truncated at byte" in str(rec.truncation)
    last_wall_ns = rec.hello["wall_ns"] + max(e["t"] for e in rec.events)
    lost_s = (killed_wall_ns - last_wall_ns) / 1e9
    print(f"lost {lost_s:.3f} s")
    assert lost_s <= 1.0, f"{lost_s:.3f} s of events lost"
    summary = build_summary(rec)
    assert summary["truncated"] and summary["totals"]["partitions_ok"] >= 2
    assert "TRUNCATED" in format_summary(summary)
    r = subprocess.run(
        [sys.executable, "-m", "provetop", "summary", str(rec_path), "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["truncated"] is True
