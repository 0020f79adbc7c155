"""``provetop trace``'s session on real processes, sockets and recordings, with stand-in programs.

The traced programs are ``tests/trace/standin_program.py``: they speak the injection library's
protocol themselves (there is no GPU here), so everything of the trace's own runs for real: the
child with its exit code, the listener, one stream per process, lanes for two processes on one
GPU, the heal broker's commands and answers, the recording, the telemetry socket. The library
itself against a stand-in driver is ``tests/kernels/test_inject_build.py``; on a real GPU,
``tests/kernels/test_cuda_trace.py``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from provetop.recordings.reader import open_recording
from provetop.sources.client import EngineClient
from provetop.trace.lanes import LANE_STRIDE
from provetop.trace.session import TraceOptions, TraceSession

ROOT = Path(__file__).resolve().parents[2]
GIB = 1 << 30


def standin(scenario: str) -> list[str]:
    return [sys.executable, "-m", "tests.trace.standin_program", scenario]


def run_session(tmp_path: Path, command: list[str], **kw: Any) -> tuple[TraceSession, int]:
    record = tmp_path / "trace.pvtrec"
    fake_lib = tmp_path / "not-a-library.so"  # the stand-ins never load it
    fake_lib.write_bytes(b"")
    session = TraceSession(
        TraceOptions(command=command, library=fake_lib, record=str(record), listen=False, **kw)
    )
    session.start()
    try:
        rc = session.wait()
    finally:
        session.close()
    return session, rc


def events_of(path: Path) -> list[dict[str, Any]]:
    rec = open_recording(path)
    assert rec.complete, rec.truncation
    return [e for e in rec.events if e.get("k") != "snapshot"]


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the stand-in runs as python -m tests.trace.standin_program
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def test_an_oom_with_its_phantom_and_the_exit_code(tmp_path: Path) -> None:
    session, rc = run_session(tmp_path, standin("oom"))
    assert rc == 7  # the program's own exit code
    events = events_of(tmp_path / "trace.pvtrec")
    hello = events[0]
    assert hello["k"] == "hello" and hello["source"] == "trace"
    assert hello["config"]["adapter"] == "trace"
    assert hello["config"]["command"] == standin("oom")
    memory = [e for e in events if e["k"] == "memory"]
    assert memory and memory[0]["async_reserved"] == 8 * GIB and memory[0]["pid"] > 0
    (fault,) = [e for e in events if e["k"] == "fault" and e["kind"] == "oom"]
    assert fault["requested"] == 6 * GIB
    assert fault["phantom"] == 8 * GIB
    assert fault["case"] == "phantom"  # 2 GiB free + 8 GiB unused >= 6 GiB
    assert "would have made it fit" in fault["message"]
    assert events[-1]["k"] == "engine_state" and events[-1]["state"] == "done"
    assert "code 7" in events[-1]["reason"]
    assert session.summary()["ooms"] == 1
    from provetop.recordings.summary import build_summary, format_summary

    text = format_summary(build_summary(tmp_path / "trace.pvtrec"))
    assert "async reserved 8.00 GiB" in text and "OOMs 1 (phantom 1)" in text


def test_a_crashed_program_leaves_a_readable_recording(tmp_path: Path) -> None:
    _, rc = run_session(tmp_path, standin("crash"))
    assert rc == 9
    events = events_of(tmp_path / "trace.pvtrec")
    assert any(e["k"] == "memory" for e in events)
    cut = [e for e in events if e["k"] == "fault" and e["kind"] == "source"]
    assert cut and "without its exit record" in cut[0]["message"]


def test_a_program_that_cannot_start(tmp_path: Path) -> None:
    from provetop.trace.session import TraceError

    fake_lib = tmp_path / "lib.so"
    fake_lib.write_bytes(b"")
    record = tmp_path / "r.pvtrec"
    session = TraceSession(
        TraceOptions(
            command=["/nonexistent/program"], library=fake_lib, record=str(record), listen=False
        )
    )
    with pytest.raises(TraceError, match="cannot run '/nonexistent/program'"):
        session.start()
    assert not record.exists()  # nothing left behind


def two_processes(tmp_path: Path) -> list[str]:
    """A shell that starts a holder, then a process that needs the holder's reserve."""
    stop = tmp_path / "stop"
    py = f"{sys.executable} -m tests.trace.standin_program"
    script = (
        f"STANDIN_STOP={stop} {py} hold & sleep 1; {py} need; rc=$?; touch {stop}; wait; exit $rc"
    )
    return ["sh", "-c", script]


