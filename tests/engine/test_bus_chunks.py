"""The bus keeps its retained events in immutable chunks: a joining client gets references to
them, not a copy of the history under the bus lock, and still ends with exactly the live state."""

from __future__ import annotations

import provetop.engine.telemetry.bus as bus_mod
from provetop.engine.telemetry.bus import Bus
from provetop.recordings.state import State
from tests.recordings.fixtures import make_run


def _filled(monkeypatch, *, chunk: int, retain: int, partitions: int, proofs: int, seed: int):
    """A bus with chunks of ``chunk`` events that has dispatched a whole fixture run."""
    monkeypatch.setattr(bus_mod, "RETAIN_CHUNK", chunk)
    bus = Bus(retain=retain)
    for e in make_run(partitions=partitions, workers=2, proofs=proofs, seed=seed):
        bus.publish(e)
    assert bus.flush(10)
    return bus


def test_a_join_copies_at_most_one_chunk_and_shares_the_rest(monkeypatch):
    bus = _filled(monkeypatch, chunk=16, retain=400, partitions=30, proofs=3, seed=5)
    try:
        assert bus.retained > 3 * 16  # several chunks to share
        a, b = bus.subscribe("a"), bus.subscribe("b")
        parts_a, parts_b = list(a._initial), list(b._initial)
        # hello and the snapshot, then the chunks: the same objects for both clients
        assert parts_a[0][1] is parts_b[0][1]
        assert all(x is y for x, y in zip(parts_a[1:-1], parts_b[1:-1], strict=True))
        # what subscribe copied under the lock: the unfinished chunk only (bounded)
        assert len(parts_a[-1]) <= 16 and parts_a[-1] is not parts_b[-1]
        assert sum(len(p) for p in parts_a[1:]) == bus.retained
        a.close()
        b.close()
    finally:
        bus.close()


def test_late_joiners_end_with_the_live_state_at_every_chunk_boundary(monkeypatch):
    """Chunks of 7 against turns every 50 events: a turn never drops half a chunk, the
    retained history stays within ``retain``, and every joiner folds to the live totals."""
    monkeypatch.setattr(bus_mod, "RETAIN_CHUNK", 7)
    bus = Bus(retain=100)
    events = make_run(partitions=30, workers=2, proofs=3, seed=7)
    try:
        for i, e in enumerate(events):
            bus.publish(e)
            if i % 37 == 0 or i == len(events) - 1:
                assert bus.flush(10)
                assert bus.retained <= bus.retain
                sub = bus.subscribe(f"c{i}")
                joined = State().fold(sub.drain())
                assert joined.totals() == bus.state.totals(), i
                sub.close()
    finally:
        bus.close()


def test_initial_slices_never_span_two_chunks(monkeypatch):
    bus = _filled(monkeypatch, chunk=10, retain=1000, partitions=20, proofs=2, seed=3)
    try:
        sub = bus.subscribe("s")
        chunks = list(sub._initial)
        slices = []
        while part := sub.take_initial(4):
            slices.append(part)
        assert [e for p in slices for e in p] == [e for c in chunks for e in c]
        assert max(len(p) for p in slices) <= 4
        whole = bus.subscribe("w")
        assert all(p is c for p, c in zip(_take_all(whole, 64), chunks[1:], strict=False))
        sub.close()
        whole.close()
    finally:
        bus.close()


def _take_all(sub, most):
    out = []
    while part := sub.take_initial(most):
        out.append(part)
    return out[1:]
