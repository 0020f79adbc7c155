"""The partition as a protocol: both backends implement every step of the base protocol,
the CUDA ops every optional one and the cpu ops none, and the one driver is never
specialised by overriding its private methods (one partition reads top to bottom in
``engine/partition/pipeline.py``)."""

from __future__ import annotations

import inspect

import pytest

from provetop.engine.partition.cpu import CpuPartition
from provetop.engine.partition.cuda import CudaPartition, CudaPartitionRunner
from provetop.engine.partition.ops import (
    AsyncCopies,
    DeviceChecks,
    HandoverSteps,
    OnePass,
    PartitionOps,
    PinnedPools,
)
from provetop.engine.partition.pipeline import PartitionRunner

OPTIONAL = (DeviceChecks, HandoverSteps, OnePass, AsyncCopies, PinnedPools)


def _steps(protocol: type = PartitionOps) -> dict[str, object]:
    names = {n for n in vars(protocol) if not n.startswith("_")}
    names |= set(getattr(protocol, "__annotations__", {}))
    return {n: getattr(protocol, n, None) for n in sorted(names)}


def _same_signatures(impl: type, protocol: type) -> None:
    for name, proto in _steps(protocol).items():
        if callable(proto):
            got = getattr(impl, name)
            want = [p for p in inspect.signature(proto).parameters]
            assert [p for p in inspect.signature(got).parameters] == want, name


@pytest.mark.parametrize("impl", [CpuPartition, CudaPartition])
def test_each_implementation_has_every_step_with_its_signature(impl):
    steps = _steps()
    assert {"synthesize", "h_step", "msm", "verify"} <= set(steps)
    assert "drain_uploads" in _steps(AsyncCopies)  # a step of the ops with copies in flight
    _same_signatures(impl, PartitionOps)
    # the two attributes: class-level on the cpu ops, decided per device by the cuda ops
    assert {"prestage_pool", "checks_on_device"} <= set(steps)
    assert CpuPartition.prestage_pool == "raw" and CpuPartition.checks_on_device is False


def test_the_driver_is_specialised_by_its_ops_only():
    """``CudaPartitionRunner`` only picks the CUDA ops in its constructor."""
    assert issubclass(CudaPartitionRunner, PartitionRunner)
    dunders = {"__init__", "__doc__", "__module__", "__qualname__", "__firstlineno__"}
    assert set(vars(CudaPartitionRunner)) - dunders <= {"__static_attributes__"}


def test_the_cuda_ops_take_every_optional_step_and_the_cpu_ops_none():
    """The cpu backend implements only the steps it has: no no-op stands in for a step."""
    for protocol in OPTIONAL:
        _same_signatures(CudaPartition, protocol)
        assert not any(hasattr(CpuPartition, n) for n in _steps(protocol)), protocol.__name__
