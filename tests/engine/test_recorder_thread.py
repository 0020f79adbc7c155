"""The recorder never waits on clients: with the bus's dispatcher held up (as a connect/close
storm held it, building snapshots under the bus lock), events still reach the file within the
flush interval; and the real engine, killed with SIGKILL in the middle of a storm of
connections, loses at most a second of events."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from provetop.engine.telemetry.bus import Bus
from provetop.recordings.reader import RecordingError, open_recording
from provetop.recordings.writer import RecordingWriter
from tests.recordings.fixtures import hello

ROOT = Path(__file__).resolve().parents[2]


def test_a_stalled_dispatcher_does_not_hold_back_the_recording(tmp_path):
    path = tmp_path / "r.pvtrec"
    writer = RecordingWriter(path, flush_every_s=0.1)
    bus = Bus()
    bus.add_recorder(writer)
    release = threading.Event()
    bus.add_listener(lambda e: e["k"] == "marker" and release.wait(30))  # the dispatcher stalls
    try:
        bus.publish(hello())
        for i in range(200):
            bus.emit("marker", name=f"m{i}")
        deadline = time.monotonic() + 2
        names: list[str] = []
        while time.monotonic() < deadline and len(names) < 200:
            time.sleep(0.05)
            names = [e["name"] for e in open_recording(path).events if e["k"] == "marker"]
        assert names == [f"m{i}" for i in range(200)]
        assert bus.state.events <= 2  # the dispatcher is still stuck on the first marker
    finally:
        release.set()
        assert bus.flush(10)
        bus.close()
        writer.close()
    assert open_recording(path).complete


def _storm(path: str, stop: threading.Event, counts: list[int]) -> None:
    while not stop.is_set():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            counts.append(1)
        except OSError:
            pass
        finally:
            s.close()


def _partitions_done(path: Path) -> int:
    try:
        return sum(1 for e in open_recording(path).events if e["k"] == "partition_done")
    except RecordingError:
        return 0


def test_sigkill_during_a_connect_close_storm_loses_at_most_a_second(tmp_path):
    rec_path = tmp_path / "storm.pvtrec"
    sock = tmp_path / "e.sock"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_RUNTIME_DIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "provetop", "engine", "--backend", "cpu", "--preset", "ci"]
    cmd += ["--verify", "never", "--proofs", "100000", "--exit-when-done"]
    cmd += ["--record", str(rec_path), "--listen", f"unix:{sock}"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stop = threading.Event()
    counts: list[int] = []
    storm = [threading.Thread(target=_storm, args=(str(sock), stop, counts)) for _ in range(4)]
    try:
        deadline = time.monotonic() + 60
        while _partitions_done(rec_path) < 2:
            if proc.poll() is not None:
                pytest.fail(f"engine exited early: {proc.stderr.read().decode()[-2000:]}")
            assert time.monotonic() < deadline, "the engine recorded no partition in 60 s"
            time.sleep(0.1)
        for t in storm:
            t.start()
        time.sleep(3.0)
        killed_wall_ns = time.time_ns()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        stop.set()
        for t in storm:
            if t.is_alive():
                t.join(10)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert len(counts) > 100, "no storm"
    rec = open_recording(rec_path)
    last_wall_ns = rec.hello["wall_ns"] + max(e["t"] for e in rec.events)
    lost_s = (killed_wall_ns - last_wall_ns) / 1e9
    print(f"{len(counts)} connections; lost {lost_s:.3f} s")
    assert lost_s <= 1.0, f"{lost_s:.3f} s of events lost"
