"""The modeled device's pools, the allocator policies and the workload they are fed with."""

from __future__ import annotations

import random

import numpy as np
import pytest

from provetop.engine.devices.base import DeviceOOM
from provetop.engine.devices.modeled import ModeledDevice
from provetop.engine.memory.allocator import (
    AwarePolicy,
    NaivePolicy,
    footprint,
    msm_scratch_bytes,
    phantom_capacity,
)
from provetop.engine.spec.workload import (
    POREP_A,
    POREP_B_G1,
    POREP_L,
    query_sizes,
    synthesize,
)
from provetop.recordings.schema import MEMORY_FIELDS
from provetop.recordings.state import phantom_bytes

KIB = 1 << 10


def test_sample_has_every_memory_field_and_is_modeled():
    dev = ModeledDevice(0, 64 * KIB, physical=256 * KIB)
    s = dev.sample()
    assert set(s) == set(MEMORY_FIELDS) and s["modeled"] is True
    assert s["ballast"] == 192 * KIB and s["driver_free"] == 64 * KIB
    assert s["driver_total"] == 256 * KIB and s["nvml_used"] == 192 * KIB


def test_async_pool_keeps_freed_memory_and_cudamalloc_cannot_use_it():
    dev = ModeledDevice(0, 64 * KIB)
    scratch = dev.malloc(40 * KIB, "async", "msm_scratch")
    dev.free(scratch)
    s = dev.sample()
    assert s["async_used"] == 0 and s["async_reserved"] == s["async_high"] == 40 * KIB
    assert s["driver_free"] == 24 * KIB
    # the pool itself reuses its reservation ...
    again = dev.malloc(30 * KIB, "async", "msm_scratch")
    assert dev.sample()["async_reserved"] == 40 * KIB
    dev.free(again)
    # ... but plain cudaMalloc is refused although 64 KiB sit free in the pools: phantom
    with pytest.raises(DeviceOOM) as exc:
        dev.malloc(32 * KIB, "raw", "prestage")
    pools = exc.value.pools
    assert phantom_bytes(pools) >= exc.value.requested > pools["driver_free"]
    assert dev.trim() == 40 * KIB
    blk = dev.malloc(32 * KIB, "raw", "prestage")
    assert dev.sample()["sync_used"] == 32 * KIB
    dev.free(blk)
    dev.free(blk)  # idempotent
    assert dev.sample()["driver_free"] == 64 * KIB


def test_sync_pool_caches_and_flushes_on_a_miss_like_cupy():
    dev = ModeledDevice(0, 64 * KIB)
    a = dev.malloc(24 * KIB, "sync", "ntt_scratch")
    dev.free(a)
    assert dev.sample()["sync_cached"] == 24 * KIB
    b = dev.malloc(20 * KIB, "sync", "ntt_scratch")  # served from the cache
    assert dev.sample()["sync_cached"] == 0 and dev.sample()["sync_used"] == 24 * KIB
    dev.free(b)
    c = dev.malloc(48 * KIB, "sync", "ntt_scratch")  # miss; cache flushed, then fits
    assert dev.sample()["sync_cached"] == 0
    dev.free(c)
    # the async pool cannot use the sync cache either (the other direction)
    with pytest.raises(DeviceOOM):
        dev.malloc(40 * KIB, "async", "msm_scratch")
    dev.pin(1000)
    dev.unpin(400)
    assert dev.sample()["pinned_host"] == 600


