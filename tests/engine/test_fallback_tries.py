"""A fallback refused its a, b, c: aware pauses and tries again inside the attempt, naive does not.

Why: at 16 GiB the fallback's three 4 GiB arrays take 12.9 of the ~14.2 GB the stream-ordered
pool can reach, and on the H200 a neighbour's exact check (outside the mutex) kept a pool chunk
from being reused long enough that the retry after recovery was refused as well (naive16
recording: both retries beside a neighbour's check lost their partition). The modeled device
has no chunks, so the refusals are made here by hand.
"""

from __future__ import annotations

import pytest

from provetop.engine.devices.base import DeviceOOM
from provetop.engine.devices.modeled import ModeledDevice
from provetop.engine.partition import pipeline
from provetop.engine.partition.cpu import CpuPartition
from tests.engine.run_helper import run_engine


def run_forced_fallback(monkeypatch, allocator: str, refusals: int):
    """One partition, one worker, forced onto the fallback path; the first ``refusals``
    fallback allocations (async, site prestage) are refused. Returns (events, devices)."""
    from provetop.engine.telemetry.control import Controls

    monkeypatch.setattr(pipeline, "FALLBACK_OOM_PAUSE_S", 0.001)
    monkeypatch.setattr(Controls, "is_forced", lambda self, device: True)
    real = ModeledDevice.malloc
    refused = []

    def malloc(self, nbytes, pool, site):
        if pool == "async" and site == "prestage" and len(refused) < refusals:
            refused.append(nbytes)
            raise DeviceOOM(int(nbytes), pool, site, self.sample())
        return real(self, nbytes, pool, site)

    monkeypatch.setattr(ModeledDevice, "malloc", malloc)
    events, devices, _fp = run_ci(allocator, partitions=1)
    return events, devices


def run_ci(allocator: str, partitions: int):
    """The ``ci`` preset on one worker, every partition checked: (events, devices, footprint)."""
    from provetop.engine.settings.config import from_preset

    cfg = from_preset(
        "ci", partitions=partitions, workers_per_device=1, allocator=allocator, verify="always"
    )
    engine, events = run_engine(cfg)
    return events, list(engine.devices), engine.footprint


def _done(events):
    return [e for e in events if e["k"] == "partition_done"]


def _ooms(events):
    return [e for e in events if e["k"] == "fault" and e["kind"] == "oom"]


@pytest.mark.parametrize("refusals", [1, 3])
def test_aware_fallback_tries_again_inside_the_attempt(monkeypatch, refusals):
    events, devices = run_forced_fallback(monkeypatch, "aware", refusals)
    done = _done(events)
    assert len(done) == 1 and done[0]["ok"] and done[0]["verified"]
    assert done[0]["attempt"] == 0  # no retry was needed
    ooms = _ooms(events)
    assert len(ooms) == refusals and all(e["site"] == "prestage" and e["pools"] for e in ooms)
    # nothing a refused try allocated is left behind
    assert all(not d.live and d.async_used == 0 and d.raw_used == 0 for d in devices)
    assert all(d.pinned_host == 0 for d in devices)


def test_aware_gives_up_after_its_tries_and_the_retry_tries_again(monkeypatch):
    from provetop.engine.memory.allocator import AwarePolicy

    tries = AwarePolicy.fallback_tries
    events, devices = run_forced_fallback(monkeypatch, "aware", tries)
    done = _done(events)
    assert [e["attempt"] for e in done] == [0, 1]
    assert not done[0]["ok"] and done[0]["will_retry"] and done[1]["ok"]
    assert len(_ooms(events)) == tries
    assert all(not d.live and d.async_used == 0 for d in devices)


def test_naive_fallback_fails_at_its_first_refusal(monkeypatch):
    """Naive keeps the seed's behaviour, so the naive run still shows the failures."""
    events, devices = run_forced_fallback(monkeypatch, "naive", 2)
    done = _done(events)
    assert [e["ok"] for e in done] == [False, False]  # the retry met the second refusal
    assert len(_ooms(events)) == 2
    assert all(not d.live and d.async_used == 0 for d in devices)


