"""PROVETOP_TEST_TUNING=env: the suite's default kernel settings from the PROVETOP_* variables."""

import subprocess
import sys
from pathlib import Path

import pytest

import provetop.kernels.tuning as kt
from tests import tuning_env

ROOT = Path(__file__).resolve().parents[2]


def test_env_mode_replaces_the_default_and_other_modes_keep_it(monkeypatch):
    monkeypatch.setattr(kt, "DEFAULT_TUNING", kt.KernelTuning())
    env = {"PROVETOP_TEST_TUNING": "env", "PROVETOP_MSM_DEFINES": "MSM_COUNT_MATCH=1"}
    got = tuning_env.apply(env)
    assert got.msm_defines == (("MSM_COUNT_MATCH", "1"),) and kt.DEFAULT_TUNING is got
    monkeypatch.setattr(kt, "DEFAULT_TUNING", kt.KernelTuning())
    assert tuning_env.apply({"PROVETOP_MSM_DEFINES": "X=1"}) == kt.KernelTuning()
    with pytest.raises(kt.SettingError, match="PROVETOP_TEST_TUNING"):
        tuning_env.apply({"PROVETOP_TEST_TUNING": "yes"})


def test_a_kernel_module_imported_after_it_sees_the_env_settings():
    """In a fresh interpreter, as a test session has it: the default argument of the MSM's
    entry point is the env's settings once apply() ran before the import."""
    code = (
        "import os; from tests import tuning_env; tuning_env.apply(os.environ); "
        "import inspect, provetop.kernels.cuda.msm as m; "
        "print(inspect.signature(m.msm).parameters['tuning'].default.msm_defines)"
    )
    env = {"PROVETOP_TEST_TUNING": "env", "PROVETOP_MSM_DEFINES": "MSM_COUNT_MATCH=1"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**__import__("os").environ, **env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "MSM_COUNT_MATCH" in out.stdout
