"""Every subcommand given bad input, run as a user runs it (a subprocess): one line on stderr
that starts ``provetop: error:``, exit code 2, no traceback, and no screen opened."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "recordings" / "samples" / "h200-porep32g-naive16.pvtrec"


def _png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad")
    made = {"missing": d / "missing.pvtrec", "empty": d / "empty.pvtrec", "dir": d / "adir"}
    made["empty"].write_bytes(b"")
    made["dir"].mkdir()
    made["png"] = d / "image.png"
    made["png"].write_bytes(_png())
    made["text"] = d / "notes.txt"
    made["text"].write_text("these are notes, not a recording\n")
    made["out"] = d / "out"  # a fresh output path per case (below)
    return made


FOREIGN = ("missing", "empty", "png", "text", "dir")

# (case id, argv with {name} for a file of the fixture, what the line must say)
CASES: list[tuple[str, list[str], str]] = [
    *[(f"summary-{f}", ["summary", "{" + f + "}"], "") for f in FOREIGN],
    *[(f"summary-json-{f}", ["summary", "--json", "{" + f + "}"], "") for f in FOREIGN],
    *[
        (f"export-{f}", ["export", "{" + f + "}", "--format", "perfetto", "-o", "{out}.json"], "")
        for f in FOREIGN
    ],
    *[(f"replay-{f}", ["replay", "{" + f + "}"], "") for f in FOREIGN],
    *[
        (f"import-cuzk-{f}", ["import-cuzk", "{" + f + "}", "-o", "{out}.pvtrec"], "")
        for f in FOREIGN
    ],
    ("export-format", ["export", str(SAMPLE), "--format", "png", "-o", "{out}.json"], "format"),
    ("export-out-dir", ["export", str(SAMPLE), "-o", "/nonexistent/dir/o.json"], "does not exist"),
    ("replay-speed", ["replay", str(SAMPLE), "--speed", "-2"], "speed"),
    ("engine-domain", ["engine", "--domain-log", "99"], "between 1 and 28"),
    ("engine-domain-text", ["engine", "--domain-log", "ten"], "invalid int"),
    ("engine-size", ["engine", "--device-memory", "-5"], "not a size"),
    ("engine-size-huge", ["engine", "--device-memory", "1e99GiB"], "not a size"),
    ("engine-size-tiny", ["engine", "--device-memory", "1KiB"], "too small"),
    ("engine-nvml-nan", ["engine", "--nvml-interval", "nan"], "--nvml-interval"),
    ("engine-proofs", ["engine", "--proofs", "-1"], "at least 1"),
    ("engine-seed", ["engine", "--seed", "x"], "invalid int"),
    ("engine-cuda", ["engine", "--backend", "cuda"], "provetop[cuda12]"),
    ("run-cuda", ["run", "--backend", "cuda"], "provetop[cuda12]"),
    ("run-size", ["run", "--device-memory", "lots"], "not a size"),
    ("selftest-cuda", ["selftest", "--backend", "cuda"], "provetop[cuda12]"),
    ("selftest-json-cuda", ["selftest", "--json", "--backend", "cuda"], "provetop[cuda12]"),
    ("warmup-cuda", ["warmup", "--backend", "cuda"], "CuPy"),
    ("bench-pipeline-cuda", ["bench", "pipeline", "--backend", "cuda"], "provetop[cuda12]"),
    ("bench-unknown", ["bench", "nope"], "invalid choice"),
    ("trace-nothing", ["trace"], "no command given"),
    ("trace-interval", ["trace", "--interval-ms", "-1", "--", "true"], "--interval-ms -1"),
    ("trace-record-exists", ["trace", "--record", "{text}", "--", "true"], "never overwrites"),
    ("trace-both", ["trace", "--record", "{out}", "--no-record", "--", "true"], "exclusive"),
    ("bench-msm-window", ["bench", "msm", "--window", "30"], "--window must be 0"),
    ("bench-msm-points", ["bench", "msm", "--points", "nowhere"], "invalid choice"),
    ("bench-ntt-levels", ["bench", "ntt", "--max-levels", "12"], "--max-levels must be 0"),
    ("bench-ntt-levels-neg", ["bench", "ntt", "--max-levels", "-3"], "--max-levels must be 0"),
    ("bench-ntt-warm-neg", ["bench", "ntt", "--warmup-ms", "-1"], "--warmup-ms must lie"),
    ("bench-ntt-lowest", ["bench", "ntt", "--lowest-levels", "11"], "--lowest-levels must lie"),
    ("bench-ntt-warm-nan", ["bench", "ntt", "--warmup-ms", "nan"], "--warmup-ms must lie"),
    ("bench-tui-rate", ["bench", "tui", "--rate", "-5"], "--rate"),
    ("bench-tui-devices", ["bench", "tui", "--devices", "0"], "--devices"),
    ("watch-missing-socket", ["watch", "unix:{missing}.sock"], "no such socket"),
    ("watch-bad-address", ["watch", "udp://x"], "expected"),
    (
        "import-cuzk-workers",
        ["import-cuzk", "{text}", "-o", "{out}.pvtrec", "--workers-per-device", "0"],
        "at least 1",
    ),  # fmt: skip
    ("unknown-command", ["frobnicate"], "invalid choice"),
]


def _no_cupy_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_RUNTIME_DIR": "/nonexistent-runtime"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # where CuPy is installed, no device either
    return env


@pytest.mark.parametrize("case, argv, says", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_exit_2(files, tmp_path, case, argv, says):
    names = {k: str(v) for k, v in files.items()}
    names["out"] = str(tmp_path / "out")
    args = [a.format(**names) for a in argv]
    if case.endswith("cuda"):
        try:
            import cupy  # noqa: F401

            pytest.skip("CuPy is installed here: --backend cuda is not a bad input")
        except ImportError:
            pass
    r = subprocess.run(
        [sys.executable, "-m", "provetop", *args],
        cwd=ROOT,
        env=_no_cupy_env(),
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 2, (args, r.returncode, r.stderr[-500:])
    assert "Traceback" not in r.stderr
    assert "\x1b[" not in r.stderr + r.stdout, "the screen was opened"
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("provetop: error: "), (args, r.stderr)
    assert says in lines[0], (args, lines[0])
    assert not list(tmp_path.glob("out*")), "an output was left behind"
