"""A neighbour's synthesis held behind the running region's H step
(provetop.engine.memory.h_step_fence):
the fence alone, then through the driver with ops whose H step is 'queued'."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
import pytest

from provetop.engine.devices.modeled import ModeledDevice
from provetop.engine.memory.allocator import footprint, make_policy
from provetop.engine.memory.gate import DeviceGate
from provetop.engine.memory.h_step_fence import HStepFence
from provetop.engine.partition.cpu import CpuPartition
from provetop.engine.partition.pipeline import PartitionRunner, RunContext
from provetop.engine.settings.config import from_preset
from provetop.engine.spec.srs import generate_srs
from provetop.engine.spec.workload import query_sizes
from provetop.engine.telemetry.bus import Bus
from provetop.engine.telemetry.control import Controls
from provetop.kernels.cpu_backend import CpuBackend


def _in_thread(fn):
    """Run ``fn`` in a thread; (thread, box) where box["out"] is its result once joined."""
    box: dict = {}
    t = threading.Thread(target=lambda: box.__setitem__("out", fn()), daemon=True)
    t.start()
    return t, box


def test_nothing_wanted_or_running_lets_a_synthesis_go_at_once():
    fence = HStepFence()
    t0 = time.monotonic()
    assert fence.wait_queued(timeout=5) is True
    assert time.monotonic() - t0 < 1


def test_a_queued_h_step_is_what_the_synthesis_waits_for():
    fence = HStepFence()
    fence.want(0)
    fence.acquired(0, fenced=True)
    fence.queued(0)
    t0 = time.monotonic()
    assert fence.wait_queued(timeout=5) is True
    fence.released(0)
    assert fence.wait_queued(timeout=5) is True
    assert time.monotonic() - t0 < 1


def test_a_synthesis_between_two_regions_waits_for_the_next_h_step_to_be_queued():
    fence = HStepFence()
    fence.want(1)  # worker 1 waits for the mutex that worker 0 is giving back
    t, box = _in_thread(lambda: fence.wait_queued(timeout=10))
    time.sleep(0.1)
    assert t.is_alive()  # wanted, not yet held: the synthesis waits on the host
    fence.acquired(1, fenced=True)
    time.sleep(0.1)
    assert t.is_alive()  # held, its H step not yet queued
    fence.queued(1)
    t.join(5)
    assert not t.is_alive() and box["out"] is True


def test_an_unfenced_region_and_a_region_given_back_release_the_waiter():
    fence = HStepFence()
    fence.want(0)
    fence.acquired(0, fenced=False)  # a streamed H step
    t0 = time.monotonic()
    assert fence.wait_queued(timeout=5) is True
    assert time.monotonic() - t0 < 1
    fence.released(0)
    fence.want(1)
    t, box = _in_thread(lambda: fence.wait_queued(timeout=10))
    time.sleep(0.05)
    fence.released(1)  # the attempt failed before it got the mutex
    t.join(5)
    assert not t.is_alive() and box["out"] is True


def test_the_wait_is_bounded_and_only_the_holder_publishes_or_clears():
    fence = HStepFence()
    fence.want(0)
    t0 = time.monotonic()
    assert fence.wait_queued(timeout=0.2) is False  # nobody came: goes ahead unfenced
    assert 0.15 < time.monotonic() - t0 < 2
    fence.acquired(0, fenced=True)
    fence.queued(1)  # not the holder's
    fence.released(1)
    assert fence.wait_queued(timeout=0.2) is False  # the holder's H step is not queued yet
    fence.queued(0)
    assert fence.wait_queued(timeout=5) is True


# -- through the driver ------------------------------------------------------------------------


class MarkedOps(CpuPartition):
    """CPU ops that pretend their H step is queued on a device (``h_step_async``): every
    synthesis and every check is logged with its worker, and worker 0's first region stops
    after its H step until ``hold`` is set."""

    h_step_async = True
    log: list = []
    in_region = threading.Event()
    hold = threading.Event()

    def __init__(self, scope) -> None:
        super().__init__(scope)
        self.marks = 0  # H steps this worker has taken

    def synthesize(self, rng, tries=0):
        MarkedOps.log.append((self.scope.worker, "synthesis"))
        return super().synthesize(rng, tries)

    def h_step(self, a, b, c):
        self.marks += 1
        return super().h_step(a, b, c)

    def verify(self, att, w, h, results):
        MarkedOps.log.append((self.scope.worker, "verify"))
        return super().verify(att, w, h, results)

    def msm_scalars(self, att, w, h):
        if self.scope.worker == 0 and self.marks == 1:
            MarkedOps.in_region.set()
            assert MarkedOps.hold.wait(10)
        return super().msm_scalars(att, w, h)


_buses: list[Bus] = []


@pytest.fixture(autouse=True)
def _close_buses():
    """Each driver test's bus stops its dispatcher thread when the test ends."""
    yield
    while _buses:
        _buses.pop().close()


