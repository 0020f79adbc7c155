"""The engine on a real GPU: the CUDA backend, the real-pool device, NVML, SRS residency.

Two halves. CPU tests (run everywhere) cover the pure decisions: the ballast plan, OOM
classification, backend selection and its start-up line, the SRS residency rule, and NVML's
failure tolerance, the latter with a *fake* ``pynvml`` module (labelled as such below: it
stands in for the library so the wrapper's error paths can be driven; it proves nothing about
NVML itself). GPU tests (marker ``gpu``, skipped with the reason without CuPy and a device)
check the backend against the CPU reference on fresh random inputs, the in-place H step, the
real pools (the phantom OOM itself: cudaMalloc refused while the stream-ordered pool keeps
reserved memory; the trim that ends it), ballast, host registration and its fallback, and a
whole small engine run.
"""

from __future__ import annotations

import random
import sys
import types

import numpy as np
import pytest

from provetop.engine.devices import cuda as dcuda
from provetop.engine.memory.allocator import footprint
from provetop.engine.memory.residency import G1_AFFINE_BYTES, partition_need, plan_residency
from provetop.engine.spec.workload import query_sizes
from provetop.kernels.tuning import KernelTuning

GiB = 1 << 30


# -- CPU: pure helpers ----------------------------------------------------------------------------


def test_ballast_plan_makes_the_card_look_smaller():
    total = 140 * GiB + random.randrange(GiB)
    free = total - random.randrange(GiB)
    want = 16 * GiB
    plan = dcuda.plan_ballast(want, free, total)
    assert plan.ballast == total - want and plan.capacity == want and plan.note is None
    # what the engine then sees free is what a 16 GiB card with the same overhead has
    assert free - plan.ballast == want - (total - free)


def test_ballast_plan_whole_card_and_too_large():
    total = 80 * GiB
    assert dcuda.plan_ballast(None, total, total) == dcuda.BallastPlan(0, total)
    big = dcuda.plan_ballast(100 * GiB, total, total)
    assert big.ballast == 0 and big.capacity == total and "exceeds" in big.note


def test_ballast_that_does_not_fit_is_one_clear_line():
    total = 80 * GiB
    with pytest.raises(dcuda.CudaDeviceError) as exc:
        dcuda.plan_ballast(16 * GiB, 10 * GiB, total)  # someone else holds 70 GiB
    msg = str(exc.value)
    assert "\n" not in msg and "--device-memory" in msg and "does not fit" in msg


def test_oom_classification():
    class OutOfMemoryError(Exception):
        pass

    class CUDARuntimeError(Exception):
        def __init__(self, status):
            self.status = status

    assert dcuda.is_oom(OutOfMemoryError("x"))
    assert dcuda.is_oom(CUDARuntimeError(2))
    assert not dcuda.is_oom(CUDARuntimeError(700))
    assert not dcuda.is_oom(ValueError("no"))
    reason = dcuda.register_failure_reason(CUDARuntimeError(712))
    assert "already registered" in reason
    assert "pageable" in dcuda.register_failure_reason(CUDARuntimeError(1))


def test_pool_sample_has_every_memory_field():
    from provetop.recordings.schema import MEMORY_FIELDS, validate

    r = [random.randrange(1 << 40) for _ in range(8)]
    attrs = {dcuda.ATTR_RESERVED_CURRENT: r[0], dcuda.ATTR_RESERVED_HIGH: r[1]}
    attrs |= {dcuda.ATTR_USED_CURRENT: r[2], dcuda.ATTR_USED_HIGH: r[3]}
    s = dcuda.pool_sample(
        raw_used=r[4],
        sync_used=r[5],
        sync_cached=r[6],
        async_attrs=attrs,
        pinned_host=7,
        ballast=r[7],
        free=11,
        total=13,
        nvml={"nvml_used": 1, "nvml_free": 2, "nvml_total": 3},
        counters={"register_ok": 4, "register_fallback": 5},
    )
    required = {k for k, f in MEMORY_FIELDS.items() if f.required}
    assert required <= set(s)
    assert s["sync_used"] == r[4] + r[5] and s["async_reserved"] == r[0]
    assert s["async_high"] == r[1] and s["async_used"] == r[2] and s["modeled"] is False
    validate({"k": "memory", "t": 0, "device": 0, **s})


def test_backend_choice_and_start_up_line():
    assert dcuda.choose_backend("cpu", lambda: None) == ("cpu", "backend cpu (asked for)")
    assert dcuda.choose_backend(None, lambda: None)[0] == "cuda"
    name, line = dcuda.choose_backend(None, lambda: "no GPU visible")
    assert name == "cpu" and "no GPU visible" in line and "modeled" in line


def test_default_backend_line_without_a_gpu(monkeypatch):
    import argparse

    from provetop.engine.run import options as cmd

    monkeypatch.setattr(dcuda, "gpu_visible", lambda: False)
    args = argparse.Namespace(backend=None)
    assert cmd.default_backend(args) == "cpu"
    line = cmd.backend_note(args)
    assert line.startswith("backend cpu (default: no GPU visible)") and "modeled" in line
    assert cmd.backend_note(argparse.Namespace(backend="cuda")) == "backend cuda"


def test_cuda_backend_without_cupy_says_why():
    """Where CuPy is missing, get_backend('cuda') fails with the reason, in one exception."""
    try:
        import cupy  # noqa: F401

        pytest.skip("CuPy is installed here")
    except ImportError:
        pass
    from provetop.kernels.backends import BackendUnavailable, get_backend

    with pytest.raises(BackendUnavailable) as exc:
        get_backend("cuda")
    assert "CuPy" in str(exc.value)


def test_is_host():
    from provetop.kernels.cuda.backend import is_host

    assert is_host(np.zeros((2, 4), np.uint64))
    assert is_host([1, 2])


# -- CPU: SRS residency rule --------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_residency_at_porep_size(workers):
    sizes = query_sizes(27)
    fp = footprint(27, sizes)
    chunk = (1 << 22) * G1_AFFINE_BYTES
    total_srs = sum(sizes.as_dict().values()) * G1_AFFINE_BYTES
    # an uncapped H200: everything on the device
    big = plan_residency(sizes.as_dict(), 139 * GiB, fp, workers, chunk)
    assert all(p.where == "device" for p in big)
    assert sum(p.nbytes for p in big) == total_srs
    # a 16 GiB card: nothing fits next to the partitions
    small = plan_residency(sizes.as_dict(), 15 * GiB, fp, workers, chunk)
    assert all(p.where == "host" for p in small)
    assert all("pinned host" in p.reason for p in small)


def test_residency_partial_largest_first_and_never_over_budget():
    rng = random.Random()
    sizes = {q: rng.randrange(1, 1 << 20) for q in ("h", "l", "a", "b_g1")}
    fp = footprint(20, query_sizes(20))
    chunk = rng.randrange(1 << 20, 1 << 24)
    need = partition_need(fp, 2, chunk)
    srs_bytes = sorted((m * G1_AFFINE_BYTES for m in sizes.values()), reverse=True)
    free = need + srs_bytes[0] + rng.randrange(srs_bytes[-1])  # the largest fits, maybe more
    plan = plan_residency(sizes, free, fp, 2, chunk)
    assert [p.nbytes for p in plan] == srs_bytes
    assert plan[0].where == "device"
    on_device = sum(p.nbytes for p in plan if p.where == "device")
    assert on_device + need <= free


# -- CPU: the CUDA run's pipeline pieces, on the modeled device --------------------------------


class _HostTimer:
    """FAKE GPU timer for the CPU test: host clock, so the wiring of gpu_ms is exercised; the
    numbers are real elapsed host times, not GPU times."""

    def start(self):
        import time

        self.t0 = time.perf_counter()

    def stop(self):
        import time

        return (time.perf_counter() - self.t0) * 1e3


