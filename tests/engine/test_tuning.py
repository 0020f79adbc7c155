"""The tuning record: every PROVETOP_* setting parsed and checked once, recorded as plain
values, and documented by a table generated from the same list."""

from __future__ import annotations

import re
from pathlib import Path

import msgpack
import pytest

from engine.tuning import SETTINGS, Tuning, markdown_table
from kernels.tuning import NEVER_AFFINE, KernelTuning, SettingError

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_from_an_empty_environment():
    t = Tuning.from_env({})
    assert t == Tuning()
    assert t.kernels.msm_affine_min_pairs == NEVER_AFFINE
    assert t.switch_interval_s == 0.0005


def test_every_setting_is_read_into_its_field():
    env = {
        "PROVETOP_NTT_DEFINES": "NTT_MIN_BLOCKS=2, MONT_PORTABLE",
        "PROVETOP_PIN_METHOD": "alloc",
        "PROVETOP_MSM_SOURCE": "msm_lb.cu",
        "PROVETOP_MSM_AFFINE_MIN_PAIRS": "8388608",
        "PROVETOP_MSM_SORT_GROUP": "3",
        "PROVETOP_MSM_AFFINE_DENSE": "1",
        "PROVETOP_CUBIN_DIR": "/opt/cubin",
        "PROVETOP_COMMIT": "abc1234",
        "PROVETOP_SYNC_SCOPE": "device",
        "PROVETOP_PRIORITY_TO": "compute",
        "PROVETOP_SWITCH_INTERVAL": "0.005",
        "PROVETOP_INJECT": "kill:worker:0:msm_h",
    }
    assert sorted(env) == sorted(s.env for s in SETTINGS)  # the test covers every variable
    t = Tuning.from_env(env)
    k = t.kernels
    assert k.ntt_defines == (("NTT_MIN_BLOCKS", "2"), ("MONT_PORTABLE", "1"))
    assert (k.pin_method, k.msm_source) == ("alloc", "msm_lb.cu")
    assert (k.msm_affine_min_pairs, k.msm_sort_group, k.msm_affine_dense) == (8388608, 3, 1)
    assert (k.cubin_dir, k.commit) == ("/opt/cubin", "abc1234")
    assert (t.sync_scope, t.priority_to, t.switch_interval_s) == ("device", "compute", 0.005)
    assert t.inject == "kill:worker:0:msm_h"
    # what a run records: plain values that survive the wire and JSON
    d = t.as_dict()
    assert msgpack.unpackb(msgpack.packb(d)) == d
    assert d["kernels"]["ntt_defines"] == {"NTT_MIN_BLOCKS": "2", "MONT_PORTABLE": "1"}


@pytest.mark.parametrize(
    "env, value",
    [
        ("PROVETOP_PIN_METHOD", "mlock"),
        ("PROVETOP_MSM_SOURCE", "msm_fast.cu"),
        ("PROVETOP_MSM_SORT_GROUP", "-1"),
        ("PROVETOP_MSM_SORT_GROUP", "two"),
        ("PROVETOP_MSM_AFFINE_MIN_PAIRS", "0"),
        ("PROVETOP_MSM_AFFINE_DENSE", "-2"),
        ("PROVETOP_NTT_DEFINES", "1BAD=2"),
        ("PROVETOP_SYNC_SCOPE", "host"),
        ("PROVETOP_PRIORITY_TO", "both"),
        ("PROVETOP_SWITCH_INTERVAL", "0"),
        ("PROVETOP_SWITCH_INTERVAL", "nan"),
        ("PROVETOP_SWITCH_INTERVAL", "2"),
    ],
)
def test_a_bad_value_is_one_error_naming_the_variable(env, value):
    with pytest.raises(SettingError, match=env):
        Tuning.from_env({env: value})


def test_the_kernel_record_alone_ignores_engine_settings():
    assert KernelTuning.from_env({"PROVETOP_SYNC_SCOPE": "nonsense"}) == KernelTuning()


def test_readme_table_is_the_generated_one():
    readme = (ROOT / "engine" / "README.md").read_text()
    assert markdown_table() in readme


def test_no_module_reads_a_provetop_variable_but_the_tuning_record():
    """The record is the only reader: a knob read elsewhere would be missing from ``hello``."""
    readers = []
    pattern = re.compile(r"environ(?:\.get)?\(?\[?\s*[\"']PROVETOP_|getenv\(\s*[\"']PROVETOP_")
    for package in ("engine", "kernels", "recordings", "sources", "tui", "provetop"):
        for path in (ROOT / package).rglob("*.py"):
            if path.name == "tuning.py":
                continue
            if pattern.search(path.read_text()):
                readers.append(str(path.relative_to(ROOT)))
    assert readers == []
