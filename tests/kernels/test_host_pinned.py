"""provetop.kernels.cuda.host_pinned: registered large-page mappings, the cudaHostAlloc fallback,
and the
release order (unregister before unmap). The CPU tests stand a recording fake in for CuPy's
runtime; the GPU test copies through a real registration."""

from __future__ import annotations

import gc
import types

import numpy as np
import pytest

from provetop.kernels.cuda import host_pinned as hp


class FakeRuntimeError(Exception):
    pass


class FakeRuntime:
    CUDARuntimeError = FakeRuntimeError

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.registered: dict[int, int] = {}
        self.calls: list[tuple] = []

    def hostRegister(self, ptr: int, nbytes: int, flags: int) -> None:  # noqa: N802 (CUDA's name)
        self.calls.append(("register", ptr, nbytes, flags))
        if self.refuse:
            raise FakeRuntimeError("cudaErrorHostMemoryAlreadyRegistered")
        self.registered[ptr] = nbytes

    def hostUnregister(self, ptr: int) -> None:  # noqa: N802
        self.calls.append(("unregister", ptr))
        del self.registered[ptr]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    def install(refuse: bool = False) -> FakeRuntime:
        runtime = FakeRuntime(refuse)
        cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))
        monkeypatch.setattr(hp, "require_cupy", lambda: cupy)
        # the fallback: ordinary memory standing in for cudaHostAlloc's
        monkeypatch.setattr(hp, "_allocated", lambda nbytes, _cupy: bytearray(nbytes))
        hp.take_fallbacks()
        return runtime

    return install


def test_registered_array_is_usable_and_unregistered_when_dropped(fake) -> None:
    rt = fake()
    arr = hp.pinned_empty((3, 1000, 4))
    assert arr.shape == (3, 1000, 4) and arr.dtype == np.uint64
    assert not arr.any()  # touched: zero-filled before it was pinned
    ((_, ptr, nbytes, flags),) = rt.calls
    assert (ptr, nbytes, flags) == (arr.ctypes.data, arr.nbytes, hp.PORTABLE)
    arr[1, 999, 3] = 7
    view = arr[1]  # a view keeps the registration alive too
    del arr
    gc.collect()
    assert rt.registered == {ptr: nbytes}
    assert view[999, 3] == 7
    del view
    gc.collect()
    assert rt.calls[-1] == ("unregister", ptr) and rt.registered == {}
    assert hp.take_fallbacks() == []


def test_refused_registration_falls_back_and_is_reported(fake) -> None:
    rt = fake(refuse=True)
    arr = hp.pinned_empty((10, 4))
    arr[:] = 3  # the fallback buffer works
    assert arr.sum() == 120
    (line,) = hp.take_fallbacks()
    assert "cudaHostRegister of 0.00 GB failed" in line and "AlreadyRegistered" in line
    assert "cudaHostAlloc used instead" in line
    assert hp.take_fallbacks() == []  # taken once
    assert [c[0] for c in rt.calls] == ["register"]  # nothing left registered to undo


def test_alloc_method_skips_registration(fake) -> None:
    rt = fake()
    arr = hp.pinned_empty((5,), np.uint32, method="alloc")
    assert arr.shape == (5,) and rt.calls == [] and hp.take_fallbacks() == []


def test_bad_method_is_named(fake) -> None:
    fake()
    with pytest.raises(ValueError, match="pin method 'hugetlb'"):
        hp.pinned_empty((5,), method="hugetlb")


@pytest.mark.gpu
def test_registered_pool_round_trip(cp) -> None:
    """A registered pool is page-locked for real: an asynchronous copy to the device and back
    gives the bytes, and the range can be registered again once the first array is gone."""
    hp.take_fallbacks()
    rng = np.random.default_rng()
    for _ in range(2):
        host = hp.pinned_empty((1 << 20, 4))
        ptr = host.ctypes.data
        # cudaMemoryTypeHost (1): page-locked and known to the driver (0: unregistered)
        assert cp.cuda.runtime.pointerGetAttributes(ptr).type == 1
        host[:] = rng.integers(0, 1 << 63, size=host.shape, dtype=np.uint64)
        stream = cp.cuda.Stream(non_blocking=True)
        dev = cp.full(host.shape, 0xDEAD, dtype=cp.uint64)  # poisoned
        dev.set(host, stream=stream)
        back = hp.pinned_empty(host.shape)
        dev.get(stream=stream, out=back, blocking=False)
        stream.synchronize()
        assert np.array_equal(back, host)
        del host, back, dev
        gc.collect()
    assert hp.take_fallbacks() == []


@pytest.mark.parametrize("dies", [False, True])
@pytest.mark.parametrize("ahead", [False, True])
def test_only_a_worker_that_stops_hands_its_pools_to_the_run(monkeypatch, ahead, dies) -> None:
    """A worker that stops keeps its pools with the run until close (``CudaRun.retire``); one
    that dies must not: its replacement pins pools of its own, and the dead one's must be
    freed first (provetop.engine.memory.hostmem plans one set per worker), at the price of the
    stall that
    unpinning them causes the neighbour."""
    from provetop.engine.partition import cuda as partition_cuda
    from provetop.engine.run.runner import Engine
    from provetop.engine.run.workers import Scheduler, WorkerSlot

    class Runner:
        def __init__(self, *args) -> None:
            pass

        def run(self, proof: int, partition: int):
            if dies:
                raise SystemExit("the worker dies")
            return types.SimpleNamespace(ok=True, verified=True)

        def prepare(self, proof: int, partition: int, lane: int):
            return proof, partition

        def complete(self, prepared):
            return self.run(*prepared)

    monkeypatch.setattr(partition_cuda, "CudaPartitionRunner", Runner)
    retired: list = []
    engine = Engine.__new__(Engine)
    engine.config = types.SimpleNamespace(synthesis_ahead=ahead)
    engine.scheduler = Scheduler(proofs=1, partitions=2, concurrency=1)
    engine.cuda_run = types.SimpleNamespace(retire=retired.append)
    engine._on_proof_done = engine._on_worker_error = lambda *a: None
    slot = WorkerSlot(0, 0)
    engine._worker_target(None, None, 0, None, None)(slot)
    assert (slot.died is not None) == dies and slot.exited == (not dies)
    assert len(retired) == (0 if dies else 1)