def test_policies_decide_from_what_is_really_free():
    sizes = query_sizes(6)
    fp = footprint(6, sizes)
    cap = phantom_capacity(fp, ModeledDevice(0, 1 << 30))
    dev = ModeledDevice(0, cap)
    scratch = dev.malloc(fp.msm_max, "async", "msm_scratch")
    dev.free(scratch)
    naive = NaivePolicy().prestage(dev, fp, forced=False)
    assert naive.status == "ok" and naive.free is None  # never looks
    aware = AwarePolicy().prestage(dev, fp, forced=False)
    assert aware.status == "ok" and aware.released >= fp.msm_max
    assert aware.free >= fp.prestage + fp.margin
    hog = dev.malloc(cap - fp.prestage, "raw", "prestage")  # leave less than need + margin
    skip = AwarePolicy().prestage(dev, fp, forced=False)
    assert skip.status == "skip" and "skip_vram" in skip.reason
    forced = AwarePolicy().prestage(dev, fp, forced=True)
    assert forced.status == "fallback" and forced.forced
    dev.free(hog)
    chunk = AwarePolicy().fallback_chunk(dev, fp, 3 * fp.u)
    assert chunk.chunk % 32 == 0 and 0 < chunk.chunk <= fp.u
    assert 3 * fp.u + 2 * chunk.chunk <= chunk.free


@pytest.mark.parametrize("k", [4, 6, 8, 10, 12, 16])
def test_phantom_capacity_separates_naive_from_aware(k):
    fp = footprint(k, query_sizes(k))
    dev = ModeledDevice(0, phantom_capacity(fp, ModeledDevice(0, 1 << 30)))

    def partition(trim_first: bool):
        if trim_first:
            dev.trim()
        blocks = []
        try:
            blocks.append(dev.malloc(fp.u, "raw", "prestage"))  # d_a
            blocks.append(dev.malloc(2 * fp.u, "raw", "prestage"))  # d_bc
            dev.free(blocks[1])
            for q in fp.msm:
                dev.free(dev.malloc(fp.msm[q], "async", "msm_scratch"))
        finally:
            for blk in blocks:
                dev.free(blk)

    partition(False)  # partition 0 fits on a fresh device, naive or not
    with pytest.raises(DeviceOOM) as exc:
        partition(False)  # naive partition 1: refused while the pools hold enough
    assert phantom_bytes(exc.value.pools) >= exc.value.requested
    for _ in range(3):
        partition(True)  # aware: trim first, always fits


def test_query_sizes_scale_porep():
    s = query_sizes(27)
    assert (s.h, s.l, s.a, s.b_g1) == ((1 << 27) - 1, POREP_L, POREP_A, POREP_B_G1)
    small = query_sizes(5)
    assert small.h == 31 and 1 <= small.b_g1 < small.a <= small.l <= 31
    assert msm_scratch_bytes(1 << 27) < 4 << 30  # batched: fits next to a 12 GiB pre-stage


def test_witness_satisfies_every_constraint_and_follows_the_profile():
    from provetop.kernels.constants import FR_MODULUS as r
    from provetop.kernels.layout import fr_from_limbs

    sizes = query_sizes(12)
    w = synthesize(12, sizes, (0.48, 0.48, 0.04), np.random.default_rng())
    a, b, c = (fr_from_limbs(v) for v in (w.a, w.b, w.c))
    assert all(x * y % r == z for x, y, z in zip(a, b, c, strict=True))
    m = w.z.shape[0]
    assert sum(w.counts.values()) == m
    assert abs(w.counts["zeros"] / m - 0.48) < 0.05
    assert abs(w.counts["ones"] / m - 0.48) < 0.05
    assert abs(w.counts["dense"] / m - 0.04) < 0.02
    dense = fr_from_limbs(w.z, montgomery=False)
    assert all(0 <= v < r for v in dense)


def test_upload_copies_into_a_block_with_room_in_chunks():
    from provetop.kernels.layout import random_fr_limbs

    dev = ModeledDevice(0, 64 * KIB)
    host = random_fr_limbs(100, np.random.default_rng())
    blk = dev.malloc(2 * host.nbytes, "raw", "prestage")
    for chunk in (None, 32, 1000, 10**6):
        out = dev.upload(host, blk, offset=host.nbytes, chunk=chunk)
        assert out is not host and np.array_equal(out, host)
    with pytest.raises(ValueError):
        dev.upload(host, blk, offset=host.nbytes + 512)
    dev.free(blk)
    with pytest.raises(ValueError):
        dev.upload(host, blk)  # freed
    back = dev.download(out)
    assert np.array_equal(back, host) and back is not out


