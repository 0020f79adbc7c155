"""A recording that cannot be written (disk full) mid-run: one line on stderr and a ``fault``
at once, the run's policy (``--on-record-error stop|continue``), exit 1 with that one line
and no traceback, and memory that stays flat while events keep coming.

The full disk is a real file whose writes fail with ENOSPC once a byte budget is spent."""

from __future__ import annotations

import errno
import signal
import time
import tracemalloc

import provetop.engine.run.runner as runner_mod
from provetop import cli
from provetop.engine.partition.testing import GatedBackend
from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.kernels.backends import get_backend
from provetop.recordings.reader import open_recording
from provetop.recordings.writer import RecordingWriter
from tests.recordings.fixtures import hello


class FullDisk:
    """A file that takes ``budget`` bytes, then fails every write like a full disk."""

    def __init__(self, real, budget: int = 0) -> None:
        self.real, self.budget = real, budget

    def write(self, data) -> int:
        if len(data) > self.budget:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.budget -= len(data)
        return self.real.write(data)

    def fileno(self) -> int:
        return self.real.fileno()

    def close(self) -> None:
        self.real.close()


def test_the_error_is_reported_once_and_later_writes_keep_memory_flat(tmp_path):
    reports = []
    w = RecordingWriter(tmp_path / "w.pvtrec", flush_every_s=0.05, on_error=reports.append)
    w._file = FullDisk(w._file)
    w.write(hello())
    deadline = time.monotonic() + 5
    while not reports and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(reports) == 1 and "No space left" in reports[0]
    marker = {"k": "marker", "t": 1, "name": "m" * 100}
    for _ in range(2000):  # warm up, then measure
        w.write(marker)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(20000):
        w.write(marker)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown < 64 << 10, grown  # not a frame, a traceback or an event kept per write
    assert reports == reports[:1] and w.events_dropped == 22000
    try:
        w.close()
    except Exception as exc:  # close still says the recording failed
        assert "No space left" in str(exc)
    else:
        raise AssertionError("close() did not report the error")


def _held_engine(tmp_path, policy):
    backend = GatedBackend(get_backend("cpu"))
    backend.hold()
    cfg = from_preset("ci", partitions=4, workers_per_device=1, on_record_error=policy)
    engine = Engine(cfg, backend=backend, listen=False, record=tmp_path / "e.pvtrec")
    engine.start()
    engine.recorder._file = FullDisk(engine.recorder._file)
    return engine, backend


def _wait_for_error(engine):
    deadline = time.monotonic() + 5
    while engine.record_error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.record_error is not None


def test_stop_policy_reports_at_once_and_stops_after_the_partition_in_flight(tmp_path, capsys):
    engine, backend = _held_engine(tmp_path, "stop")
    try:
        assert backend.wait_entered(1)
        _wait_for_error(engine)
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith("provetop: recording failed: cannot write")
        assert "No space left" in err[0] and "--on-record-error stop" in err[0]
        engine.bus.flush()
        faults = [f for f in engine.state.faults if f.get("site") == "recording"]
        assert len(faults) == 1 and "No space left" in faults[0]["message"]
        assert engine.state.engine_state == "stopping"
        backend.release()
        assert engine.wait(60)
        engine.bus.flush()
        rows = engine.state.partitions.values()
        assert 1 <= len(rows) < 4 and all(r.ok for r in rows)  # in flight finished, no more
        assert not engine.ok
    finally:
        backend.release()
        engine.close()  # no exception: the error was reported and kept
    assert capsys.readouterr().err == ""  # reported once, not again at close
    rec = open_recording(tmp_path / "e.pvtrec")  # what reached the disk reads as a cut file
    assert rec.truncated and not rec.complete


def test_continue_policy_runs_to_the_end_and_still_fails_the_exit(tmp_path, capsys):
    engine, backend = _held_engine(tmp_path, "continue")
    try:
        _wait_for_error(engine)
        assert "--on-record-error continue" in capsys.readouterr().err
        backend.release()
        assert engine.wait(60)
        engine.bus.flush()
        assert engine.state.totals()["partitions_ok"] == 4
        assert not engine.ok  # every proof done, but the recording is not there
    finally:
        backend.release()
        engine.close()


def test_the_engine_command_exits_1_with_one_line_and_no_traceback(tmp_path, capsys, monkeypatch):
    class FullDiskWriter(RecordingWriter):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._file = FullDisk(self._file, budget=600)  # the header goes, then hello fails

    monkeypatch.setattr(runner_mod, "RecordingWriter", FullDiskWriter)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        code = cli.main(
            [
                "engine",
                "--backend",
                "cpu",
                "--preset",
                "ci",
                "--verify",
                "never",
                "--exit-when-done",
                "--listen",
                f"unix:{tmp_path / 'e.sock'}",
                "--record",
                str(tmp_path / "full.pvtrec"),
            ]
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
    captured = capsys.readouterr()
    assert code == 1
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("provetop: recording failed: cannot write recording")
    assert "Traceback" not in captured.err + captured.out