def test_cuda_partition_runner_times_gpu_phases_and_reserves_msm_scratch():
    import threading
    from dataclasses import replace

    from provetop.engine.devices.modeled import ModeledDevice
    from provetop.engine.memory.allocator import make_policy
    from provetop.engine.partition.cuda import COPY_PHASES, GPU_PHASES, CudaPartitionRunner
    from provetop.engine.partition.pipeline import RunContext
    from provetop.engine.settings.config import from_preset
    from provetop.engine.spec.srs import generate_srs
    from provetop.engine.telemetry.bus import Bus
    from provetop.engine.telemetry.control import Controls
    from provetop.kernels.cpu_backend import CpuBackend

    class TimedModeled(ModeledDevice):
        def gpu_timer(self):
            timers.append("gpu")
            return _HostTimer()

        def copy_timer(self):
            timers.append("copy")
            return _HostTimer()

    timers = []

    cfg = from_preset("ci", seed=random.randrange(1 << 30))
    sizes = query_sizes(cfg.domain_log)
    fp = footprint(cfg.domain_log, sizes)
    dev = TimedModeled(0, 1 << 30)
    bus = Bus()
    events = []
    bus.add_listener(events.append)
    backend = CpuBackend()
    srs = generate_srs(backend, sizes, np.random.default_rng())
    async_seen = []

    def sample(d):
        async_seen.append(d.sample()["async_used"])

    ctx = RunContext(cfg, backend, srs, sizes, fp, make_policy("aware"), bus, Controls(), sample)
    runner = CudaPartitionRunner(ctx, dev, 0, threading.Lock())
    result = runner.run(0, 0)
    bus.flush()
    assert result.ok and result.verified
    # an injected OOM at the (reserved, not allocated) MSM scratch site still fires
    from provetop.engine.partition.faults import FaultInjector

    inj = FaultInjector.from_spec("alloc:msm_scratch:1")
    inj.bind(bus.emit)
    runner = CudaPartitionRunner(replace(ctx, faults=inj), dev, 0, threading.Lock())
    result = runner.run(0, 1)
    bus.flush()
    assert result.ok and result.attempts == 2
    ooms = [e for e in events if e["k"] == "fault" and e["kind"] == "oom"]
    assert len(ooms) == 1 and ooms[0]["site"] == "msm_scratch"
    ends = [e for e in events if e["k"] == "phase_end"]
    timed = {e["phase"] for e in ends if "gpu_ms" in e}
    assert timed == (GPU_PHASES | COPY_PHASES) & {e["phase"] for e in ends}
    assert {"upload", "fallback_upload"} <= timed  # the first attempt pre-staged, the retry not
    assert set(timers) == {"gpu", "copy"}
    assert "h_step" in timed and all(e["gpu_ms"] >= 0 for e in ends if "gpu_ms" in e)
    assert max(async_seen) == 0  # the planned MSM scratch was never allocated on the device


def test_a_phase_failing_before_its_timer_started_reports_no_gpu_time():
    """The CUDA timers re-record one pair of events per thread. A phase that fails before its
    timer starts (an OOM injected at the H step's start) must report no ``gpu_ms``: stopping
    the pair then measured from the previous GPU phase's start. The timer here is a host
    stand-in sharing one start between timers, as the thread's event pair does (no GPU)."""
    import threading
    import time
    from dataclasses import replace

    from provetop.engine.devices.modeled import ModeledDevice
    from provetop.engine.memory.allocator import make_policy
    from provetop.engine.partition.cuda import CudaPartitionRunner
    from provetop.engine.partition.faults import FaultInjector
    from provetop.engine.partition.pipeline import RunContext
    from provetop.engine.settings.config import from_preset
    from provetop.engine.spec.srs import generate_srs
    from provetop.engine.telemetry.bus import Bus
    from provetop.engine.telemetry.control import Controls
    from provetop.kernels.cpu_backend import CpuBackend

    pair = {"start": None}  # the thread's one start event

    class ReusedTimer:
        def start(self):
            pair["start"] = time.perf_counter()

        def stop(self):
            if pair["start"] is None:  # cudaEventElapsedTime on a never-recorded event
                raise RuntimeError("start event never recorded")
            return (time.perf_counter() - pair["start"]) * 1e3

    class ReusedModeled(ModeledDevice):
        def gpu_timer(self):
            return ReusedTimer()

        def copy_timer(self):
            return _HostTimer()

    cfg = from_preset("ci", seed=random.randrange(1 << 30))
    sizes = query_sizes(cfg.domain_log)
    dev, bus, events = ReusedModeled(0, 1 << 30), Bus(), []
    bus.add_listener(events.append)
    backend = CpuBackend()
    srs = generate_srs(backend, sizes, np.random.default_rng())
    fp = footprint(cfg.domain_log, sizes)
    ctx = RunContext(
        cfg, backend, srs, sizes, fp, make_policy("aware"), bus, Controls(), lambda d: None
    )
    assert CudaPartitionRunner(ctx, dev, 0, threading.Lock()).run(0, 0).ok  # starts the pair
    inj = FaultInjector.from_spec("alloc:ntt_scratch:1")  # fires as h_step begins
    inj.bind(bus.emit)
    result = CudaPartitionRunner(replace(ctx, faults=inj), dev, 0, threading.Lock()).run(0, 1)
    bus.flush()
    assert result.ok and result.attempts == 2
    h_ends = [e for e in events if e["k"] == "phase_end" and e["phase"] == "h_step"]
    assert [e["ok"] for e in h_ends] == [True, False, True]
    assert "gpu_ms" in h_ends[0] and "gpu_ms" in h_ends[2]
    assert "gpu_ms" not in h_ends[1]  # failed before its timer started


def test_failed_attempt_orders_the_scalars_free_after_their_upload():
    """An attempt that fails after the aux scalars' async upload started (an OOM in msm_h)
    frees their block on the compute stream: the compute stream must first wait for the
    upload's event, or the pool may reuse the block while the copy still writes it. The
    device here is a stand-in that records the order of calls (no GPU)."""
    import threading

    from provetop.engine.devices.base import Block
    from provetop.engine.partition.cuda import CudaPartition
    from provetop.engine.partition.pipeline import Attempt, PartitionRunner

    log = []

    class Stream:
        def wait_event(self, ev):
            log.append(("wait", ev))

    class Dev:  # records calls; stands in for CudaDevice
        index = 0

        @property
        def cuda(self):  # its own CUDA side, as a CudaDevice is
            return self

        def streams(self):
            return types.SimpleNamespace(compute=Stream())

        def free(self, blk):
            log.append(("free", blk.site))

        def unpin(self, nbytes):
            pass

    ctx = types.SimpleNamespace(bus=None)
    runner = PartitionRunner(ctx, Dev(), 0, threading.Lock(), ops=CudaPartition)
    runner.ops._z_ready = "z-uploaded"
    att = Attempt(0, 0, 0)
    att.blocks.append(Block(pool="async", size=64, requested=64, site="msm_scalars"))
    runner._release(att)
    assert log == [("wait", "z-uploaded"), ("free", "msm_scalars")]
    assert runner.ops._z_ready is None
    log.clear()
    runner._release(att)  # nothing pending: no wait
    assert log == []
    # the fallback's b and c copies, still in flight when the attempt ends before its H step
    runner.ops._abc_ready = {"b": "b-uploaded", "c": "c-uploaded"}
    att.blocks.append(Block(pool="async", size=64, requested=64, site="prestage"))
    runner._release(att)
    assert log == [("wait", "b-uploaded"), ("wait", "c-uploaded"), ("free", "prestage")]
    assert runner.ops._abc_ready == {}


def test_cuda_ops_hand_the_copies_in_flight_to_the_h_step_or_the_check():
    """With b and c still going up, the H step gets their events (it waits for each before
    its part) and the next H step gets none; a checked partition's input check makes the
    compute stream wait for both before it reads them, and the H step then waits for none."""
    import threading

    from provetop.engine.partition.cuda import CudaPartition
    from provetop.engine.partition.pipeline import PartitionRunner

    waits, calls = [], []

    class Stream:
        def wait_event(self, ev):
            waits.append(ev)

    class Dev:
        index = 0

        @property
        def cuda(self):  # its own CUDA side, as a CudaDevice is
            return self

        def streams(self):
            return types.SimpleNamespace(compute=Stream())

    backend = types.SimpleNamespace(h_step=lambda a, b, c, **kw: calls.append(kw) or "h")
    ctx = types.SimpleNamespace(bus=None, backend=backend)
    ops = PartitionRunner(ctx, Dev(), 0, threading.Lock(), ops=CudaPartition).ops
    ops._abc_ready = {"b": "eb", "c": "ec"}
    assert ops.h_step("a", "b", "c") == "h"
    assert calls == [{"ready": {"b": "eb", "c": "ec"}}] and ops._abc_ready == {}
    ops.h_step("a", "b", "c")
    assert calls[-1] == {} and waits == []
    ops._abc_ready = {"b": "eb", "c": "ec"}
    ops._wait_for_abc()  # what check_inputs does first
    assert waits == ["eb", "ec"] and ops._abc_ready == {}