@pytest.mark.parametrize("allocator", ["aware", "naive"])
def test_a_cached_prestage_block_is_reclaimed_for_the_msms_by_aware_only(monkeypatch, allocator):
    """The CUDA runner's pre-stage blocks come from a caching pool; after the H step d_bc sits
    in that cache. The pipeline asks the policy, with the region's remaining need, whether
    to give it back; here the need is made larger than what is free so that aware must."""
    from provetop.engine.memory.allocator import AwarePolicy, NaivePolicy

    monkeypatch.setattr(CpuPartition, "prestage_pool", "sync")
    asked = []
    for cls in (AwarePolicy, NaivePolicy):
        real = cls.reclaim_cache

        def reclaim(self, device, need, real=real):
            asked.append(need)
            return real(self, device, device.mem_info()[0] + need)  # short: aware trims

        monkeypatch.setattr(cls, "reclaim_cache", reclaim)
    events, _devices, fp = run_ci(allocator, partitions=2)
    done = _done(events)
    assert len(done) == 2 and all(e["ok"] and e["verified"] for e in done)
    assert len(asked) == 2 and all(n > 0 for n in asked)  # once per pre-staged partition
    assert asked[0] == fp.msm_max + fp.margin  # the modeled runner: no scalars block
    trims = [e for e in events if e["k"] == "alloc" and e["decision"] == "trim"]
    if allocator == "aware":
        assert len(trims) == 2 and all(e["pool"] == "sync" for e in trims)
        assert all(e["pools"]["sync_cached"] == 0 for e in trims)
    else:
        assert trims == []


def test_aware_fallback_reclaims_cached_prestage_blocks_before_its_a_b_c(monkeypatch):
    """A fallback under the mutex may find the pre-stage blocks a neighbour gave back while
    it waited still in the caching pool (the CUDA runner's pre-stage pool). The CUDA
    runner's pinned fallback takes a, b, c from the stream-ordered pool without the policy's
    trim, so the pipeline asks ``reclaim_cache`` first: aware empties the cache and the first
    try fits. Here the policy's fallback trim is turned off to stand for that path."""
    from provetop.engine.memory.allocator import AwarePolicy, Decision
    from provetop.engine.run.runner import Engine
    from provetop.engine.settings.config import from_preset
    from provetop.engine.telemetry.control import Controls

    monkeypatch.setattr(CpuPartition, "prestage_pool", "sync")
    monkeypatch.setattr(Controls, "is_forced", lambda self, device: True)

    def no_trim(self, device, fp, working):
        return Decision("fallback", "whole arrays (test: no trim)", chunk=fp.u)

    monkeypatch.setattr(AwarePolicy, "fallback_chunk", no_trim)
    cfg = from_preset("ci", partitions=1, workers_per_device=1, allocator="aware")
    engine = Engine(cfg, listen=False)
    fp = engine.footprint
    (dev,) = engine.devices
    free, _total = dev.mem_info()
    cached = free - 2 * dev.round(fp.u)  # leaves room for two of the fallback's arrays
    dev.free(dev.malloc(cached, "sync", "prestage"))  # a neighbour's pre-stage, given back
    assert dev.sample()["sync_cached"] >= cached
    sub = engine.subscribe("t")
    engine.start()
    assert engine.wait(60)
    engine.close()
    events = sub.drain()
    done = _done(events)
    assert [(e["ok"], e["attempt"], e["prestage"]) for e in done] == [(True, 0, "fallback")]
    assert _ooms(events) == []  # without the reclaim the third array is refused
    trims = [e for e in events if e["k"] == "alloc" and e["decision"] == "trim"]
    assert len(trims) == 1 and trims[0]["site"] == "prestage" and trims[0]["pool"] == "sync"
    assert trims[0]["requested"] == 3 * fp.u + fp.margin
    assert trims[0]["pools"]["sync_cached"] == 0
