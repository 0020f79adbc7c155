"""Which ``PROVETOP_*`` environment variables exist, so that one that does not is reported.

Why: a setting is read by name, and a name misspelled (one S too many in ``PROVETOP_MSM_SORT``)
or removed from the product (the decided A/B settings) was silently ignored: the run went on
with the defaults while its operator believed otherwise. The command line warns once, on stderr,
naming the variable and the nearest real one; it does not refuse to run (a stale line in a
service file should not keep a prover down).

The tuning record's variables are :data:`provetop.engine.settings.tuning.SETTINGS`; the others
are listed here with who reads them. ``tests/engine/test_environment.py`` checks that every
``PROVETOP_*`` name in the product's source is one of the two.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping

from provetop.engine.settings.tuning import SETTINGS

# Read outside the tuning record: name -> who reads it and why
ELSEWHERE: dict[str, str] = {
    "PROVETOP_TRACE_OUT": "the trace library: where its records go (set by provetop trace)",
    "PROVETOP_TRACE_PID": "the trace library: the process the records are for",
    "PROVETOP_TRACE_INTERVAL_MS": "the trace library: its pool sampling interval",
    "PROVETOP_TRACE_RING": "the trace library: its record ring's size",
    "PROVETOP_TRACE_HEAL": "the trace library: trim pools before an allocation that would fail",
    "PROVETOP_TRACE_HEAL_WAIT_MS": "the trace library: how long a heal waits for another process",
    # the test suite and the GPU benches
    "PROVETOP_FAKE_NVML": "tests: a stand-in NVML",
    "PROVETOP_FUZZ_EXAMPLES": "tests: examples per property-based test",
    "PROVETOP_TEST_NVCC": "tests: allow the nvcc-marked tests",
    "PROVETOP_TEST_TUNING": "tests: the tuning the GPU tests run under",
    "PROVETOP_TMUX_SOCKET": "tests: the tmux server the terminal tests use",
    "PROVETOP_TRACE_EVIDENCE": "GPU tests: where the trace tests write their figures",
    "PROVETOP_SPPARK_MSM": "GPU tests: an sppark MSM binary to trace",
}


def known() -> set[str]:
    """Every ``PROVETOP_*`` variable something of ours reads."""
    return {s.env for s in SETTINGS} | set(ELSEWHERE)


def unknown_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per ``PROVETOP_*`` variable set in ``environ`` that nothing reads, with the
    nearest real name where one is close."""
    env = os.environ if environ is None else environ
    names = sorted(known())
    lines = []
    for name in sorted(k for k in env if k.startswith("PROVETOP_") and k not in names):
        near = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
        hint = f" (did you mean {near[0]}?)" if near else ""
        lines.append(f"{name} is not a provetop setting and is ignored{hint}")
    return lines
