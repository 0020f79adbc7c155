"""A run that lasts by the clock (``--duration``, the demo preset's minute): no proof starts
once the time is up, the proofs started finish, and the run counts as complete. The clock is
a stand-in, so the test does not rest on the machine's speed."""

from __future__ import annotations

from provetop.engine.run.workers import Scheduler
from provetop.engine.settings.config import from_preset


def test_no_proof_starts_after_the_duration_and_started_ones_finish():
    now = [0.0]
    sched = Scheduler(1000, 2, 1, duration_s=60.0, clock=lambda: now[0])
    for proof in (0, 1):  # two whole proofs inside the minute
        assert sched.next() == (proof, 0) and sched.next() == (proof, 1)
        sched.finish(proof, True)
        sched.finish(proof, True)
        now[0] += 25.0
    assert sched.next() == (2, 0)  # at 50 s: proof 2 starts
    now[0] = 61.0  # the time is up in the middle of proof 2: its last partition still goes
    assert sched.next() == (2, 1)
    assert sched.next() is None and sched.all_dispatched
    assert sched.proofs == sched.proofs_started == 3


def test_the_demo_lasts_a_minute_unless_a_count_is_asked_for():
    assert from_preset("demo").duration_s == 60.0
    assert from_preset("demo", proofs=5).duration_s is None
    assert from_preset("demo", proofs=5, duration_s=10.0).duration_s == 10.0
