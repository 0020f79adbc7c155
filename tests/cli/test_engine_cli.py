"""``provetop engine`` argument errors: one line on stderr, exit code 2."""

from __future__ import annotations

import pytest

from provetop.cli import main


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--domain-log", "29"], "between 1 and 28"),
        (["--domain-log", "0"], "between 1 and 28"),
        (["--backend", "cuda"], "not available"),
        (["--backend", "tpu"], "invalid choice"),
        (["--preset", "nope"], "unknown preset"),
        (["--device-memory", "lots"], "not a size"),
        (["--witness-profile", "0.5,0.6,0.1"], "summing to 1"),
        (["--witness-profile", "a,b,c"], "zeros,ones,dense"),
        (["--partitions", "0"], "--partitions must be at least 1"),
        (["--workers-per-device", "0"], "--workers-per-device"),
        (["--workers-per-device", "100"], "must be below 100"),
        (["--devices", "0,x"], "--devices"),
        (["--devices", "0,0"], "distinct"),
        (["--listen", "tcp://8.8.8.8:9000"], "loopback"),
        (["--listen", "tcp://127.0.0.1:9000"], "--token-file"),
        (["--listen", "udp://x"], "expected unix"),
        (["--token-file", "/nonexistent"], "only used with"),
        (["--listen", "tcp://127.0.0.1:0", "--token-file", "/nonexistent/t"], "cannot read"),
        (["--record", "/tmp/x", "--no-record"], "mutually exclusive"),
        (["--allocator", "greedy"], "invalid choice"),
        (["--metrics", "host:port"], "--metrics"),
        (["--metrics", "127.0.0.1:70000"], "not in 0-65535"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(["engine", "--exit-when-done", "--no-record", *argv]))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("provetop: error:")
    assert message in err


def test_sizes_parse_and_print():
    from provetop.base.units import fmt_bytes, parse_size

    assert parse_size("16GiB") == 16 << 30
    assert parse_size("512 MiB") == 512 << 20
    assert parse_size("1.5G") == 3 << 29
    assert parse_size("4096") == 4096
    assert parse_size("2GB") == 2 * 10**9
    for bad in ("", "GiB", "-1GiB", "12 parsecs", "0"):
        with pytest.raises(ValueError):
            parse_size(bad)
    assert fmt_bytes(3 << 30) == "3.00 GiB"
    # one formatter for every size the product prints: the units, the rounding, unknowns
    assert fmt_bytes(1536 << 20) == "1.50 GiB"
    assert fmt_bytes(5 << 20) == "5.0 MiB" and fmt_bytes(1536) == "1.5 KiB"
    assert fmt_bytes(512) == "512 B" and fmt_bytes(0) == "0 B"
    assert fmt_bytes(None) == "?" and fmt_bytes(-1, unknown="–") == "–"
    assert fmt_bytes(16 << 30, unit=False) == "16.00"


def test_a_run_prints_its_socket_and_exits_0(tmp_path, capsys):
    rec = tmp_path / "r.pvtrec"
    code = main(["engine", "--preset", "ci", "--exit-when-done", "--record", str(rec)])
    out = capsys.readouterr().out
    assert code == 0
    assert "backend cpu (default:" in out and "listening on unix:" in out
    assert "2/2 partitions ok, 2 verified" in out
    assert rec.exists()


def test_bench_cpu_reports_per_phase_medians(capsys):
    import json

    assert main(["bench", "cpu", "--sizes", "3,4", "--repeat", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["domain_log"] for r in report["results"]] == [3, 4]
    for r in report["results"]:
        assert r["partitions"] == r["verified"] == 2
        assert {"synthesis", "h_step", "msm_h", "msm_l", "msm_a", "msm_b_g1"} <= set(r["phases_ms"])
        assert all(v >= 0 for v in r["phases_ms"].values())
    assert main(["bench", "cpu", "--sizes", "3", "--repeat", "1"]) == 0
    assert "msm_h" in capsys.readouterr().out
    assert main(["bench", "cpu", "--sizes", "40"]) == 2


def _start_engine_process(tmp_path, *extra):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    rec = tmp_path / "r.pvtrec"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "provetop",
            "engine",
            "--preset",
            "ci",
            "--record",
            str(rec),
            *extra,
        ],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stdout:
        if "listening on " in line:
            return proc, line.split("listening on ", 1)[1].strip(), rec
    raise AssertionError(proc.stderr.read())


def test_engine_serves_until_stopped_then_exits_0(tmp_path):
    from provetop.recordings.reader import open_recording
    from provetop.sources.client import EngineClient

    proc, address, rec = _start_engine_process(tmp_path)
    try:
        with EngineClient(address) as client:
            for e in client.events(timeout=30):
                if e["k"] == "engine_state" and e["state"] == "done":
                    break
            assert proc.poll() is None  # done, but still serving
            client.command("stop")
            assert proc.wait(30) == 0
    finally:
        proc.kill()
    recording = open_recording(rec)
    assert recording.complete and recording.state().totals()["partitions_verified"] == 2


def test_sigterm_closes_the_recording_cleanly(tmp_path):
    import signal

    from provetop.recordings.reader import open_recording

    proc, address, rec = _start_engine_process(tmp_path, "--proofs", "100000")
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0  # interrupted on purpose: a clean stop exits 0
    finally:
        proc.kill()
    assert open_recording(rec).complete
    import os

    assert not os.path.exists(address[5:])


def test_bench_targets_run_where_another_targets_dependency_is_missing():
    """On a GPU machine without Textual, ``bench msm`` must still parse (``bench tui`` alone is
    unavailable there, with the reason)."""
    import subprocess
    import sys

    code = (
        "import sys, builtins\n"
        "real = builtins.__import__\n"
        "def no_textual(name, *a, **k):\n"
        "    if name == 'textual' or name.startswith('textual.'):\n"
        "        raise ModuleNotFoundError(\"No module named 'textual'\", name='textual')\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = no_textual\n"
        "from provetop.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    ok = subprocess.run(
        [sys.executable, "-c", code, "bench", "cpu", "--help"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    tui = subprocess.run(
        [sys.executable, "-c", code, "bench", "tui"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tui.returncode == 2
    assert "bench target 'tui' is not available here: needs textual" in tui.stderr
