"""SIGTERM or SIGINT during start-up acts within a stop check: the SRS is made chunk by chunk
and every chunk checks for a stop. The whole query's secrets used to be computed first (a
pure-Python list of 2^26 powers took ~30 s at domain 2^26 before the first check)."""

from __future__ import annotations

import numpy as np
import pytest

from provetop.engine.spec import srs as srs_mod
from provetop.engine.telemetry.progress import Stopped
from provetop.kernels.cpu.srs import powers
from provetop.kernels.cpu_backend import CpuBackend


class _StopAfter:
    def __init__(self, chunks: int) -> None:
        self.left, self.advanced = chunks, 0

    def advance(self, n: int) -> None:
        self.advanced += n
        self.left -= 1
        if self.left <= 0:
            raise Stopped("stopping")

    def finish(self) -> None:
        pass


def test_a_stop_during_the_srs_acts_after_one_chunk_at_any_domain(monkeypatch):
    made = srs_mod.Srs(sigmas={"h": 7}, sizes={"h": 1 << 28})

    def whole_query(self, query):  # what used to run before the first stop check
        raise AssertionError("the whole query's secrets computed before the first chunk")

    monkeypatch.setattr(srs_mod.Srs, "secrets", whole_query)
    progress = _StopAfter(1)
    with pytest.raises(Stopped):
        srs_mod.make_host_points(CpuBackend(), made, "h", progress, chunk=16)
    assert progress.advanced == 16


def test_the_chunked_secrets_make_the_same_points():
    made = srs_mod.Srs(sigmas={"h": 123456789}, sizes={"h": 37})
    backend = CpuBackend()
    points = srs_mod.make_host_points(backend, made, "h", None, chunk=8)
    expected = np.asarray(backend.srs(srs_mod.fr_to_limbs(powers(123456789, 37), montgomery=False)))
    assert np.array_equal(points, expected)
