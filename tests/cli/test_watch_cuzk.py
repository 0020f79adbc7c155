"""`provetop watch --cuzk-log/--cuzk-status`: argument errors are one line and exit 2."""

import subprocess
import sys


def _watch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "provetop", "watch", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_directory_is_not_a_log(tmp_path):
    proc = _watch("--cuzk-log", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "not a readable file" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_interval_must_be_positive(tmp_path):
    proc = _watch("--cuzk-status", "http://127.0.0.1:9/status", "--cuzk-interval", "0")
    assert proc.returncode == 2 and "--cuzk-interval" in proc.stderr
