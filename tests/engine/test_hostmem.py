"""The page-locked plan of a CUDA run against the host's memory (provetop.engine.memory.hostmem)."""

from __future__ import annotations

from provetop.engine.memory.hostmem import (
    PINNED_SHARE,
    PinnedPlan,
    available_bytes,
    refusal,
    witness_pool_bytes,
)
from provetop.engine.settings.tuning import Tuning
from provetop.engine.spec.workload import query_sizes

MEMINFO = """MemTotal:       131072000 kB
MemFree:         1000000 kB
MemAvailable:   125000000 kB
Buffers:            1000 kB
"""


def test_available_is_read_from_meminfo_in_bytes():
    assert available_bytes(MEMINFO) == 125_000_000 * 1024
    assert available_bytes("MemTotal: 5 kB\n") is None
    assert available_bytes("MemAvailable: lots kB\n") is None


def test_a_porep_witness_pool_is_about_17_gb():
    sizes = query_sizes(27)
    pool = witness_pool_bytes(27, max(sizes.l, sizes.a, sizes.b_g1))
    assert 16e9 < pool < 18e9


def test_the_look_ahead_beside_a_host_srs_is_refused_on_a_128_gib_host_with_the_parts_named():
    sizes = query_sizes(27)
    pool = witness_pool_bytes(27, max(sizes.l, sizes.a, sizes.b_g1))
    available = available_bytes(MEMINFO)
    srs = 41_000_000_000  # every query on the host at 16 GiB
    ahead = PinnedPlan(host_srs=srs, pool=pool, pools=1 * 2 * 2)
    line = refusal(ahead, available, ahead=True)
    assert line is not None and "\n" not in line
    assert "--synthesis-ahead" in line and "41.0 GB" in line and "4 witness pools" in line
    # without the look-ahead, or with the SRS on the device, it fits
    assert refusal(PinnedPlan(host_srs=srs, pool=pool, pools=2), available, ahead=False) is None
    assert refusal(PinnedPlan(host_srs=0, pool=pool, pools=4), available, ahead=True) is None
    # the threshold is the documented share, and an unknown host is never refused
    edge = PinnedPlan(host_srs=int(PINNED_SHARE * available), pool=0, pools=0)
    assert refusal(edge, available, ahead=False) is None
    assert refusal(PinnedPlan(host_srs=edge.total + 1, pool=0, pools=0), available, False)
    assert refusal(ahead, None, ahead=True) is None


def _cuda_device(**fields):
    """A stand-in CUDA device: its CUDA side is itself, as a CudaDevice's is."""
    from types import SimpleNamespace

    device = SimpleNamespace(**fields)
    device.cuda = device
    return device


def test_the_cuda_run_refuses_before_pinning_the_witness_pools():
    import sys
    from types import SimpleNamespace

    import pytest

    from provetop.engine.memory.hostmem import HostMemoryError
    from provetop.engine.run.cuda_run import CudaRun
    from provetop.engine.settings.config import from_preset

    interval = sys.getswitchinterval()
    run = CudaRun()
    try:
        run._host_available = available_bytes(MEMINFO)
        sizes = query_sizes(27)
        srs_sizes = {"h": sizes.h, "l": sizes.l, "a": sizes.a, "b_g1": sizes.b_g1}
        streamed = {q: 1 << 22 for q in srs_sizes}  # all 41 GB on the host, as at 16 GiB
        for ahead, refused in ((True, True), (False, False)):
            cfg = from_preset("porep-32g", backend="cuda", synthesis_ahead=ahead)
            ctx = SimpleNamespace(config=cfg, sizes=sizes, srs=SimpleNamespace(sizes=srs_sizes))
            if refused:
                with pytest.raises(HostMemoryError, match="--synthesis-ahead"):
                    run._check_host(ctx, streamed, workers=2)
            else:
                run._check_host(ctx, streamed, workers=2)
    finally:
        run.close([])
    assert sys.getswitchinterval() == interval


def test_the_host_check_counts_every_devices_streamed_queries(monkeypatch):
    """Two cards of different sizes: the second streams a query the first kept on the device,
    and the shared host SRS then holds both. The check after each device sizes the union
    (it once sized device 0's plan alone)."""
    from types import SimpleNamespace

    from provetop.engine.run import cuda_run
    from provetop.engine.run.cuda_run import CudaRun
    from provetop.engine.settings.config import from_preset

    sizes = query_sizes(27)
    srs_sizes = {"h": sizes.h, "l": sizes.l, "a": sizes.a, "b_g1": sizes.b_g1}
    by_device = {0: {"h": 1 << 22}, 1: {"h": 1 << 22, "l": 1 << 22}}
    seen = []

    def place(device, srs, fp, workers, host_chunk, bus, host, stopping):
        return {}, [], dict(by_device[device.index])

    monkeypatch.setattr(cuda_run, "place_device_srs", place)
    monkeypatch.setattr(cuda_run, "HostSrs", lambda srs, backend, pin_method: None)
    monkeypatch.setattr(
        cuda_run, "cuda_footprint", lambda fp, sizes, streamed, tuning, window_max=None: fp
    )
    monkeypatch.setattr(cuda_run, "replace", lambda ctx, **changes: changes)
    monkeypatch.setattr(
        CudaRun, "_check_host", lambda self, ctx, streamed, workers: seen.append(dict(streamed))
    )
    cfg = from_preset("porep-32g", backend="cuda", devices=(0, 1))
    ctx = SimpleNamespace(
        config=cfg,
        sizes=sizes,
        srs=SimpleNamespace(sizes=srs_sizes, sigmas={}),
        backend=SimpleNamespace(name="cuda"),
        footprint=None,
        bus=None,
        policy=SimpleNamespace(name="naive"),
        tuning=Tuning(),
        stopping=lambda: False,
    )
    run = CudaRun()
    try:
        for index in (0, 1):
            run.context(ctx, _cuda_device(index=index), workers=2)
    finally:
        run.close([])
    assert seen == [{"h": 1 << 22}, {"h": 1 << 22, "l": 1 << 22}]


