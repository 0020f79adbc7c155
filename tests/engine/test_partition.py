"""The partition as a protocol: both backends implement every step, and the one driver is
never specialised by overriding its private methods (one partition reads top to bottom in
``engine/partition/pipeline.py``)."""

from __future__ import annotations

import inspect

import pytest

from engine.partition.cpu import CpuPartition
from engine.partition.cuda import CudaPartition, CudaPartitionRunner
from engine.partition.ops import PartitionOps
from engine.partition.pipeline import PartitionRunner


def _steps() -> dict[str, object]:
    names = {n for n in vars(PartitionOps) if not n.startswith("_")}
    names |= set(PartitionOps.__annotations__)
    return {n: getattr(PartitionOps, n, None) for n in sorted(names)}


@pytest.mark.parametrize("impl", [CpuPartition, CudaPartition])
def test_each_implementation_has_every_step_with_its_signature(impl):
    steps = _steps()
    assert {"synthesize", "h_step", "msm", "verify", "drain_uploads"} <= set(steps)
    for name, proto in steps.items():
        if callable(proto):
            got = getattr(impl, name)
            want = [p for p in inspect.signature(proto).parameters]
            assert [p for p in inspect.signature(got).parameters] == want, name
    # the two attributes: class-level on the cpu ops, decided per device by the cuda ops
    assert {"prestage_pool", "checks_on_device"} <= set(steps)
    assert CpuPartition.prestage_pool == "raw" and CpuPartition.checks_on_device is False


def test_the_driver_is_specialised_by_its_ops_only():
    """``CudaPartitionRunner`` only picks the CUDA ops in its constructor."""
    assert issubclass(CudaPartitionRunner, PartitionRunner)
    dunders = {"__init__", "__doc__", "__module__", "__qualname__", "__firstlineno__"}
    assert set(vars(CudaPartitionRunner)) - dunders <= {"__static_attributes__"}
