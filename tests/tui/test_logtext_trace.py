"""The event log names a traced process's lane as the memory panel does, and says where the
phantom of a refusal was: in another process (the trace sample's OOM, read from the file)."""

from __future__ import annotations

from pathlib import Path

from provetop.recordings.reader import open_recording
from provetop.recordings.state import State
from provetop.tui.logtext import LogFolder
from provetop.tui.widgets.memory import MemoryPanel

SAMPLE = Path(__file__).resolve().parents[2] / "recordings/samples/h100-trace-torch-cupy.pvtrec"


def _texts(events: list[dict]) -> list[str]:
    folder = LogFolder()
    for line in State().fold(events).log:
        folder.add(line)
    return [e.text for e in folder.entries]


def test_a_traced_oom_names_its_gpu_and_pid_and_the_other_processs_phantom() -> None:
    events = open_recording(SAMPLE).events
    (oom,) = [t for t in _texts(events) if t.startswith("OOM")]
    needer = next(e["pid"] for e in events if e["k"] == "fault")
    assert oom.startswith(f"OOM gpu0 pid {needer}: ")  # not its lane number (64)
    assert oom.endswith("phantom 0 B here, 8.00 GiB in other processes, driver free 2.00 GiB")


def test_an_engine_oom_keeps_its_worker() -> None:
    events = open_recording(SAMPLE).events
    hello = dict(events[0], source="provetop", config={})  # an engine: no lanes
    fault = next(e for e in events if e["k"] == "fault")
    engine_fault = {k: v for k, v in fault.items() if k not in ("pid", "peers_unused")}
    engine_fault.update(device=1, worker=0)
    (oom,) = [t for t in _texts([hello, engine_fault]) if t.startswith("OOM")]
    assert oom.startswith("OOM gpu1 w0: ") and "other processes" not in oom


def test_a_faults_pools_are_labelled_by_their_lane_gpu_and_pid() -> None:
    """A fault's pools carry no pid; pinned in the memory panel, the lane still reads
    ``gpu0 pid N`` (from its own samples), never its lane number."""
    events = open_recording(SAMPLE).events
    fault = next(e for e in events if e["k"] == "fault")
    panel = MemoryPanel()
    panel.state = State().fold(events)
    assert panel._label(fault["device"], dict(fault["pools"])) == f"gpu0 pid {fault['pid']}"
