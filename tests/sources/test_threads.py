"""A source's thread is recognisable by its name, and a test that leaves one running fails (the
autouse fixture of ``tests/conftest.py``), while one that closes its source, a module-scoped
source and a short-lived helper thread pass."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from provetop.sources.feed import FeedSource
from provetop.sources.protocol import THREAD_PREFIX
from tests.sources.helpers import Collect

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

LEAKY_TESTS = """
import threading
import time

import pytest

from provetop.sources.feed import FeedSource
from tests.sources.helpers import Collect


def start(source):
    thread = threading.Thread(target=source.run, args=(Collect(),), daemon=True)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def running_feed():
    source = FeedSource([], label="module")
    thread = start(source)
    yield source
    source.close()
    thread.join(5)


def test_leaves_its_feed_running():
    start(FeedSource([], label="left"))


def test_closes_its_feed():
    source = FeedSource([], label="closed")
    thread = start(source)
    source.close()
    thread.join(5)


def test_uses_the_module_scoped_feed(running_feed):
    assert running_feed.label == "module"


def test_a_helper_thread_that_ends_soon_after():
    threading.Thread(target=time.sleep, args=(0.3,)).start()


def test_a_thread_that_is_not_a_daemon_and_ends_too_late():
    # (it ends after the grace, so that this pytest's process can exit)
    threading.Thread(target=time.sleep, args=(3.5,), name="late").start()
"""


def test_a_feed_names_the_thread_it_runs_on_and_gives_the_name_back():
    source, sink = FeedSource([{"k": "marker", "t": 1, "name": "x"}], label="feed"), Collect()
    thread = threading.Thread(target=source.run, args=(sink,), name="test-thread", daemon=True)
    thread.start()
    try:
        assert sink.wait(lambda: bool(sink.batches))
        assert thread.name == f"{THREAD_PREFIX}feed"
    finally:
        source.close()
        thread.join(5)
    assert not thread.is_alive() and thread.name == "test-thread"


def test_the_fixture_fails_the_tests_that_leave_a_thread_behind(pytester, monkeypatch):
    # the child runs in pytester's folder: the repository must be on its path for ``tests.``
    root = str(CONFTEST.parents[1])
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    )
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_leaky=LEAKY_TESTS)
    # its own process: the threads left behind on purpose end with it
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-q", "--rootdir", str(pytester.path)
    )
    result.assert_outcomes(passed=5, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_leaves_its_feed_running*",
            "threads outlived the test: source-left (daemon)",
            "*ERROR at teardown of test_a_thread_that_is_not_a_daemon_and_ends_too_late*",
            "threads outlived the test: late (not a daemon)",
        ]
    )
