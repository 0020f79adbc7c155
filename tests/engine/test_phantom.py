"""The seed's phantom OOM on the modeled device, and the memory-aware fix."""

from __future__ import annotations

import pytest

from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.recordings.state import phantom_bytes


def _run(allocator: str, **overrides):
    engine = Engine(from_preset("phantom", allocator=allocator, **overrides), listen=False)
    sub = engine.subscribe("test")
    engine.start()
    assert engine.wait(60)
    engine.close()
    return engine, [e for e in sub.drain() if e["k"] != "snapshot"]


def test_naive_allocator_fails_later_partitions_with_phantom_memory():
    engine, events = _run("naive")
    done = [e for e in events if e["k"] == "partition_done"]
    first = {e["partition"]: e for e in done if e["attempt"] == 0}
    # partition 0 pre-stages and completes, as in the seed
    assert first[0]["ok"] and first[0]["prestage"] == "ok" and first[0]["verified"]
    # every later partition's first attempt dies of OOM ...
    parts = engine.config.partitions
    for p in range(1, parts):
        assert not first[p]["ok"] and first[p]["will_retry"]
        assert "OOM" in first[p]["failure"] and first[p]["prestage"] == "fallback"
    ooms = [e for e in events if e["k"] == "fault" and e["kind"] == "oom"]
    assert {e["partition"] for e in ooms} == set(range(1, parts))
    for e in ooms:
        pools = e["pools"]
        # ... while the pools together hold enough free memory for the request: phantom
        assert phantom_bytes(pools) >= e["requested"] > pools["driver_free"]
        assert e["site"] == "prestage" and pools["modeled"] is True
    # ... and the retry on the fallback path recovers every one (never lost, never poisoned)
    retries = {e["partition"]: e for e in done if e["attempt"] == 1}
    assert set(retries) == set(range(1, parts))
    assert all(e["ok"] and e["verified"] and e["prestage"] == "fallback" for e in retries.values())
    assert engine.ok


def test_aware_allocator_completes_every_partition():
    engine, events = _run("aware")
    done = [e for e in events if e["k"] == "partition_done"]
    assert sorted(e["partition"] for e in done) == list(range(engine.config.partitions))
    assert all(e["ok"] and e["verified"] and e["attempt"] == 0 for e in done)
    assert not [e for e in events if e["k"] == "fault"]
    decisions = [e for e in events if e["k"] == "alloc" and e["site"] == "prestage"]
    assert decisions and all(e["free"] >= e["requested"] + e["margin"] for e in decisions)
    assert engine.ok


@pytest.mark.parametrize("allocator", ["naive", "aware"])
def test_two_workers_never_lose_a_partition(allocator):
    """With two workers the order of pre-stages varies, but nothing is ever lost."""
    engine, events = _run(allocator, workers_per_device=2)
    final = {}
    for e in events:
        if e["k"] == "partition_done":
            final[e["partition"]] = e
    assert len(final) == engine.config.partitions
    assert all(e["ok"] and e["verified"] for e in final.values())
    if allocator == "aware":
        # the pre-stage decision leaves room for what the other worker's GPU region still
        # needs, so two workers on the tight card never OOM either
        assert not [e for e in events if e["k"] == "fault"]
