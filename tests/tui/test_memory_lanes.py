"""The timeline's memory lanes for a trace (no pipeline): each traced process's holding and
its phantom on the timeline's axis, its OOM marked, the legend naming only what is drawn; an
engine with a pipeline keeps its lanes and legend."""

from __future__ import annotations

from pathlib import Path

from rich.style import Style

from provetop.recordings.reader import open_recording
from provetop.recordings.state import State
from provetop.tui.widgets import memory_lanes
from provetop.tui.widgets.timeline import LABEL_W
from tests.tui.helpers import fixed_events

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "recordings" / "samples" / "h100-trace-torch-cupy.pvtrec"


def _trace_state() -> State:
    return State().fold(open_recording(TRACE).events)


def _plain(strips) -> list[str]:
    return ["".join(seg.text for seg in strip) for strip in strips]


def test_a_trace_draws_a_held_and_a_phantom_row_per_process():
    state = _trace_state()
    assert not state.lanes() and memory_lanes.shown(state) == [0, 64]
    # 10 s in 100 columns of 0.1 s. pid 574 samples 8 GiB reserved from 6.22 s to 7.05 s, all
    # of it unused (phantom); pid 575 holds 68 GiB of sync memory from 6.41 s, its OOM at
    # 6.66 s, then frees it (6.71 s) and stops sampling at 6.72 s. A column shows the newest
    # sample up to 1 s old: 574 until the column of 8.0 s, 575 until that of 7.7 s.
    rows = _plain(memory_lanes.lane_rows(state, 0, 10**10, 100, LABEL_W, LABEL_W + 100, Style()))
    assert [r[:LABEL_W].rstrip() for r in rows] == ["pid 574", "phantom", "pid 575", "phantom"]
    held574, phantom574, held575, phantom575 = (r[LABEL_W:] for r in rows)
    assert held574 == " " * 62 + "█" * 19 + " " * 19
    assert phantom574 == held574  # reserved and unused: all of it phantom
    assert held575 == " " * 64 + "███" + "_" * 11 + " " * 22
    assert phantom575 == " " * 64 + "__✖" + "_" * 11 + " " * 22  # the OOM on its column
    text = memory_lanes.detail(state, int(6.5e9))
    assert text == "pid 574 8.00 GiB held, 8.00 GiB phantom · pid 575 68.06 GiB held, 0 B phantom"
    assert memory_lanes.detail(state, int(1e9)) == "pid 574 – · pid 575 –"


def test_an_engine_with_a_pipeline_has_no_memory_lanes():
    state = State().fold(fixed_events(20))
    assert state.lanes() and state.series and memory_lanes.shown(state) == []
