"""The conftest's process check: a test fails when a process it started (or one that process
left behind) outlives it, and the leftovers are killed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import SUBREAPER

CONFTEST = Path(__file__).resolve().parent / "conftest.py"

LEAKY_TESTS = """
import subprocess, sys, time

def test_waits_for_its_child():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_leaves_a_child_running():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "left-child"])

def test_its_child_leaves_a_grandchild_running():
    code = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', " \\
        "'import time; time.sleep(60)', 'left-grandchild'])"
    subprocess.run([sys.executable, "-c", code], check=True)

def test_a_child_that_ends_soon_after_is_fine():
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
"""


@pytest.mark.skipif(not SUBREAPER, reason="needs Linux's child subreaper (prctl)")
def test_the_fixture_fails_the_tests_that_leave_a_process_behind(pytester, monkeypatch):
    root = str(CONFTEST.parents[1])
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    )
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_leaky=LEAKY_TESTS)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-q", "--rootdir", str(pytester.path)
    )
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_leaves_a_child_running*",
            "processes outlived the test: *left-child*",
            "*ERROR at teardown of test_its_child_leaves_a_grandchild_running*",
            "processes outlived the test: *left-grandch*",
        ]
    )