def test_gate_wait_no_prestage_blocks_until_every_prestage_is_released():
    import threading
    import time

    from provetop.engine.partition.pipeline import DeviceGate

    gate = DeviceGate()
    assert gate.wait_no_prestage(0.01)  # nothing held
    assert gate.try_prestage()
    assert not gate.wait_no_prestage(0.05)  # held: times out
    released = []

    def release_later():
        time.sleep(0.1)
        released.append(time.monotonic())
        gate.prestage_released()

    threading.Thread(target=release_later).start()
    assert gate.wait_no_prestage(5.0)
    assert released  # returned only after the release


def test_gate_grants_no_new_prestage_while_a_fallback_waits():
    """The waiter cannot be starved by a neighbour that pre-stages again right after its
    release (the look-ahead makes that the common case)."""
    import threading

    from provetop.engine.partition.pipeline import DeviceGate

    gate = DeviceGate()
    assert gate.try_prestage()
    woke = threading.Event()
    waiter = threading.Thread(target=lambda: gate.wait_no_prestage(10.0) and woke.set())
    waiter.start()
    while not gate.waiting:
        threading.Event().wait(0.001)
    gate.prestage_released()
    granted = gate.try_prestage()  # the neighbour's next partition, before the waiter runs
    if granted:  # the waiter already left: then the wait is over and nothing was starved
        assert woke.wait(5) or gate.waiting == 0
    else:
        assert "waiting" in gate.refusal
    waiter.join(10)
    assert woke.is_set()
    if granted:
        gate.prestage_released()
    assert gate.waiting == 0 and gate.try_prestage()


def test_a_skipped_prestage_lets_the_neighbours_prestage_go_first(monkeypatch):
    """One pre-stage fits, two do not (a 16 GiB card with two workers at 2^27): a worker whose
    pre-stage was skipped waits for the neighbours' pre-staged buffers to be released before it
    takes the mutex, because its fallback's a, b, c may need that memory (on the H200 the
    skipped worker took the mutex first and every such partition OOMed). Pre-staged workers
    never wait."""
    from provetop.engine.partition.pipeline import DeviceGate
    from provetop.engine.run.runner import Engine
    from provetop.engine.settings.config import from_preset

    k = 8
    fp = footprint(k, query_sizes(k))
    r = ModeledDevice(0, 1 << 30).round
    capacity = r(fp.prestage) + fp.margin + r(fp.msm_max) + r(fp.u)
    waits = []
    real_wait = DeviceGate.wait_no_prestage

    def recording_wait(self, timeout):
        waits.append(self.prestaged)
        return real_wait(self, timeout)

    monkeypatch.setattr(DeviceGate, "wait_no_prestage", recording_wait)
    cfg = from_preset(
        None,
        backend="cpu",
        domain_log=k,
        partitions=6,
        proofs=1,
        workers_per_device=2,
        allocator="aware",
        device_memory=capacity,
        verify="always",
    )
    engine = Engine(cfg, listen=False, inject="delay:upload:100ms")
    sub = engine.subscribe("t")
    engine.start()
    assert engine.wait(120)
    engine.close()
    done = [e for e in sub.drain() if e["k"] == "partition_done"]
    skipped = [e for e in done if e["prestage"] == "skip"]
    assert skipped and len(waits) == len(skipped)
    assert all(e["ok"] and e["verified"] for e in done)


