"""The reducer's view of ``progress`` events: the running steps, one log line per step."""

from __future__ import annotations

from provetop.recordings.schema import make
from provetop.recordings.state import State


def _progress(t: int, done: int, total: int = 100, **where: int) -> dict:
    return make(
        "progress", t, task="srs", label="SRS", done=done, total=total, unit="points",
        elapsed_s=t / 1e9, **where,
    )  # fmt: skip


def test_a_running_step_is_kept_until_it_ends_with_one_log_line():
    s = State()
    for t, done in ((1, 0), (2, 40), (3, 80)):
        s.apply(_progress(t, done))
    assert [e["done"] for e in s.progress.values()] == [80]
    assert not any(line.text.startswith("SRS") for line in s.log)
    s.apply(_progress(4, 100))
    assert s.progress == {}
    assert [line.text for line in s.log if line.text.startswith("SRS")] == [
        "SRS: 100/100 points (100 %), done in 0.0 s"
    ]


def test_steps_of_two_devices_are_kept_apart_and_a_done_engine_forgets_them():
    s = State()
    s.apply(_progress(1, 10, device=0))
    s.apply(_progress(2, 20, device=1))
    assert len(s.progress) == 2
    s.apply(make("engine_state", 3, state="done", reason="stopped before every proof was done"))
    assert s.progress == {}


def test_a_snapshot_carries_the_running_steps():
    s = State()
    s.apply(_progress(1, 30))
    again = State.from_snapshot(s.snapshot())
    assert [e["done"] for e in again.progress.values()] == [30]
    assert "progress" not in State().snapshot()  # a state without steps snapshots as before