def _runners() -> tuple[PartitionRunner, PartitionRunner, threading.Lock]:
    cfg = from_preset("ci", seed=random.randrange(1 << 30), workers_per_device=2)
    sizes = query_sizes(cfg.domain_log)
    backend = CpuBackend()
    srs = generate_srs(backend, sizes, np.random.default_rng())
    bus = Bus()
    _buses.append(bus)
    ctx = RunContext(
        cfg,
        backend,
        srs,
        sizes,
        footprint(cfg.domain_log, sizes),
        make_policy("aware"),
        bus,
        Controls(),
        lambda d: None,
    )
    dev, gate, mutex = ModeledDevice(0, 1 << 30), DeviceGate(), threading.Lock()
    # The CPU H step of worker 0 may take longer than the engine's 1.5 s bound on a loaded
    # machine; past it the synthesis would go ahead unfenced and the test would read timing.
    gate.h_step = HStepFence(wait_s=60)
    return (
        PartitionRunner(ctx, dev, 0, mutex, gate, ops=MarkedOps),
        PartitionRunner(ctx, dev, 1, mutex, gate, ops=MarkedOps),
        mutex,
    )


def _reset() -> None:
    MarkedOps.log = []
    MarkedOps.in_region.clear()
    MarkedOps.hold.clear()


def test_a_synthesis_started_while_the_next_region_waits_for_the_mutex_waits_for_its_h_step():
    _reset()
    w0, w1, mutex = _runners()
    prep0 = w0.prepare(0, 0)
    mutex.acquire()  # a region that is ending: worker 0 must wait for the mutex
    t, box = _in_thread(lambda: w0.complete(prep0))
    while 0 not in w0.gate.h_step._wanting:
        time.sleep(0.01)
    s, sbox = _in_thread(lambda: w1.prepare(0, 1))
    time.sleep(0.3)
    assert s.is_alive()  # held on the host until worker 0's H step is queued
    mutex.release()
    # Worker 0 stays in its region (after its H step, ``hold``) until the synthesis is back:
    # a region that ended before the waiting thread got the GIL would rightly leave it
    # nothing to wait for, and the test would read the scheduler instead of the fence.
    s.join(30)
    MarkedOps.hold.set()
    t.join(30)
    assert box["out"].ok and w1.complete(sbox["out"]).ok
    assert (1, "synthesis") in MarkedOps.log
    # the wait is not the synthesis's: its phase times the witness alone (milliseconds here)
    assert sbox["out"].att.phases_ms["synthesis"] < 250


def test_a_synthesis_while_a_region_runs_after_its_h_step_goes_at_once():
    """The fence holds only the host work that would run beside the holder's host steps
    before its H step: once the H step is queued, a synthesis starts at once, and with
    nothing running any more, too."""
    _reset()
    w0, w1, _mutex = _runners()
    t, box = _in_thread(lambda: w0.run(0, 0))
    assert MarkedOps.in_region.wait(30)  # worker 0 holds the region, its H step queued
    t0 = time.monotonic()
    prep = w1.prepare(0, 1)
    # held, it would have waited for worker 0's region to end (which waits 10 s for ``hold``)
    assert time.monotonic() - t0 < 5 and MarkedOps.log[-1] == (1, "synthesis")
    MarkedOps.hold.set()
    t.join(30)
    assert box["out"].ok
    assert w1.complete(prep).ok
    w0.prepare(0, 2)  # nothing running any more: the next synthesis waits for nothing
    assert MarkedOps.log[-1] == (0, "synthesis")


def test_a_checked_partitions_host_check_waits_for_the_next_regions_h_step():
    """The check runs in Python after the region (the ci preset checks every partition): with
    the next region wanted and its H step not yet queued, it waits; then it runs."""
    _reset()
    MarkedOps.hold.set()
    w0, _w1, _mutex = _runners()
    fence = w0.gate.h_step
    prep = w0.prepare(0, 0)
    fence.want(1)  # worker 1 waits for the mutex worker 0 is about to give back
    t, box = _in_thread(lambda: w0.complete(prep))
    t.join(0.5)
    assert t.is_alive() and (0, "verify") not in MarkedOps.log
    fence.acquired(1, fenced=True)
    fence.queued(1)
    t.join(30)
    assert box["out"].ok and box["out"].verified
    assert (0, "verify") in MarkedOps.log
