"""``provetop summary`` and ``provetop export`` as a user runs them: output, and bad input
answered with one line and exit code 2, never a traceback."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provetop.recordings.writer import RecordingWriter
from tests.recordings.fixtures import make_run

ROOT = Path(__file__).resolve().parents[2]


def provetop(*args, cwd=ROOT):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "provetop", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "run.pvtrec"
    with RecordingWriter(path) as w:
        for e in make_run(partitions=3, workers=2, devices=1, proofs=2):
            w.write(e)
    return path


def _one_line_error(r):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("provetop: error: "), r.stderr
    return lines[0]


def test_summary_json_and_text(recording):
    r = provetop("summary", recording, "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["totals"]["partitions"] == 6 and s["totals"]["partitions_verified"] == 5
    assert all(row["ok"] for row in s["attempts"] if row["attempt"] > 0)
    r = provetop("summary", recording)
    assert r.returncode == 0 and "s/proof" in r.stdout and "proof  part" in r.stdout


def test_export_writes_a_trace(recording, tmp_path):
    out = tmp_path / "t.json"
    r = provetop("export", recording, "--format", "perfetto", "-o", out)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["traceEvents"]
    assert "trace events" in r.stderr


def test_bad_inputs_exit_2(recording, tmp_path):
    garbage = tmp_path / "garbage.pvtrec"
    garbage.write_bytes(b"\x89PNG" + os.urandom(64))
    damaged = tmp_path / "damaged.pvtrec"
    data = bytearray(recording.read_bytes())
    data[len(data) // 2] ^= 0xFF
    data[len(data) // 2 + 1] = 0xC1
    damaged.write_bytes(bytes(data))
    cases = [
        (("summary", tmp_path / "missing.pvtrec"), "No such file"),
        (("summary", tmp_path), "directory"),
        (("summary", garbage), "not a provetop recording"),
        (("export", garbage, "-o", tmp_path / "x.json"), "not a provetop recording"),
        (("export", recording, "--format", "svg", "-o", tmp_path / "x.json"), "unknown export"),
        (("export", recording, "-o", tmp_path / "no" / "such" / "x.json"), "does not exist"),
        (("export", recording, "-o", tmp_path), "is a directory"),
    ]
    for args, message in cases:
        assert message in _one_line_error(provetop(*args)), args
    r = provetop("summary", damaged)
    if r.returncode != 0:  # the flip may land in a string and still decode: then it reads
        assert "byte" in _one_line_error(r)
    assert not (tmp_path / "x.json").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_output(recording, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    assert "cannot write" in _one_line_error(provetop("export", recording, "-o", locked / "x.json"))