def test_stopped_workers_pools_are_freed_only_at_close() -> None:
    """A worker that stops hands its pinned witness pools to the run, which frees them at
    close: unpinning 17 GB while a neighbour still ran stalled the neighbour's last H step
    (1.7-2.2 s instead of 0.32 on the H200)."""
    import gc
    import threading
    import weakref
    from types import SimpleNamespace

    from provetop.engine.partition.cuda import CudaPartitionRunner
    from provetop.engine.partition.pipeline import PartitionRunner
    from provetop.engine.run.cuda_run import CudaRun

    class Pool:
        pass

    class Dev:  # a stand-in without CUDA: only the ops' pools matter here
        index = 0
        cuda = None

    runner = CudaPartitionRunner(SimpleNamespace(bus=None), Dev(), 0, threading.Lock())
    pools = [Pool(), Pool()]
    refs = [weakref.ref(p) for p in pools]
    runner.ops._bufs = pools
    del pools
    run = CudaRun()
    try:
        run.retire(runner)
        cpu = PartitionRunner(SimpleNamespace(bus=None), Dev(), 0, threading.Lock())
        run.retire(cpu)  # a runner without pools (the cpu one) is ignored
        assert runner.ops._bufs == []
        del runner
        gc.collect()
        assert all(r() is not None for r in refs)  # still held by the run
    finally:
        run.close([])
    gc.collect()
    assert all(r() is None for r in refs)


def test_cuda_warm_up_reports_its_steps_as_progress(monkeypatch):
    """The CUDA warm-up (minutes of NVRTC on a new machine) is a ``progress`` step of its own:
    one advance per backend step, the last event at done == total, named for its device."""
    import contextlib
    from types import SimpleNamespace

    from provetop.engine.run import cuda_run
    from provetop.engine.run.cuda_run import CudaRun
    from provetop.engine.settings.config import from_preset

    sizes = query_sizes(27)
    srs_sizes = {"h": sizes.h, "l": sizes.l, "a": sizes.a, "b_g1": sizes.b_g1}
    events: list[tuple[str, dict]] = []
    calls: list[int] = []

    def warm_up(domain_log, step=None):
        calls.append(domain_log)
        for name in ("one", "two", "three"):
            step(name)

    monkeypatch.setattr(cuda_run, "place_device_srs", lambda *a: ({}, [], {}))
    monkeypatch.setattr(cuda_run, "HostSrs", lambda srs, backend, pin_method: None)
    monkeypatch.setattr(
        cuda_run, "cuda_footprint", lambda fp, sizes, streamed, tuning, window_max=None: fp
    )
    monkeypatch.setattr(cuda_run, "replace", lambda ctx, **changes: changes)
    monkeypatch.setattr(CudaRun, "_check_host", lambda self, ctx, streamed, workers: None)
    witnesses: list[dict] = []  # the witness warm-up: once, as a partition's synthesis runs
    monkeypatch.setattr(cuda_run, "warm_synthesis", lambda pin_method, **kw: witnesses.append(kw))
    cfg = from_preset("porep-32g", backend="cuda")
    backend = SimpleNamespace(name="cuda", WARM_UP_STEPS=("one", "two", "three"), warm_up=warm_up)
    ctx = SimpleNamespace(
        config=cfg,
        sizes=sizes,
        srs=SimpleNamespace(sizes=srs_sizes, sigmas={}),
        backend=backend,
        footprint=None,
        bus=SimpleNamespace(emit=lambda kind, **fields: events.append((kind, fields))),
        policy=SimpleNamespace(name="naive"),
        tuning=Tuning(),
        stopping=lambda: False,
    )
    run = CudaRun()
    try:
        args = {"synthesis": {"stream": "synthesis stream", "allocator": "synthesis pool"}}
        device = _cuda_device(index=3, dev=contextlib.nullcontext(), kernel_args=args.get)
        run.context(ctx, device, workers=2)
    finally:
        run.close([])
    assert calls == [cfg.domain_log]
    assert witnesses == [{"stream": "synthesis stream", "allocator": "synthesis pool"}]
    warm = [f for kind, f in events if kind == "progress" and f["task"] == "warmup"]
    assert warm and warm[-1]["done"] == warm[-1]["total"] == 4  # the backend's 3, the witness
    assert warm[-1]["device"] == 3 and "device 3" in warm[-1]["label"]
