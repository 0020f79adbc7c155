"""The bus's one log of live events (Subscription's cursor): every subscriber reads every
event in order, a slow one is told what it missed, a closed one still reads what came before
its close, and slots nobody will read again are cleared."""

from __future__ import annotations

from provetop.engine.telemetry.bus import SCAN_EVERY, Bus


def _live(events: list[dict]) -> list[dict]:
    return [e for e in events if e["k"] not in ("snapshot", "hello")]


def test_every_subscriber_reads_every_event_in_order():
    bus = Bus()
    subs = [bus.subscribe(f"c{i}") for i in range(64)]
    n = 3 * SCAN_EVERY + 7  # across scans
    for i in range(n):
        bus.emit("marker", name=f"m{i}")
    assert bus.flush()
    for sub in subs:
        got = _live(sub.drain())
        assert [e["name"] for e in got] == [f"m{i}" for i in range(n)]
        assert sub.pending() == 0 and sub.get(0) is None
    assert bus.lagged_events == 0
    bus.close()


def test_a_subscriber_further_behind_than_its_window_is_told_once_how_many_it_missed():
    bus = Bus(client_queue=SCAN_EVERY)
    slow, quick = bus.subscribe("slow"), bus.subscribe("quick")
    n = 5 * SCAN_EVERY
    names = []
    for i in range(n):
        bus.emit("marker", name=f"m{i}")
        if i % 100 == 99:
            assert bus.flush()
            names += [e["name"] for e in _live(quick.drain())]
    assert bus.flush()
    names += [e["name"] for e in _live(quick.drain())]
    assert names == [f"m{i}" for i in range(n)]  # one that keeps up misses nothing
    got = _live(slow.drain())
    lags = [e for e in got if e["k"] == "lag"]
    assert len(lags) == 1 and got[0]["k"] == "lag"
    kept = [e["name"] for e in got[1:]]
    assert kept == [f"m{i}" for i in range(n - len(kept), n)]  # the newest, in order
    assert lags[0]["missed"] == n - len(kept) and len(kept) <= SCAN_EVERY
    assert bus.lagged_events == lags[0]["missed"] == slow.missed
    bus.close()


def test_a_closed_subscriber_reads_what_came_before_its_close_across_scans():
    bus = Bus()
    sub = bus.subscribe("closing")
    for i in range(10):
        bus.emit("marker", name=f"before{i}")
    assert bus.flush()
    sub.close()
    for i in range(3 * SCAN_EVERY):  # scans clear what no open subscriber reads
        bus.emit("marker", name=f"after{i}")
    assert bus.flush()
    got = _live(sub.drain())
    assert [e["name"] for e in got] == [f"before{i}" for i in range(10)]
    assert sub.get(0) is None and sub.pending() == 0
    bus.close()


def test_slots_nobody_reads_again_are_cleared():
    bus = Bus()
    sub = bus.subscribe("reader")
    for i in range(4 * SCAN_EVERY):
        bus.emit("marker", name=f"m{i}")
        if i % SCAN_EVERY == 0:
            assert bus.flush()
            sub.drain()
    assert bus.flush()
    sub.drain()
    held = [e for e in bus._ring if e is not None]
    assert len(held) <= SCAN_EVERY  # at most the events since the last scan
    bus.close()


def test_a_subscriber_with_a_larger_window_grows_the_log_and_keeps_its_events():
    bus = Bus(client_queue=SCAN_EVERY)
    big = bus.subscribe("big", maxlen=8 * SCAN_EVERY)
    n = 6 * SCAN_EVERY
    for i in range(n):
        bus.emit("marker", name=f"m{i}")
    assert bus.flush()
    assert [e["name"] for e in _live(big.drain())] == [f"m{i}" for i in range(n)]
    bus.close()