@pytest.mark.skipif(shutil.which("sh") is None, reason="no sh")
def test_heal_across_processes(tmp_path: Path) -> None:
    session, rc = run_session(tmp_path, two_processes(tmp_path), heal=True)
    assert rc == 0  # the needer's allocation succeeded
    events = events_of(tmp_path / "trace.pvtrec")
    pids = {e["pid"] for e in events if e["k"] == "memory"}
    assert len(pids) == 2
    lanes = {e["device"] for e in events if e["k"] == "memory"}
    assert lanes == {0, LANE_STRIDE}  # two processes on one GPU: two lanes
    # the closing line names each lane by its GPU, as the dashboard does, not by its lane number
    assert sorted((v["gpu"], v["pid"]) for v in session.summary()["lanes"].values()) == [
        (0, p) for p in sorted(pids)
    ]
    (asked,) = [e for e in events if e["k"] == "alloc" and e["site"] == "heal"]
    assert asked["decision"] == "trim" and len(asked["peers"]) == 1
    (trim,) = [e for e in events if e["k"] == "alloc" and e["site"] == "trim"]
    assert trim["pid"] == asked["peers"][0]
    assert trim["reclaimed"] == 8 * GIB and trim["took_ns"] > 0
    assert not [e for e in events if e["k"] == "fault" and e["kind"] == "oom"]


@pytest.mark.skipif(shutil.which("sh") is None, reason="no sh")
def test_without_heal_the_refusal_names_the_other_process(tmp_path: Path) -> None:
    """The stand-in asks whatever its environment says; unanswered, its allocation is refused,
    and the fault names the process whose reserve is the phantom."""
    session, rc = run_session(tmp_path, two_processes(tmp_path), heal=False)
    assert session.broker.served == 0
    events = events_of(tmp_path / "trace.pvtrec")
    assert rc == 3
    (fault,) = [e for e in events if e["k"] == "fault" and e["kind"] == "oom"]
    holder = next(e["pid"] for e in events if e["k"] == "memory" and e["async_reserved"])
    assert fault["peers_unused"] == {str(holder): 8 * GIB}
    assert fault["case"] == "phantom" and f"pid {holder} holds 8.00 GiB" in fault["message"]


def test_heal_sets_the_librarys_environment(tmp_path: Path) -> None:
    from provetop.trace.child import traced_env

    env = traced_env(
        {"PROVETOP_TRACE_OUT": "fd:3", "X": "1"}, tmp_path / "l.so", "/s", interval_ms=50, heal=True
    )
    assert env["PROVETOP_TRACE_OUT"] == "unix:/s" and env["X"] == "1"
    assert env["PROVETOP_TRACE_HEAL"] == "1" and env["PROVETOP_TRACE_INTERVAL_MS"] == "50"
    assert "PROVETOP_TRACE_HEAL" not in traced_env({}, tmp_path, "/s", interval_ms=1, heal=False)


def test_operator_trim_and_a_watcher(tmp_path: Path) -> None:
    """A client attached to the trace's telemetry socket (as ``watch`` is) sends ``trim``; the
    holder's library trims and the client sees the result."""
    stop = tmp_path / "stop"
    fake_lib = tmp_path / "lib.so"
    fake_lib.write_bytes(b"")
    session = TraceSession(
        TraceOptions(command=standin("hold"), library=fake_lib, record=str(tmp_path / "r.pvtrec"))
    )
    import os

    os.environ["STANDIN_STOP"] = str(stop)
    try:
        session.start()
    finally:
        del os.environ["STANDIN_STOP"]
    assert session.address
    seen: list[dict[str, Any]] = []
    got_trim = threading.Event()
    try:
        with EngineClient(session.address) as client:
            asked = False
            for e in client.events(timeout=20):
                seen.append(e)
                if e["k"] == "memory" and not asked:
                    client.command("trim")
                    asked = True
                if e["k"] == "alloc" and e.get("site") == "trim":
                    got_trim.set()
                    break
    finally:
        stop.touch()
        session.wait()
        session.close()
    assert got_trim.is_set(), [e["k"] for e in seen]
    acks = [e for e in seen if e["k"] == "control"]
    assert acks and acks[0]["ok"]
    refused = session.command("pause")
    assert not refused["ok"] and "cannot be paused" in refused["error"]


def test_the_cli_without_a_gpu_exits_2_with_one_line(tmp_path: Path) -> None:
    from provetop.commands.trace import gpu_problem

    if gpu_problem() is None:
        pytest.skip("a GPU is visible here: the GPU tests cover the command")
    done = subprocess.run(
        [sys.executable, "-m", "provetop", "trace", "--", "true"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "trace needs an NVIDIA GPU" in lines[0], done.stderr