@pytest.mark.parametrize("refusals", [1, 2, 3])
def test_a_synthesis_refused_memory_tries_again_with_the_same_witness(monkeypatch, refusals):
    """A witness made on the device can be refused memory while a neighbour's fallback holds
    the card; it pauses and tries again (smaller chunks on CUDA), up to SYNTH_OOM_TRIES."""
    from provetop.engine.devices.base import DeviceOOM
    from provetop.engine.partition import pipeline
    from provetop.engine.partition.cpu import CpuPartition
    from provetop.engine.run.runner import Engine
    from provetop.engine.settings.config import from_preset

    monkeypatch.setattr(pipeline, "SYNTH_OOM_PAUSE_S", 0.01)
    real = CpuPartition.synthesize
    calls, witnesses = [], []

    def flaky(self, rng, tries=0):
        calls.append(tries)
        if len(calls) <= refusals:
            raise DeviceOOM(6 << 26, "async", "synthesis", self.device.sample())
        w = real(self, rng, tries)
        witnesses.append(w.a.copy())
        return w

    monkeypatch.setattr(CpuPartition, "synthesize", flaky)
    cfg = from_preset("ci", partitions=1, workers_per_device=1, seed=random.randrange(1 << 30))
    engine = Engine(cfg, listen=False)
    sub = engine.subscribe("t")
    engine.start()
    assert engine.wait(60)
    engine.close()
    events = sub.drain()
    ooms = [e for e in events if e["k"] == "fault" and e["kind"] == "oom"]
    done = [e for e in events if e["k"] == "partition_done"]
    assert len(ooms) == refusals and all(e["site"] == "synthesis" for e in ooms)
    assert calls[: refusals + 1] == list(range(min(refusals + 1, pipeline.SYNTH_OOM_TRIES)))
    if refusals < pipeline.SYNTH_OOM_TRIES:
        assert len(done) == 1 and done[0]["ok"] and done[0]["verified"]
        # the same witness as a run that was never refused
        again = pipeline.partition_rng(cfg.seed, 0, 0)
        assert np.array_equal(witnesses[0], real(engine_runner_stub(cfg), again).a)
    else:
        assert len(done) == 1 and not done[0]["ok"] and done[0]["prestage"] == "none"
        assert "out of memory" in done[0]["failure"]


def engine_runner_stub(cfg):
    """Just enough of a CpuPartition for its ``synthesize``."""
    from types import SimpleNamespace

    from provetop.engine.spec.workload import query_sizes

    return SimpleNamespace(ctx=SimpleNamespace(config=cfg, sizes=query_sizes(cfg.domain_log)))


def test_aware_empties_the_caching_pool_when_the_msms_would_not_fit():
    """A pre-stage block freed into the caching pool inside the GPU region: aware gives it
    back when the region's next stream-ordered blocks need it (the phantom from the other
    side, seen on a 16 GiB H200), and only then; naive leaves it, and the stream-ordered
    allocation is refused with the cache in the pool state."""
    for policy, trims in ((AwarePolicy(), True), (NaivePolicy(), False)):
        dev = ModeledDevice(0, 64 * KIB)
        d_bc = dev.malloc(40 * KIB, "sync", "prestage")
        dev.free(d_bc)  # cached: 24 KiB free to the driver
        assert policy.reclaim_cache(dev, 20 * KIB) is None  # fits: no trim, cache kept
        assert dev.sample()["sync_cached"] == 40 * KIB
        decision = policy.reclaim_cache(dev, 30 * KIB)
        if trims:
            assert decision.status == "trim" and decision.released == 40 * KIB
            assert decision.free == 64 * KIB and "30720" in decision.reason
            dev.free(dev.malloc(30 * KIB, "async", "msm_scalars"))
            # short with nothing cached: nothing to give back, no trim reported
            assert policy.reclaim_cache(dev, 65 * KIB) is None
        else:
            assert decision is None
            with pytest.raises(DeviceOOM) as exc:
                dev.malloc(30 * KIB, "async", "msm_scalars")
            assert exc.value.pools["sync_cached"] == 40 * KIB
