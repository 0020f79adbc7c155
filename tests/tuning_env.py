"""The kernels' settings the test session runs with.

Why: an A/B build (``PROVETOP_MSM_DEFINES``, ``PROVETOP_NTT_DEFINES`` and the other kernel
settings) used to be checked on the GPU only by the benches' ``--check`` at one size, because
the tests build the default kernels. With ``PROVETOP_TEST_TUNING=env`` the session's default
settings are read from the ``PROVETOP_*`` variables instead, so the whole suite checks the build
that is about to be timed. Tests that name their own settings keep them.
"""

from __future__ import annotations

from collections.abc import Mapping

import provetop.kernels.tuning as kt


def apply(environ: Mapping[str, str]) -> kt.KernelTuning:
    """Make ``provetop.kernels.tuning.DEFAULT_TUNING`` the settings of ``environ`` when it asks for
    it
    (``PROVETOP_TEST_TUNING=env``); returns the settings in force. Must run before the kernel
    modules are imported: they bind the default when they load (conftest.py calls it first)."""
    mode = environ.get("PROVETOP_TEST_TUNING", "")
    if mode not in ("", "default", "env"):
        raise kt.SettingError(f"PROVETOP_TEST_TUNING={mode!r}: expected 'env' or 'default'")
    if mode == "env":
        kt.DEFAULT_TUNING = kt.KernelTuning.from_env(environ)
    return kt.DEFAULT_TUNING
