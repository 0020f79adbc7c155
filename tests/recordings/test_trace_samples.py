"""The trace samples say what recordings/samples/README.md says of them: recomputed here from the
files, so that the README cannot drift from them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from provetop.recordings.reader import open_recording
from provetop.recordings.summary import build_summary

SAMPLES = Path(__file__).resolve().parents[2] / "recordings" / "samples"
GIB = 1 << 30


def _events(name: str) -> list[dict[str, Any]]:
    rec = open_recording(SAMPLES / name)
    assert rec.complete
    return rec.events


def _of(events: list[dict[str, Any]], k: str, **match: Any) -> list[dict[str, Any]]:
    return [e for e in events if e["k"] == k and all(e.get(f) == v for f, v in match.items())]


def test_the_phantom_sample_refuses_a_fitting_allocation_and_names_the_holder() -> None:
    events = _events("h100-trace-torch-cupy.pvtrec")
    hello = events[0]
    assert hello["source"] == "trace" and hello["config"]["adapter"] == "trace"
    assert [d["name"] for d in hello["devices"]] == ["NVIDIA H100 80GB HBM3"]
    (holder,) = {e["pid"] for e in _of(events, "alloc", pool="async")}
    (oom,) = _of(events, "fault", kind="oom")
    assert oom["requested"] == 6 * GIB and oom["case"] == "phantom"
    assert oom["peers_unused"] == {str(holder): 8 * GIB}
    assert oom["pid"] != holder
    lanes = {e["device"] for e in _of(events, "memory")}
    assert len(lanes) == 2 and {d % hello["config"]["lane_stride"] for d in lanes} == {0}
    assert events[-1]["k"] == "engine_state"  # closed as done: the recording is whole
    assert not _of(events, "alloc", site="trim")
    memory = {
        r["pid"]: r for r in build_summary(SAMPLES / "h100-trace-torch-cupy.pvtrec")["memory"]
    }
    assert memory[holder]["async_reserved_peak"] == 8 * GIB
    assert memory[oom["pid"]]["driver_free_min"] <= 2 * GIB + (2 << 20)  # filled to 2 GiB free


def test_the_heal_sample_trims_the_holder_and_the_allocation_succeeds() -> None:
    events = _events("h100-trace-torch-cupy-heal.pvtrec")
    assert not _of(events, "fault", kind="oom")
    (trim,) = _of(events, "alloc", site="trim")
    assert trim["reclaimed"] == 8 * GIB and round(trim["took_ns"] / 1e6) == 10
    (asked,) = _of(events, "alloc", site="heal")
    assert asked["pid"] != trim["pid"] and asked["requested"] == 6 * GIB
    big = [e for e in _of(events, "alloc", pid=asked["pid"]) if e["requested"] == 6 * GIB]
    assert [e["decision"] for e in big] == ["trim", "ok"]  # the request, then the allocation
