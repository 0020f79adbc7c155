"""Fixtures shared by the test files."""

import os
import threading
import time

import pytest

from provetop.sources.protocol import THREAD_PREFIX
from tests import tuning_env

pytest_plugins = ("pytester",)  # tests/sources/test_threads.py runs a pytest of its own

# before any test module imports the kernels (PROVETOP_TEST_TUNING=env: an A/B build's settings)
tuning_env.apply(os.environ)

THREAD_GRACE_S = 2.0  # how long a thread the test stopped may take to end after it


@pytest.fixture(scope="module")
def cp():
    """CuPy with a visible CUDA device; the GPU tests that take it skip with the reason
    otherwise (no CuPy, no driver, no device)."""
    from provetop.kernels.cuda.runtime import CudaUnavailable, require_cupy

    try:
        return require_cupy()
    except CudaUnavailable as exc:
        pytest.skip(f"no CUDA device: {exc}")


def _outlives(thread: threading.Thread) -> bool:
    """A thread that must not outlive its test: a source's (named from THREAD_PREFIX, also
    while a source's ``run`` holds a thread of someone else's), or any that is not a daemon
    (the interpreter waits for it at exit, so a whole run would hang after its summary)."""
    return thread.name.startswith(THREAD_PREFIX) or not thread.daemon


@pytest.fixture(autouse=True)
def no_thread_outlives_its_test():
    """Fail the test (an error at its teardown) when a thread it started is still running
    :data:`THREAD_GRACE_S` after it, where that thread is a source's or not a daemon.

    Why here: a source left running (``run`` blocks until ``close``) holds its thread for good,
    and where that thread is not a daemon a full run hangs after its summary line, far from the
    test that caused it.

    What it does not flag: threads alive when it starts. Those are pytest's own and those of
    module- and session-scoped fixtures, which pytest sets up before any function-scoped
    fixture and tears down after the test. Being autouse and function-scoped, this fixture is
    set up first and torn down last among the test's own fixtures, so a server or an engine
    that a function-scoped fixture starts and stops is gone before it looks. Daemon threads
    that are not a source's (an engine's dispatcher, a test's helper server) are the test's
    business and not looked at."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + THREAD_GRACE_S
    while True:
        left = [t for t in threading.enumerate() if t not in before and _outlives(t)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    if left:
        names = ", ".join(f"{t.name} ({'daemon' if t.daemon else 'not a daemon'})" for t in left)
        pytest.fail(f"threads outlived the test: {names}", pytrace=False)