def test_cuda_ops_reserve_their_scalars_block_for_the_gpu_region():
    """The ledger a pre-staged partition commits (what neighbours' pre-stage decisions leave
    free) includes the aux scalars' block the CUDA ops allocate after the H step, as the
    cache reclaim's need does; on the fallback path, whichever of a, b, c or d_a + scalars +
    the largest MSM is larger. The device and witness are stand-ins (no GPU)."""
    from provetop.engine.memory.allocator import Footprint
    from provetop.engine.partition.cuda import CudaPartition
    from provetop.engine.partition.ops import WorkerScope

    u, z = 4 * GiB, random.randrange(1, 5 * GiB)
    fp = Footprint(u=u, msm={"h": 3 * GiB, "l": GiB}, margin=512 << 20)
    ctx = types.SimpleNamespace(
        footprint=fp, bus=None, backend=types.SimpleNamespace(host_scalars=False)
    )
    device = types.SimpleNamespace(round=lambda n: -(-n // 512) * 512, cuda=None)
    ops = CudaPartition(WorkerScope(ctx, device, 0))
    ops.real = True
    w = types.SimpleNamespace(pinned=True, z=types.SimpleNamespace(nbytes=z))
    rz = device.round(z)
    assert ops.gpu_extra(w, True) == fp.msm_max + rz
    assert ops.region_need(w) == fp.msm_max + fp.margin + rz
    assert ops.gpu_extra(w, False) == max(4 * u, u + rz + fp.msm_max)
    # a one pass that reads z from host memory chunk by chunk: no block for z at all
    ctx.backend = types.SimpleNamespace(host_scalars=True)
    assert ops.gpu_extra(w, True) == fp.gpu_extra(True)
    assert ops.region_need(w) == fp.msm_max + fp.margin
    assert ops.gpu_extra(w, False) == fp.gpu_extra(False)
    ctx.backend = None
    ops.real = False  # a modeled device: the footprint alone
    assert ops.gpu_extra(w, True) == fp.gpu_extra(True)


def test_a_free_that_raises_still_gives_the_gate_back():
    """Freeing a cached pre-stage block synchronises the worker's streams, which raise after
    a failed kernel. The release must still count the pre-stage out of the gate and drop the
    ledger entry, or a neighbour's fallback and recovery wait for it for minutes. The device
    is a stand-in whose free raises (no GPU)."""
    import threading

    from provetop.engine.devices.base import Block
    from provetop.engine.partition.pipeline import Attempt, DeviceGate, PartitionRunner

    class Dev:
        index = 0
        unpinned = 0

        def free(self, blk):
            raise RuntimeError("cudaErrorLaunchFailure")

        def unpin(self, nbytes):
            Dev.unpinned += nbytes

    gate = DeviceGate()
    runner = PartitionRunner(types.SimpleNamespace(bus=None), Dev(), 0, threading.Lock(), gate)
    att = Attempt(0, 0, 0)
    assert gate.try_prestage()
    att.holds_prestage, att.pinned = True, 96
    gate.commit(0, 1234)
    att.blocks.append(Block(pool="sync", size=64, requested=64, site="prestage"))
    with pytest.raises(RuntimeError):
        runner._release(att)
    assert gate.prestaged == 0 and gate.reserved_by_others(1) == 0
    assert att.blocks == [] and att.pinned == 0 and Dev.unpinned == 96


def test_lazy_aware_policy_trims_only_when_short():
    from provetop.engine.devices.modeled import ModeledDevice
    from provetop.engine.memory.allocator import LazyAwarePolicy

    fp = footprint(8, query_sizes(8))
    dev = ModeledDevice(0, 1 << 30)
    blk = dev.malloc(1 << 20, "async", "msm_scratch")
    dev.free(blk)  # 1 MiB reserved-but-unused in the stream-ordered pool
    d = LazyAwarePolicy().prestage(dev, fp, forced=False)
    assert d.status == "ok" and d.released == 0 and dev.async_reserved == 1 << 20
    # now make it short: only a trim of the pool lets the pre-stage fit
    free = dev.mem_info()[0]
    dev.malloc(free - fp.prestage - fp.margin + 512, "raw", "other")
    d = LazyAwarePolicy().prestage(dev, fp, forced=False)
    assert d.status == "ok" and d.released == 1 << 20 and dev.async_reserved == 0


def test_cuda_footprint_uses_the_gpu_msm_scratch():
    from provetop.engine.memory.stream_plan import cuda_footprint
    from provetop.kernels.cuda.msm_plan import host_scratch_bytes, scratch_bytes, stream_window_bits

    sizes = query_sizes(20)
    fp = footprint(20, sizes)
    chunk = 1 << random.randrange(10, 16)
    got = cuda_footprint(fp, sizes.as_dict(), {"h": chunk}, KernelTuning())
    assert got.u == fp.u and got.margin == fp.margin
    assert got.msm["l"] == scratch_bytes(sizes.l)
    c = stream_window_bits(sizes.h, None, -(-sizes.h // chunk))
    assert got.msm["h"] == host_scratch_bytes(sizes.h, chunk, c)
    assert got.msm["h"] >= 2 * chunk * G1_AFFINE_BYTES + 192 * (1 << (c - 1))  # + one window
    capped = cuda_footprint(fp, sizes.as_dict(), {"h": chunk}, KernelTuning(), window_max=c - 3)
    c_capped = stream_window_bits(sizes.h, c - 3, -(-sizes.h // chunk))
    assert c_capped <= c - 3
    assert capped.msm["h"] == host_scratch_bytes(sizes.h, chunk, c_capped) < got.msm["h"]
    assert capped.msm["l"] == got.msm["l"]  # a query on the device is not capped


def test_bound_backend_injects_stream_allocator_and_in_place():
    from provetop.engine.partition.cuda_backend import BoundBackend

    calls = []

    class Recorder:  # a stand-in backend: records what it is called with
        name = "rec"

        def h_step(self, a, b, c, **kw):
            calls.append(("h", kw))

        def msm(self, p, s, **kw):
            calls.append(("msm", kw))

    class Dev:
        def kernel_args(self, site):
            return {"stream": f"s-{threading.get_ident()}", "allocator": site}

    import threading

    bb = BoundBackend(Recorder(), Dev())
    bb.h_step(1, 2, 3)
    bb.msm(1, 2)
    BoundBackend(Recorder(), Dev(), window_max=20).msm(1, 2)
    BoundBackend(Recorder(), Dev(), window_max=20, chunk=6 << 20).msm(1, 2)
    me = f"s-{threading.get_ident()}"
    assert calls[0] == ("h", {"stream": me, "allocator": "ntt_scratch", "overwrite_inputs": True})
    assert calls[1] == ("msm", {"stream": me, "allocator": "msm_scratch", "window_max": None})
    assert calls[2] == ("msm", {"stream": me, "allocator": "msm_scratch", "window_max": 20})
    assert calls[3][1]["chunk"] == 6 << 20  # the plan's chunk (plan_streaming)


def test_bound_backend_runs_the_one_pass_with_caps_lead_and_buffers():
    from provetop.engine.partition.cuda_backend import BoundBackend
    from provetop.kernels.cuda.msm_plan import (
        COMPANION_WINDOW_MAX,
        INTERLEAVE_BUFFERS,
        INTERLEAVE_LEAD,
    )

    calls = []

    class Recorder:
        name = "rec"

        def msm_many(self, points, scalars, **kw):
            calls.append(kw)
            return [None] * len(points)

    class Dev:
        def kernel_args(self, site):
            return {"stream": "s", "allocator": site}

    bb = BoundBackend(Recorder(), Dev(), window_max=19, together=["h", "l", "a"])
    bb.msm_many([1, 2, 3], [4, 5, 6], prelude=["z"])
    kw = calls[0]
    assert kw["windows_max"] == [19, COMPANION_WINDOW_MAX, COMPANION_WINDOW_MAX]
    assert (kw["buffers"], kw["lead"]) == (INTERLEAVE_BUFFERS, INTERLEAVE_LEAD)
    assert (kw["stream"], kw["allocator"], kw["prelude"]) == ("s", "msm_scratch", ["z"])
    assert "chunk" not in kw  # none planned: the backend's own
    BoundBackend(Recorder(), Dev(), window_max=19, chunk=5 << 20).msm_many([1], [2])
    assert calls[1]["chunk"] == 5 << 20
    assert "host_scalars" not in calls[0] and "host_scalars" not in calls[1]
    # a pass planned to read z from host memory says so; without a pass the flag is moot
    BoundBackend(Recorder(), Dev(), 19, ["h", "l"], host_scalars=True).msm_many([1, 2], [3, 4])
    assert calls[2]["host_scalars"] is True
    assert not BoundBackend(Recorder(), Dev(), 19, None, host_scalars=True).host_scalars


def test_worker_streams_need_only_what_cupy_wraps():
    """Each worker's three streams, made through a *fake* CuPy (a stand-in that records the
    Stream arguments; it proves nothing about CUDA) whose runtime module has no functions at
    all: CuPy 14.2 wraps no cudaDeviceGetStreamPriorityRange, and reading it raised
    AttributeError at the first streams() call, before any partition. The synthesis stream
    asks for a priority below any device's range (CUDA clamps it to the greatest)."""
    made = []

    class FakeStream:  # records its arguments (a stand-in for cupy.cuda.Stream)
        def __init__(self, non_blocking=False, priority=None):
            made.append({"non_blocking": non_blocking, "priority": priority})

    fake = types.SimpleNamespace(
        cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(), Stream=FakeStream)
    )
    dev = object.__new__(dcuda.CudaDevice)
    dev.cupy = fake
    dev._tl = __import__("threading").local()
    dev.dev = types.SimpleNamespace(use=lambda: None)
    dev.rt, dev.index = types.SimpleNamespace(getDevice=lambda: 0), 0  # cudaGetDevice: wrapped
    st = dev.streams()
    assert dev.streams() is st  # once per thread
    assert all(m["non_blocking"] for m in made) and len(made) == 3
    # compute, upload, synthesis: the synthesis stream first
    assert [m["priority"] for m in made] == [0, None, dcuda.GREATEST_PRIORITY]
    assert dcuda.GREATEST_PRIORITY < -100  # far below any device's range ([-5, 0] on Hopper)
    assert dev.kernel_args("synthesis")["stream"] is st.synthesis
    assert dev.kernel_args("verify")["stream"] is st.compute


class _FakeCurrentDevice:
    """A *fake* of CuPy's device switching (a stand-in; it proves nothing about CUDA): the
    current device is per thread, ``use()`` sets it, and ``with`` restores on exit the device
    that was current at entry, undoing a ``use()`` made inside, as ``cupy.cuda.Device`` does."""

    def __init__(self, index, current):
        self.id, self._current = index, current

    def use(self):
        self._current.id = self.id

    def __enter__(self):
        self._stack = [*getattr(self, "_stack", []), getattr(self._current, "id", 0)]
        self.use()
        return self

    def __exit__(self, *exc):
        self._current.id = self._stack.pop()


def test_a_thread_first_on_the_device_inside_with_launches_on_it():
    """Device 1, a fresh thread whose first call is an async malloc (inside ``with dev``):
    the look-ahead worker whose first partition fell back. Its later kernel arguments must
    find device 1 current (its kernels, events and NTT tables follow the current device);
    before the fix the thread was left on device 0 with device 1's streams."""
    import threading

    current = threading.local()
    made_on = []

    class FakeStream:
        def __init__(self, non_blocking=False, priority=None):
            made_on.append(getattr(current, "id", 0))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    def set_device(i):
        current.id = i

    rt = types.SimpleNamespace(getDevice=lambda: getattr(current, "id", 0), setDevice=set_device)
    dev = object.__new__(dcuda.CudaDevice)
    dev.cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=rt, Stream=FakeStream))
    dev.rt, dev.index, dev._tl = rt, 1, threading.local()
    dev.dev = _FakeCurrentDevice(1, current)
    dev._lock = threading.RLock()
    dev.async_pool = types.SimpleNamespace(malloc=lambda n: ("block", n))
    seen = {}

    def worker():
        dev.malloc(4096, "async", "prestage")  # the first call of this thread
        seen["after_malloc"] = rt.getDevice()
        dev.kernel_args("msm_scratch")
        seen["at_launch"] = rt.getDevice()

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert made_on == [1, 1, 1]  # the streams belong to device 1
    assert seen["at_launch"] == 1


def test_pinned_empty_is_portable_and_exactly_the_size_asked(monkeypatch):
    """The cudaHostAlloc method (the fallback), through a *fake* CuPy (records the
    cudaHostAlloc arguments; proves nothing about CUDA): the host SRS is made on one device
    and streamed by every device, so its memory must be page-locked for all of them
    (cudaHostAllocPortable), and a witness pool must take the bytes provetop.engine.memory.hostmem
    plans
    for, not CuPy's pool's power-of-two block (16 GiB for the 12 GiB a, b, c at 2^27)."""
    from provetop.kernels.cuda import host_pinned

    asked = []

    class FakePinnedMemory:
        def __init__(self, size, flags=0):
            asked.append((size, flags))
            self.buf = bytearray(size)

    portable = 1  # cudaHostAllocPortable (driver_types.h)
    fake = types.SimpleNamespace(
        cuda=types.SimpleNamespace(
            PinnedMemory=FakePinnedMemory,
            PinnedMemoryPointer=lambda mem, offset: memoryview(mem.buf)[offset:],
            runtime=types.SimpleNamespace(hostAllocPortable=portable),
            alloc_pinned_memory=None,  # the pool: must not be used
        )
    )
    monkeypatch.setattr(host_pinned, "require_cupy", lambda: fake)
    # method="alloc": registration is tests/kernels/test_host_pinned.py's
    arr = host_pinned.pinned_empty((3, 5, 4), method="alloc")
    assert asked == [(3 * 5 * 4 * 8, portable)]
    assert arr.shape == (3, 5, 4) and arr.dtype == np.uint64


# -- CPU: NVML wrapper with a FAKE pynvml (tests the wrapper's error paths only) ---------------


def _fake_pynvml(fail_init=False, procs=None, v2_fails=False):
    """A stand-in for the pynvml module: NOT NVML, only the calls the wrapper makes."""
    m = types.ModuleType("pynvml")
    m.nvmlMemory_v2 = object()

    def init():
        if fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def mem(handle, version=None):
        if version is not None and v2_fails:
            raise RuntimeError("Function Not Found")
        return types.SimpleNamespace(used=5, free=7, total=12)

    m.nvmlInit = init
    m.nvmlDeviceGetHandleByPciBusId = lambda bus: ("h", bus)
    m.nvmlDeviceGetHandleByIndex = lambda i: ("h", i)
    m.nvmlDeviceGetMemoryInfo = mem
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: procs or []
    return m


@pytest.fixture
def fake_nvml(monkeypatch):
    from provetop.base import nvml

    def install(**kw):
        monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(**kw))
        nvml.reset()
        return nvml

    yield install
    nvml.reset()


def test_nvml_missing_library_leaves_fields_out(fake_nvml):
    nvml = fake_nvml(fail_init=True)
    dev = nvml.NvmlDevice(pci_bus_id="0000:01:00.0")
    assert dev.memory() == {} and "Not Found" in dev.error


def test_nvml_reports_v2_and_this_process(fake_nvml):
    import os

    me = types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=4242)
    other = types.SimpleNamespace(pid=os.getpid() + 1, usedGpuMemory=1)
    nvml = fake_nvml(procs=[other, me])
    got = nvml.NvmlDevice(pci_bus_id="0000:01:00.0").memory()
    assert got == {"nvml_used": 5, "nvml_free": 7, "nvml_total": 12, "process_used": 4242}


def test_nvml_process_not_listed_and_v1_fallback(fake_nvml):
    nvml = fake_nvml(procs=[types.SimpleNamespace(pid=-5, usedGpuMemory=1)], v2_fails=True)
    got = nvml.NvmlDevice(index=0).memory()
    assert got == {"nvml_used": 5, "nvml_free": 7, "nvml_total": 12}


# -- GPU ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def backend(cp):
    from provetop.kernels.cuda.backend import CudaBackend

    return CudaBackend(host_chunk=1 << 9)


def _fr_rows(n, rng=None):
    from provetop.kernels.layout import fr_to_limbs, random_fr

    return fr_to_limbs(random_fr(n, rng), montgomery=True)


@pytest.mark.gpu
@pytest.mark.parametrize("k", [1, 5, 11])
def test_gpu_h_step_host_and_in_place_match_the_cpu_reference(cp, backend, k):
    from provetop.kernels.cpu_backend import CpuBackend
    from provetop.kernels.cuda.fr import elementwise

    n = 1 << k
    a, b = _fr_rows(n), _fr_rows(n)
    c = elementwise("mul", cp.asarray(a), cp.asarray(b)).get()
    want = CpuBackend().h_step(a, b, c) if k <= 5 else None
    host = backend.h_step(a, b, c)  # numpy in, numpy out
    assert isinstance(host, np.ndarray) and host.shape == (n - 1, 4)
    da, db, dc = (cp.asarray(v) for v in (a, b, c))
    out_of_place = backend.h_step(da, db, dc, overwrite_inputs=False).get()
    in_place = backend.h_step(da, db, dc, overwrite_inputs=True)
    assert int(in_place.data.ptr) == int(da.data.ptr)  # H lives in a's memory
    assert np.array_equal(host, out_of_place) and np.array_equal(in_place.get(), host)
    if want is not None:
        assert np.array_equal(host, want)


@pytest.mark.gpu
def test_gpu_h_step_waits_for_inputs_still_being_copied(cp, backend):
    """b and c reach their device buffers late, on another stream, behind ~GBs of unrelated
    copies; the in-place H step given their events must equal the one from inputs already
    there. The buffers hold poison until the copies land, so a step that read them early
    (no wait, or a wait in the wrong place) differs."""
    k = 16
    n = 1 << k
    from provetop.kernels.cuda.fr import elementwise

    a, b = _fr_rows(n), _fr_rows(n)
    c = elementwise("mul", cp.asarray(a), cp.asarray(b)).get()
    want = backend.h_step(*(cp.asarray(v) for v in (a, b, c)), overwrite_inputs=False).get()
    side = cp.cuda.Stream(non_blocking=True)
    filler = cp.empty(1 << 28, dtype=cp.uint8)  # 256 MiB copied back and forth: a delay
    filler2 = cp.empty_like(filler)
    da = cp.asarray(a)
    db = cp.full((n, 4), 0xA5A5A5A5A5A5A5A5, dtype=cp.uint64)
    dc = cp.full((n, 4), 0xA5A5A5A5A5A5A5A5, dtype=cp.uint64)
    hb, hc = cp.cuda.alloc_pinned_memory(b.nbytes), cp.cuda.alloc_pinned_memory(c.nbytes)
    np.frombuffer(hb, np.uint64, b.size)[:] = b.ravel()
    np.frombuffer(hc, np.uint64, c.size)[:] = c.ravel()
    cp.cuda.Device().synchronize()
    events = {}
    with side:
        for name, dst, host in (("b", db, hb), ("c", dc, hc)):
            for _ in range(8):
                filler2.data.copy_from_device_async(filler.data, filler.nbytes, side)
            dst.data.copy_from_host_async(host.ptr, dst.nbytes, side)
            events[name] = cp.cuda.Event()
            events[name].record(side)
    got = backend.h_step(da, db, dc, overwrite_inputs=True, ready=events)
    assert np.array_equal(got.get(), want)


@pytest.mark.gpu
def test_gpu_msm_device_and_streamed_host_points_agree(cp, backend):
    from provetop.kernels.cpu import srs as csrs
    from provetop.kernels.layout import fr_to_limbs, g1_from_limbs, random_fr

    n = 3000  # host_chunk 512: six chunks, the last one short
    secrets = random_fr(n)
    pts = backend.srs(fr_to_limbs(secrets, montgomery=False))  # numpy in -> numpy out
    assert isinstance(pts, np.ndarray) and pts.shape == (n, 12)
    ks = random_fr(n)
    for i in range(0, n, 3):
        ks[i] = i % 2
    sc = fr_to_limbs(ks, montgomery=False)
    on_dev = backend.msm(cp.asarray(pts), cp.asarray(sc))
    streamed = backend.msm(pts, sc)
    assert np.array_equal(on_dev, streamed)
    assert csrs.check_msm_identity(secrets, ks, g1_from_limbs(on_dev)[0])


@pytest.mark.gpu
def test_gpu_rows_released_by_the_pass_can_be_overwritten_while_it_runs(cp, backend):
    """The hand-over's premise (provetop.engine.memory.handover): once the pass reports H's rows
    lo..hi read
    (``rows_read``), another stream may overwrite them while the pass goes on. Here each
    reported range gets the next partition's a, copied from pinned memory on a side stream
    after the reported event: the pass's results must still be the MSMs of the old scalars
    (checked against the secrets), and the block must end as exactly the new a. A report
    made before the last read of its rows gives wrong sums."""
    from provetop.kernels.cpu import srs as csrs
    from provetop.kernels.layout import fr_to_limbs, g1_from_limbs, random_fr

    n, m = 5000, 3000  # host_chunk 512: H in ten chunks, the last short
    secrets = random_fr(n)
    pts = backend.srs(fr_to_limbs(secrets, montgomery=False))
    hs, zs = random_fr(n), random_fr(m)
    h = cp.asarray(fr_to_limbs(hs, montgomery=False))
    z = fr_to_limbs(zs, montgomery=False)
    new_a = _fr_rows(n)
    pinned = cp.cuda.alloc_pinned_memory(new_a.nbytes)
    host_a = np.frombuffer(pinned, np.uint64, new_a.size).reshape(new_a.shape)
    host_a[...] = new_a
    side = cp.cuda.Stream(non_blocking=True)
    ranges = []
    events = [cp.cuda.Event(disable_timing=True) for _ in range(16)]
    cp.cuda.Device().synchronize()

    def rows_read(q, lo, hi, stream):
        assert q == 0  # z is read from host memory: never reported
        ev = events[len(ranges)]
        ev.record(stream)
        side.wait_event(ev)
        off = lo * 32
        cp.cuda.runtime.memcpyAsync(
            int(h.data.ptr) + off, host_a.ctypes.data + off, (hi - lo) * 32, 1, side.ptr
        )
        ranges.append((lo, hi))

    res_h, res_z = backend.msm_many([pts, pts[:m]], [h, z], host_scalars=True, rows_read=rows_read)
    side.synchronize()
    assert sorted(ranges) == [(lo, min(lo + 512, n)) for lo in range(0, n, 512)]
    assert csrs.check_msm_identity(secrets, hs, g1_from_limbs(res_h)[0])
    assert csrs.check_msm_identity(secrets[:m], zs, g1_from_limbs(res_z)[0])
    assert np.array_equal(h.get(), new_a)


@pytest.mark.gpu
def test_gpu_engine_hands_h_blocks_to_the_next_partitions_a_and_verifies(cp, monkeypatch):
    """Both workers on the fallback path (forced), every query's points in pinned host memory
    (one pass): an unchecked partition offers its H block, the waiting worker copies its a
    into the rows the pass has finished with and adopts the block. One partition in two is
    checked, on the GPU, from the a it adopted: every partition must complete, every check
    hold, and at least one checked partition must have started from a handed-over block.

    Deterministic: whether the other worker is already waiting when a pass ends is a matter of
    timing (on a first run on an H100 no claim came in time and nothing was handed over), so
    each giver's close waits here until the other worker has claimed its offer, bounded by
    handover_wait_s, except for the last two partitions, which have no next one to take."""
    import itertools
    import time
    from dataclasses import replace

    from provetop.engine.memory.handover import Handover
    from provetop.engine.memory.residency import plan_residency

    handover_wait_s = 60.0  # a claim comes within a synthesis (ms at 2^14); only a bound
    real_close = Handover.close
    closes = itertools.count()
    total = 2 * 8  # proofs x partitions below

    def close_after_a_claim(self, offer, final):
        if next(closes) < total - 2:
            deadline = time.monotonic() + handover_wait_s
            while offer.taker is None and time.monotonic() < deadline:
                time.sleep(0.001)
        return real_close(self, offer, final)

    monkeypatch.setattr(Handover, "close", close_after_a_claim)
    from provetop.engine.run import cuda_srs
    from provetop.engine.settings.config import from_preset
    from provetop.kernels.cuda.backend import CudaBackend

    def all_host(sizes, free, fp, workers, chunk_bytes):
        placed = plan_residency(sizes, free, fp, workers, chunk_bytes)
        return [replace(p, where="host", reason="pinned host (the test's choice)") for p in placed]

    monkeypatch.setattr(cuda_srs, "plan_residency", all_host)
    cfg = from_preset(
        "small",
        backend="cuda",
        domain_log=14,
        proofs=2,
        partitions=8,
        verify="sampled",
        verify_every=2,
        allocator="aware",
    )
    engine, events = _run_engine(cfg, forced=(0,), backend=CudaBackend(host_chunk=1 << 10))
    assert engine.ok, engine.error
    done = [e for e in events if e["k"] == "partition_done"]
    assert len(done) == 16 and all(e["ok"] for e in done)
    checked = [e for e in done if e.get("verified") is not None]
    assert len(checked) == 8 and all(e["verified"] for e in checked)
    handed = {
        (e["proof"], e["partition"])
        for e in events
        if e["k"] == "alloc" and e["site"] == "handover"
    }
    assert handed, "no partition adopted a handed-over H block"
    assert handed & {(e["proof"], e["partition"]) for e in checked}
    assert not [e for e in events if e["k"] == "fault"]


@pytest.fixture
def device(cp):
    dev = dcuda.CudaDevice(0)
    yield dev
    dev.close()


@pytest.mark.gpu
def test_gpu_device_sample_and_ballast(cp):
    free, total = cp.cuda.runtime.memGetInfo()
    want = min(16 * GiB, total // 2)
    dev = dcuda.CudaDevice(0, want)
    try:
        s = dev.sample()
        assert s["ballast"] == total - want and s["modeled"] is False
        assert s["driver_free"] <= free - s["ballast"] + (64 << 20)
        assert dev.capacity == want and "ballast" in dev.name
        from provetop.recordings.schema import validate

        validate({"k": "memory", "t": 0, "device": 0, **s})
    finally:
        dev.close()
        dev._ballast_mem = None
    assert cp.cuda.runtime.memGetInfo()[0] > free - (1 << 30)


@pytest.mark.gpu
def test_gpu_cudamalloc_against_reserved_stream_ordered_memory(cp):
    """What the seed's phantom OOM rests on, asked of this driver: the stream-ordered pool
    keeps freed scratch reserved; then a plain cudaMalloc larger than the driver's free memory
    (but within free + reserved) is either refused with the reserved memory still in the pool
    (the phantom OOM; a trim ends it), or served by the driver taking the pool's unused
    reserved memory back. On the H200 (driver 580.159.04, CUDA 13) the second happened:
    before 3.18 GB free / 4.80 GB reserved, cudaMalloc(3.99 GB) succeeded and left the pool
    at 0 reserved. Both branches are checked exactly; the message says which one ran."""
    free, total = cp.cuda.runtime.memGetInfo()
    cap = min(8 * GiB, total // 4)
    dev = dcuda.CudaDevice(0, cap)
    try:
        dev.trim()
        free0 = dev.mem_info()[0]
        scratch = free0 * 3 // 5
        blk = dev.malloc(scratch, "async", "msm_scratch")
        dev.free(blk)
        dev.synchronize()
        s = dev.sample()
        assert s["async_reserved"] - s["async_used"] >= scratch  # kept reserved
        want = free0 // 2
        assert s["driver_free"] < want <= s["driver_free"] + s["async_reserved"]
        try:
            blk = dev.malloc(want, "raw", "prestage")
        except dcuda.DeviceOOM as exc:  # the phantom OOM, as on the seed's card
            pools = exc.pools
            assert pools["driver_free"] < want <= pools["driver_free"] + pools["async_reserved"]
            assert dev.trim() >= scratch
            blk = dev.malloc(want, "raw", "prestage")
            dev.free(blk)
            print("driver kept the pool's reserved memory: phantom OOM reproduced")
        else:  # the driver reclaimed the pool's unused reservation for cudaMalloc
            after = dev.sample()
            dev.free(blk)
            assert after["async_reserved"] <= s["async_reserved"] - (want - s["driver_free"])
            print(
                "driver reclaimed reserved pool memory for cudaMalloc: "
                f"reserved {s['async_reserved']} -> {after['async_reserved']}"
            )
    finally:
        dev.close()


@pytest.mark.gpu
def test_gpu_cupy_cache_blocks_cudamalloc(cp):
    """The other direction, which no driver can reclaim: CuPy's caching pool (``sync``) holds
    freed blocks the driver knows nothing of, so a plain cudaMalloc is refused although the
    cache would cover it; ``trim`` (free_all_blocks) ends it. (Passed on the H200 on
    2026-11-29 at 5cb8047; bench/notes/memory.md.)"""
    free, total = cp.cuda.runtime.memGetInfo()
    cap = min(8 * GiB, total // 4)
    dev = dcuda.CudaDevice(0, cap)
    try:
        dev.trim()
        free0 = dev.mem_info()[0]
        cached = free0 * 3 // 5
        blk = dev.malloc(cached, "sync", "other")
        dev.free(blk)
        s = dev.sample()
        assert s["sync_cached"] >= cached
        want = free0 // 2
        with pytest.raises(dcuda.DeviceOOM) as exc:
            dev.malloc(want, "raw", "prestage")
        assert exc.value.pools["sync_cached"] >= cached
        assert dev.trim() >= cached
        dev.free(dev.malloc(want, "raw", "prestage"))
    finally:
        dev.close()


@pytest.mark.gpu
def test_gpu_upload_registers_and_falls_back(cp, device):
    rows = _fr_rows(4096)
    blk = device.malloc(rows.nbytes, "raw", "prestage")
    got = device.upload(rows, blk)
    assert np.array_equal(device.download(got), rows)
    ok, fb, _ = device.registration_report()
    assert ok >= 1
    # registered by someone else already: the upload falls back and says why
    cp.cuda.runtime.hostRegister(rows.ctypes.data, rows.nbytes, 0)
    try:
        got = device.upload(rows, blk)
    finally:
        cp.cuda.runtime.hostUnregister(rows.ctypes.data)
    assert np.array_equal(device.download(got), rows)
    _, fb2, why = device.registration_report()
    assert fb2 == fb + 1 and "already registered" in why
    # chunked through the pinned staging buffer (the fallback path)
    got = device.upload(rows, blk, chunk=1000)  # not a multiple of a row
    assert np.array_equal(device.download(got), rows)
    device.free(blk)


@pytest.mark.gpu
def test_gpu_freeing_a_cached_block_waits_for_the_callers_kernels(cp, device):
    """CuPy's caching pool hands a freed block out again at once, to any thread: the free
    must first wait for the caller's kernels that still use it (a neighbour's pre-stage once
    got d_bc while the H step still read it, and 4 of 5 checks failed on the H200)."""
    n = 1 << 26  # 512 MiB of uint64: each pass below is ~0.3 ms of HBM traffic
    blk = device.malloc(n * 8, "sync", "prestage")
    x = cp.ndarray((n,), dtype=cp.uint64, memptr=blk.handle)
    st = device.streams()
    with st.compute:
        x.fill(1)
        x *= 3  # compiles the kernel before the timed queue below
        st.compute.synchronize()
        for _ in range(2000):  # ~0.5 s of kernels, queued in a few ms
            x *= 3
    assert not st.compute.done  # else this test could not fail
    del x
    device.free(blk)
    assert st.compute.done


@pytest.mark.gpu
def test_gpu_events_are_made_once_per_thread_and_reused(cp, device):
    """Uploads and phase timers re-record one set of events per thread (creating events
    waited for the running kernel on the H200); the copies stay right."""
    blk = device.malloc(_fr_rows(4096).nbytes, "sync", "prestage")
    first = _fr_rows(4096)
    assert np.array_equal(device.download(device.upload(first, blk)), first)
    made = dict(device._tl.events)
    for _ in range(3):
        rows = _fr_rows(4096)
        assert np.array_equal(device.download(device.upload(rows, blk)), rows)
    assert device._tl.events == made and all(device._tl.events[k] is v for k, v in made.items())
    t1, t2 = device.gpu_timer(), device.gpu_timer()
    assert t1.start_ev is t2.start_ev and t1.end_ev is t2.end_ev
    t1.start()
    assert t1.stop() >= 0.0
    device.free(blk)


@pytest.mark.gpu
def test_gpu_scratch_oom_becomes_device_oom(cp, device):
    alloc = device.allocator("msm_scratch")
    with pytest.raises(dcuda.DeviceOOM) as exc:
        alloc(device.physical * 2)
    assert exc.value.site == "msm_scratch" and exc.value.pool == "async"


def _run_engine(cfg, forced=(), **kw):
    """Run an in-process engine (no socket) to the end, the devices in ``forced`` on the
    fallback path (the operator's control); (the engine, every event)."""
    from provetop.engine.run.runner import Engine

    engine = Engine(cfg, listen=False, **kw)
    for device in forced:
        engine.controls.force(device, True)
    sub = engine.subscribe("test")
    engine.start()
    assert engine.wait(300)
    engine.close()
    return engine, sub.drain()


@pytest.mark.gpu
@pytest.mark.parametrize("on_device", [(), ("b_g1",)])
def test_gpu_engine_streams_the_host_queries_in_one_pass_and_verifies(cp, monkeypatch, on_device):
    """The residency decision forced to the host for every query but those ``on_device``
    (every query: as on a 16 GiB card; all but B-G1: as on a 40 GiB one), chunks of 128
    points: the aware plan runs the streamed MSMs in one pass (phase ``msm_interleaved``), and
    every partition verifies exactly on the GPU. With every reader of the aux scalars in the
    pass they are sent up chunk by chunk from the witness's pinned pool; with B-G1's points on
    the device the pass copies them up whole (a ``msm_scalars`` block), which B-G1's own MSM
    reads after the pass."""
    from dataclasses import replace

    from provetop.engine.memory.residency import plan_residency
    from provetop.engine.run import cuda_srs
    from provetop.engine.settings.config import from_preset
    from provetop.kernels.cuda.backend import CudaBackend

    def some_host(sizes, free, fp, workers, chunk_bytes):
        placed = plan_residency(sizes, free, fp, workers, chunk_bytes)
        host = [replace(p, where="host", reason="pinned host (the test's choice)") for p in placed]
        return [p if p.query in on_device else h for p, h in zip(placed, host, strict=True)]

    monkeypatch.setattr(cuda_srs, "plan_residency", some_host)
    sites = set()
    malloc = dcuda.CudaDevice.malloc

    def recording_malloc(self, nbytes, pool, site):
        sites.add(site)
        return malloc(self, nbytes, pool, site)

    monkeypatch.setattr(dcuda.CudaDevice, "malloc", recording_malloc)
    cfg = from_preset("small", backend="cuda", proofs=1, verify="always", allocator="aware")
    engine, events = _run_engine(cfg, backend=CudaBackend(host_chunk=1 << 7))
    assert engine.ok, engine.error
    done = [e for e in events if e["k"] == "partition_done"]
    assert done and all(e["ok"] and e["verified"] for e in done)
    plan = next(e for e in events if e["k"] == "alloc" and e["site"] == "plan")
    assert "one interleaved pass" in plan["reason"]
    assert ("aux scalars sent up with each chunk" in plan["reason"]) == (not on_device)
    assert ("msm_scalars" in sites) == bool(on_device)  # z's device block, or none
    phases = {e["phase"] for e in events if e["k"] == "phase_end"}
    assert "msm_interleaved" in phases and "msm_h" not in phases
    assert ("msm_b_g1" in phases) == bool(on_device)


@pytest.mark.gpu
def test_gpu_engine_small_run_verifies(cp, tmp_path):
    from provetop.engine.settings.config import from_preset

    cfg = from_preset("small", backend="cuda", proofs=1, verify="always")
    engine, events = _run_engine(cfg, record=tmp_path / "run.pvtrec")
    assert engine.ok, engine.error
    done = [e for e in events if e["k"] == "partition_done"]
    assert done and all(e["ok"] and e["verified"] for e in done)
    hello = next(e for e in events if e["k"] == "hello")
    assert hello["backend"] == "cuda" and hello["modeled"] is False
    mem = [e for e in events if e["k"] == "memory"]
    assert mem and all(e["modeled"] is False for e in mem)
    srs = [e for e in events if e["k"] == "alloc" and e["site"] == "srs"]
    assert srs
    timed = [e for e in events if e["k"] == "phase_end" and e.get("gpu_ms") is not None]
    assert {e["phase"] for e in timed} >= {"h_step", "msm_h", "upload"}
    # every partition is checked here, with its sums inside its own region (CUDA-timed)
    for e in done:
        assert {"check_inputs", "check_sums"} <= set(e["phases_ms"])
    assert {e["phase"] for e in timed} >= {"check_inputs", "check_sums"}
    # an upload's gpu_ms is its copies' time: positive and inside the phase's host span
    begins = {
        (e["proof"], e["partition"]): e["t"]
        for e in events
        if e["k"] == "phase_begin" and e["phase"] == "upload"
    }
    for e in timed:
        if e["phase"] == "upload":
            span_ms = (e["t"] - begins[(e["proof"], e["partition"])]) / 1e6
            assert 0 < e["gpu_ms"] <= span_ms


@pytest.mark.gpu
def test_gpu_engine_with_synthesis_ahead_verifies_every_partition(cp, tmp_path):
    """Two pinned witness pools per worker, the next witness made on the look-ahead thread
    (its own CUDA streams) while the current partition runs: every check must still hold."""
    from provetop.engine.settings.config import SYNTH_LANE_BASE, from_preset

    cfg = from_preset(
        "small", backend="cuda", proofs=2, partitions=4, verify="always", synthesis_ahead=True
    )
    engine, events = _run_engine(cfg, record=tmp_path / "ahead.pvtrec")
    assert engine.ok, engine.error
    done = [e for e in events if e["k"] == "partition_done"]
    assert len(done) == 8 and all(e["ok"] and e["verified"] for e in done)
    lanes = {e["worker"] for e in events if e["k"] == "phase_begin" and e["phase"] == "synthesis"}
    assert lanes <= {SYNTH_LANE_BASE, SYNTH_LANE_BASE + 1} and lanes


@pytest.mark.gpu
def test_gpu_two_devices_with_look_ahead_and_fallback_verify_every_partition(cp, tmp_path):
    """Two devices (skipped with fewer): the look-ahead on both, device 1 forced onto the
    fallback path, so its workers' first CUDA call is an async malloc inside ``with dev``
    (the case that left a thread on device 0). Every partition must verify on both devices,
    and each device's memory samples must be its own card's (PCI bus ids differ)."""
    from provetop.engine.settings.config import from_preset

    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two CUDA devices (multi-GPU path)")
    cfg = from_preset(
        "small",
        backend="cuda",
        devices=(0, 1),
        proofs=2,
        partitions=4,
        verify="always",
        synthesis_ahead=True,
    )
    engine, events = _run_engine(cfg, forced=(1,), record=tmp_path / "two.pvtrec")
    assert engine.ok, engine.error
    done = [e for e in events if e["k"] == "partition_done"]
    assert len(done) == 8 and all(e["ok"] and e["verified"] for e in done)
    assert {e["device"] for e in done} == {0, 1}
    fell_back = {e["device"] for e in done if e.get("prestage") == "fallback"}
    assert 1 in fell_back
    hello = next(e for e in events if e["k"] == "hello")
    assert len({d["pci_bus_id"] for d in hello["devices"]}) == 2


@pytest.mark.gpu
@pytest.mark.parametrize("where", ["device", "host"])
def test_gpu_srs_powers_match_the_cpu_points(cp, backend, where):
    from provetop.kernels.cpu.srs import powers, srs_points
    from provetop.kernels.cuda.host_pinned import pinned_empty
    from provetop.kernels.layout import g1_from_limbs, random_fr

    m = 101
    sigma = random_fr(1)[0]
    out = cp.empty((m, 12), dtype=cp.uint64) if where == "device" else pinned_empty((m, 12))
    out[...] = POISON
    got = backend.srs_powers(sigma, m, out, chunk=37)  # chunks of 37, 37, 27
    assert got is out
    assert g1_from_limbs(out) == srs_points(powers(sigma, m))


POISON = np.uint64(0xFFFFFFFFFFFFFFFF)


@pytest.mark.gpu
@pytest.mark.parametrize("where", ["device", "host"])
def test_gpu_srs_powers_report_each_chunk_and_stop_on_a_raise(cp, backend, where):
    from provetop.kernels.cuda.host_pinned import pinned_empty
    from provetop.kernels.layout import random_fr

    m = 101
    sigma = random_fr(1)[0]
    out = cp.empty((m, 12), dtype=cp.uint64) if where == "device" else pinned_empty((m, 12))
    seen: list[int] = []
    backend.srs_powers(sigma, m, out, chunk=37, progress=seen.append)
    assert seen == [37, 37, 27]

    class Halt(Exception):
        pass

    def halt(points: int) -> None:
        seen.append(points)
        raise Halt

    seen.clear()
    with pytest.raises(Halt):
        backend.srs_powers(sigma, m, out, chunk=37, progress=halt)
    assert seen == [37]  # ended after the first chunk


@pytest.mark.gpu
def test_gpu_pinning_reports_the_bytes_it_touched(cp):
    from provetop.kernels.cuda import host_pinned

    seen: list[int] = []
    arr = host_pinned.pinned_empty((1000, 4), method="register", progress=seen.append)
    if not host_pinned.take_fallbacks():  # registered: the touch was counted
        assert sum(seen) == arr.nbytes


@pytest.mark.gpu
def test_gpu_engine_stops_within_2_s_during_the_srs(cp):
    """2^26 on the GPU: ~0.3 G SRS points in chunks of 4 M
    (provetop.engine.run.cuda_srs.SRS_CHUNK)."""
    import time

    from provetop.engine.run.runner import Engine
    from provetop.engine.settings.config import EngineConfig

    engine = Engine(EngineConfig(backend="cuda", domain_log=26, partitions=1, seed=1), listen=False)
    sub = engine.subscribe("test")
    events: list[dict] = []
    engine.start()
    try:
        deadline = time.monotonic() + 300
        while not any(e["k"] == "progress" and e["done"] > 0 for e in events):
            assert time.monotonic() < deadline, "no SRS progress reported"
            assert not engine.done, engine.error
            events += sub.drain()
            time.sleep(0.02)
        t0 = time.monotonic()
        engine.stop("test")
        assert engine.wait(2.0), "the engine did not stop within 2 s during the SRS"
        took = time.monotonic() - t0
    finally:
        engine.close()
    events += sub.drain()
    progress = [e for e in events if e["k"] == "progress" and e["task"] == "device_srs"]
    dones = [e["done"] for e in progress]
    assert dones == sorted(dones) and all(e["done"] <= e["total"] for e in progress)
    assert dones[-1] < progress[-1]["total"], "the SRS was finished, not stopped"
    assert engine.error is None
    print(f"stopped {took:.2f} s after the stop, at {dones[-1]} of {progress[-1]['total']}")


@pytest.mark.gpu
def test_gpu_witness_is_valid_and_reproducible(cp, device):
    from provetop.engine.spec.witness_gpu import PinnedBuffers, synthesize_on_gpu
    from provetop.engine.spec.workload import query_sizes
    from provetop.kernels.constants import FR_MODULUS as R
    from provetop.kernels.layout import fr_from_limbs

    k = 12
    sizes = query_sizes(k)
    m = max(sizes.l, sizes.a, sizes.b_g1)
    bufs = PinnedBuffers(1 << k, m, "register")
    for arr in (bufs.abc, bufs.z):
        arr[...] = POISON
    kw = device.kernel_args("synthesis")
    # its own stream, ahead of the MSM's in the block scheduler (numerically lower = greater)
    assert kw["stream"] is not device.streams().compute
    assert kw["stream"].priority < device.streams().compute.priority
    w = synthesize_on_gpu(k, sizes, (0.3, 0.3, 0.4), 7, bufs, chunk=1000, **kw)
    assert w.pinned and device.is_pinned(w.a) and device.is_pinned(w.z)
    a, b, c = (fr_from_limbs(v) for v in (w.a, w.b, w.c))  # raises on a row >= r
    assert all(x * y % R == z for x, y, z in zip(a, b, c, strict=True))
    z = fr_from_limbs(w.z, montgomery=False)
    assert z.count(0) == w.counts["zeros"] and z.count(1) == w.counts["ones"]
    assert 0.2 * m < w.counts["zeros"] < 0.4 * m and 0.2 * m < w.counts["ones"] < 0.4 * m
    first = (w.a.copy(), w.z.copy())
    # the same seed gives the same witness whatever the chunk size
    w3 = synthesize_on_gpu(k, sizes, (0.3, 0.3, 0.4), 7, bufs, chunk=777, **kw)
    assert np.array_equal(w3.a, first[0]) and np.array_equal(w3.z, first[1])
    w4 = synthesize_on_gpu(k, sizes, (0.3, 0.3, 0.4), 8, bufs, chunk=1000, **kw)
    assert not np.array_equal(w4.a, first[0])


@pytest.mark.gpu
def test_gpu_upload_async_overlaps_and_refuses_pageable(cp, device):
    from provetop.kernels.cuda.host_pinned import pinned_empty

    rows = _fr_rows(5000)
    pinned = pinned_empty(rows.shape)
    pinned[...] = rows
    blk = device.malloc(rows.nbytes, "async", "msm_scalars")
    arr, done = device.upload_async(pinned, blk)
    device.streams().compute.wait_event(done)
    assert np.array_equal(arr.get(stream=device.streams().compute), rows)
    with pytest.raises(ValueError, match="page-locked"):
        device.upload_async(rows, blk)
    device.free(blk)
    # a pinned-pool array is uploaded without a registration attempt
    ok, fb, _ = device.registration_report()
    blk = device.malloc(rows.nbytes, "raw", "prestage")
    got = device.upload(pinned, blk, pinned=True)
    assert np.array_equal(device.download(got), rows)
    assert device.registration_report()[:2] == (ok, fb)
    device.free(blk)


class _Corrupting:
    """A CUDA backend whose MSM (or H step) result is wrong: the GPU checks must say so."""

    def __init__(self, what):
        from provetop.kernels.cuda.backend import CudaBackend

        self.inner = CudaBackend()
        self.what = what
        self.name = "cuda"
        # the capabilities the engine asks for (provetop.kernels.backend.HostStreaming, WarmUp) are
        # checked on the object itself, not through __getattr__
        self.host_chunk = self.inner.host_chunk
        self.WARM_UP_STEPS = self.inner.WARM_UP_STEPS
        self.warm_up = self.inner.warm_up

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def h_step(self, a, b, c, **kw):
        h = self.inner.h_step(a, b, c, **kw)
        if self.what == "h":
            with kw["stream"]:  # ordered after the H step on the engine's stream
                h[3, 0] ^= 1  # a wrong coefficient (still < r: the low bit of a canonical value)
        return h

    def msm(self, points, scalars, **kw):
        from provetop.kernels.cpu import g1
        from provetop.kernels.layout import g1_from_limbs, g1_to_limbs

        res = self.inner.msm(points, scalars, **kw)
        if self.what == "msm" and points.shape[0] == self._l:
            return g1_to_limbs([g1.affine_double(g1_from_limbs(res)[0])])[0]
        return res


@pytest.mark.gpu
@pytest.mark.parametrize("what", ["h", "msm", None])
def test_gpu_engine_checks_catch_a_wrong_result(cp, what):
    from provetop.engine.settings.config import from_preset
    from provetop.engine.spec.workload import query_sizes

    cfg = from_preset("small", backend="cuda", proofs=1, partitions=2, verify="always")
    be = _Corrupting(what)
    be._l = query_sizes(cfg.domain_log).l
    _engine, events = _run_engine(cfg, backend=be)
    done = [e for e in events if e["k"] == "partition_done" and e["ok"]]
    assert len(done) == 2
    assert all(e["verified"] is (what is None) for e in done)


@pytest.mark.gpu
def test_gpu_fallback_path_uploads_the_pinned_witness_and_verifies(cp):
    """An injected pre-stage OOM sends the partition to the fallback path: a, b, c go whole
    from the worker's pinned pool into the stream-ordered pool (no staging block), b and c
    up under the H step, which waits for each, and the retried partition still verifies on
    the GPU."""
    from provetop.engine.settings.config import from_preset

    cfg = from_preset("small", backend="cuda", proofs=1, partitions=2, verify="always")
    engine, events = _run_engine(cfg, inject="alloc:prestage:1")
    assert engine.ok, engine.error
    done = [e for e in events if e["k"] == "partition_done" and e["ok"]]
    assert len(done) == 2 and all(e["verified"] for e in done)
    retried = [e for e in done if e["attempt"] == 1]
    assert len(retried) == 1 and retried[0]["prestage"] == "fallback"
    prestage_allocs = [e for e in events if e["k"] == "alloc" and e["site"] == "prestage"]
    whole = [e for e in prestage_allocs if "pinned pool" in (e.get("reason") or "")]
    assert whole and whole[0]["pool"] == "async"
    assert "under the H step" in whole[0]["reason"]
