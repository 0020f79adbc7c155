"""A ``PROVETOP_*`` variable nothing reads is reported, and every one the product reads is known."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from provetop.engine.settings.environment import known, unknown_variables
from provetop.trace.child import LIBRARY_VARS

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("engine", "kernels", "tui", "sources", "recordings", "provetop")
SAMPLE = ROOT / "recordings" / "samples" / "h200-porep32g-aware.pvtrec"
NAME = re.compile(r"PROVETOP_[A-Z0-9_]*[A-Z0-9]")


def test_every_variable_the_product_reads_is_known():
    seen: set[str] = set()
    for folder in PRODUCT:
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".cpp", ".h", ".cu", ".cuh") and "/build/" not in str(path):
                seen |= set(NAME.findall(path.read_text(errors="replace")))
    prefixes = {n for n in seen if n.endswith("_")}  # a prefix in a pattern, not a name
    assert seen - prefixes - known() == set()
    assert {v for v in LIBRARY_VARS if v.startswith("PROVETOP_")} <= known()


def test_a_misspelled_or_removed_setting_is_named_with_the_nearest_real_one():
    lines = unknown_variables(
        {
            "PROVETOP_MSM_SORTS": "radix",
            "PROVETOP_MSM_SOURCE": "lb",
            "PROVETOP_MSM_SORT": "auto",
            "PATH": "/bin",
        }  # fmt: skip
    )
    assert lines == [
        "PROVETOP_MSM_SORTS is not a provetop setting and is ignored (did you mean "
        "PROVETOP_MSM_SORT?)",
        "PROVETOP_MSM_SOURCE is not a provetop setting and is ignored (did you mean "
        "PROVETOP_MSM_SORT?)",
    ]
    assert unknown_variables({"PROVETOP_MSM_SORT": "auto", "PROVETOP_COMMIT": "abc"}) == []


def test_the_command_line_warns_once_and_runs_on(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "PROVETOP_NTT_DEFINE": "X",
           "HOME": str(tmp_path)}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "provetop", "summary", str(SAMPLE)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    warnings = [ln for ln in done.stderr.splitlines() if ln.startswith("provetop: warning:")]
    assert done.returncode == 0, done.stderr
    assert warnings == [
        "provetop: warning: PROVETOP_NTT_DEFINE is not a provetop setting and is ignored "
        "(did you mean PROVETOP_NTT_DEFINES?)"
    ]
