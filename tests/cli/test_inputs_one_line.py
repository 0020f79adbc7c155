"""Engine flags that used to escape one line, and the exit code after a recording error on a
signalled stop: ``--seed -1`` (a ValueError later, exit 1), ``--witness-profile nan,nan,nan``
(passed the sum check), ``--nvml-interval nan``, ``--record ''`` (recorded to the default
place), a FIFO or a 200 MiB token file (start-up hung, or read it whole)."""

from __future__ import annotations

import os
import signal
import threading

import pytest

import provetop.engine.run.runner as runner_mod
from provetop import cli
from provetop.base.errors import UsageError
from provetop.commands.watch import read_token as read_client_token
from provetop.engine.telemetry.server import ListenError, read_token
from provetop.recordings.writer import RecordingWriter
from tests.engine.test_record_errors import FullDisk

BASE = ["engine", "--backend", "cpu", "--preset", "ci", "--exit-when-done", "--no-record"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--seed", "-1"], "--seed -1: must be between 0 and 2^63 - 1"),
        (["--seed", str(1 << 64)], "must be between 0 and 2^63 - 1"),
        (["--witness-profile", "nan,nan,nan"], "finite number"),
        (["--witness-profile", "inf,0,0"], "finite number"),
        (["--witness-profile=-0.5,0.5,1"], "finite number"),
        (["--nvml-interval", "nan"], "--nvml-interval"),
        (["--nvml-interval", "-1"], "--nvml-interval"),
    ],
)
def test_bad_numbers_are_one_line_and_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(cli.main([*BASE, *argv]))
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and message in err[0], err


@pytest.mark.parametrize("command", ["engine", "run"])
def test_an_empty_record_path_is_refused_not_the_default(command, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    argv = [command, "--backend", "cpu", "--preset", "ci", "--record", ""]
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(cli.main(argv))
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and err == ["provetop: error: --record: an empty path"], err
    assert not (tmp_path / "provetop").exists()


def _fifo(tmp_path):
    path = tmp_path / "token"
    os.mkfifo(path, 0o600)
    return path


def _in_time(fn, *args):
    """``fn(*args)`` in a thread, given 20 s; its exception (or None)."""
    out: list[BaseException | None] = []

    def call():
        try:
            fn(*args)
            out.append(None)
        except BaseException as exc:  # noqa: BLE001 (handed back to the test)
            out.append(exc)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(20)
    if worker.is_alive():
        os.close(os.open(args[0], os.O_WRONLY | os.O_NONBLOCK))  # let it go
        pytest.fail("reading the token file blocked on a FIFO")
    return out[0]


def test_token_files_that_are_fifos_or_huge_are_refused_at_once(tmp_path):
    fifo = _fifo(tmp_path)
    exc = _in_time(read_token, str(fifo))
    assert isinstance(exc, ListenError) and "is a FIFO" in str(exc), exc
    exc = _in_time(read_client_token, str(fifo))
    assert isinstance(exc, UsageError) and "is a FIFO" in str(exc), exc
    huge = tmp_path / "huge"
    with open(huge, "wb") as f:
        f.truncate(200 << 20)  # sparse: 200 MiB that cost no disk
    os.chmod(huge, 0o600)
    with pytest.raises(ListenError, match="larger than the 4096-byte limit"):
        read_token(str(huge))
    with pytest.raises(UsageError, match="larger than the 4096-byte limit"):
        read_client_token(str(huge))


def test_continue_after_a_disk_error_still_exits_1_when_stopped_by_sigterm(
    tmp_path, capsys, monkeypatch
):
    class FullDiskThenSigterm(RecordingWriter):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._file = FullDisk(self._file, budget=600)

        def _fail(self, exc):
            message = super()._fail(exc)
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
            return message

    monkeypatch.setattr(runner_mod, "RecordingWriter", FullDiskThenSigterm)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        code = cli.main(
            ["engine", "--backend", "cpu", "--preset", "ci", "--verify", "never",
             "--proofs", "1000", "--on-record-error", "continue",
             "--listen", f"unix:{tmp_path / 'e.sock'}", "--record", str(tmp_path / "r.pvtrec")]
        )  # fmt: skip
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    captured = capsys.readouterr()
    assert "--on-record-error continue" in captured.err
    assert code == 1, captured
