"""Fixtures shared by the test files."""

import os

import pytest

from tests import tuning_env

# before any test module imports the kernels (PROVETOP_TEST_TUNING=env: an A/B build's settings)
tuning_env.apply(os.environ)


@pytest.fixture(scope="module")
def cp():
    """CuPy with a visible CUDA device; the GPU tests that take it skip with the reason
    otherwise (no CuPy, no driver, no device)."""
    from kernels.cuda.runtime import CudaUnavailable, require_cupy

    try:
        return require_cupy()
    except CudaUnavailable as exc:
        pytest.skip(f"no CUDA device: {exc}")
