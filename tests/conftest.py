"""Fixtures shared by the test files."""

import ctypes
import os
import signal
import sys
import threading
import time

import pytest

from provetop.sources.protocol import THREAD_PREFIX
from tests import tuning_env

pytest_plugins = ("pytester",)  # tests/sources/test_threads.py runs a pytest of its own

# before any test module imports the kernels (PROVETOP_TEST_TUNING=env: an A/B build's settings)
tuning_env.apply(os.environ)

THREAD_GRACE_S = 2.0  # how long a thread the test stopped may take to end after it
PROCESS_GRACE_S = 2.0  # how long a process the test stopped may take to exit after it
PR_SET_CHILD_SUBREAPER = 36  # prctl(2): orphans of our descendants become our children
# The interpreter's own helpers, started once on first use and kept for the whole run: not a
# test's processes (multiprocessing's resource tracker and fork server).
PROCESS_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def _become_subreaper() -> bool:
    """Linux: make this process the reaper of every orphan below it, so that a grandchild a
    test's child left behind (an engine started by ``provetop run``, a shell's ``&``) is our
    child and is seen. False where that is not available (the check then sees children)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _child_states() -> dict[int, tuple[str, str]]:
    """Our child processes: pid -> (state letter from /proc, command line)."""
    me = os.getpid()
    pids: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{me}/task")
    except OSError:
        return {}
    for task in tasks:
        try:
            with open(f"/proc/{me}/task/{task}/children") as f:
                pids.update(int(x) for x in f.read().split())
        except OSError:
            continue
    found: dict[int, tuple[str, str]] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue  # gone meanwhile
        found[pid] = (state, cmd)
    return found


def _children() -> dict[int, str]:
    """Our live child processes (pid -> command line); an exited one (a zombie) is not."""
    return {pid: cmd for pid, (state, cmd) in _child_states().items() if state != "Z"}


def _reap_zombies(keep: set[int]) -> None:
    """Reap the exited children nobody waits for (orphans that became ours, and what a test
    dropped); a child that was there before the test (a module fixture's) is its owner's."""
    for pid, (state, _) in _child_states().items():
        if state == "Z" and pid not in keep:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


SUBREAPER = _become_subreaper()


def pytest_configure(config):
    """A run that selects by marker (the quick subset ``-m "not slow"``, CI's ``-m nvcc``)
    leaves some dashboard snapshots unused on purpose: that is no failure then."""
    if config.getoption("-m") and hasattr(config.option, "warn_unused_snapshots"):
        config.option.warn_unused_snapshots = True


SLOW_TESTS = os.path.join(os.path.dirname(__file__), "slow_tests.txt")


def _measured_slow() -> set[str]:
    """The test ids tests/slow_tests.txt lists (measured durations of about a second or more)."""
    try:
        with open(SLOW_TESTS) as f:
            return {line.strip() for line in f if line.strip() and not line.startswith("#")}
    except OSError:
        return set()


def pytest_collection_modifyitems(config, items):
    """Two markers set here rather than by hand:

    - ``slow`` on every test tests/slow_tests.txt lists (measured, not guessed), so that
      ``-m "not slow"`` is the quick subset the README names;
    - tests marked ``nvcc`` compile CUDA with the real nvcc (one compile took over ten
      minutes on a loaded 2-core machine): they run only when asked for, with a ``-m``
      expression naming ``nvcc`` or ``PROVETOP_TEST_NVCC=1``; otherwise they skip, saying
      so."""
    slow = _measured_slow()
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)
    if "nvcc" in (config.getoption("-m") or "") or os.environ.get("PROVETOP_TEST_NVCC") == "1":
        return
    skip = pytest.mark.skip(reason="compiles with nvcc: run with -m nvcc or PROVETOP_TEST_NVCC=1")
    for item in items:
        if item.get_closest_marker("nvcc") is not None:
            item.add_marker(skip)


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


@pytest.fixture(autouse=True)
def no_process_outlives_its_test():
    """Fail the test (an error at its teardown) when a process it started, or one that
    process started, is still running :data:`PROCESS_GRACE_S` after it; the leftovers are
    then killed, so that they neither hold the machine nor keep the run from ending.

    Why: a test that leaves ``provetop engine`` or a stand-in program running keeps a core
    busy for the rest of the run and makes later tests slow or flaky far from the cause.
    Processes alive when it starts (a module-scoped fixture's server) are not looked at; like
    the thread check it is set up first and torn down last among the test's own fixtures."""
    if not os.path.isdir(f"/proc/{os.getpid()}/task"):
        yield  # no /proc here: nothing to look at
        return
    before = set(_children())
    yield
    deadline = time.monotonic() + PROCESS_GRACE_S
    while True:
        left = {
            pid: cmd
            for pid, cmd in _children().items()
            if pid not in before and not any(h in cmd for h in PROCESS_HELPERS)
        }
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    time.sleep(0.05 if left else 0)
    _reap_zombies(before)
    if left:
        names = ", ".join(f"{pid} ({cmd[:160]})" for pid, cmd in sorted(left.items()))
        pytest.fail(f"processes outlived the test: {names}", pytrace=False)
