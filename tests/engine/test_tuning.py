"""The tuning record: every PROVETOP_* setting parsed and checked once, recorded as plain
values, and documented by a table generated from the same list."""

from __future__ import annotations

import re
from pathlib import Path

import msgpack
import pytest

from provetop.engine.settings.tuning import SETTINGS, Tuning, markdown_table
from provetop.kernels.tuning import KernelTuning, SettingError

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_from_an_empty_environment():
    t = Tuning.from_env({})
    assert t == Tuning()
    assert t.kernels.msm_sort == "auto" and t.kernels.msm_host_lead is None
    assert t.switch_interval_s == 0.0005


def test_every_setting_is_read_into_its_field():
    env = {
        "PROVETOP_NTT_DEFINES": "NTT_MIN_BLOCKS=2, MONT_PORTABLE",
        "PROVETOP_PIN_METHOD": "alloc",
        "PROVETOP_MSM_DEFINES": "MONT_MUL_KARATSUBA",
        "PROVETOP_MSM_SORT": "radix",
        "PROVETOP_MSM_HOST_CHUNK": "8388608",
        "PROVETOP_MSM_HOST_CHUNK_GROW": "off",
        "PROVETOP_MSM_HOST_BUFFERS": "6",
        "PROVETOP_MSM_HOST_LEAD": "0",
        "PROVETOP_CUBIN_DIR": "/opt/cubin",
        "PROVETOP_INJECT_DIR": "/opt/inject",
        "PROVETOP_CUPTI": "/opt/cupti",
        "PROVETOP_COMMIT": "abc1234",
        "PROVETOP_SWITCH_INTERVAL": "0.005",
        "PROVETOP_HEAP_TRIM_S": "12.5",
        "PROVETOP_ACCEPT_RATE": "250",
        "PROVETOP_INJECT": "kill:worker:0:msm_h",
    }
    assert sorted(env) == sorted(s.env for s in SETTINGS)  # the test covers every variable
    t = Tuning.from_env(env)
    k = t.kernels
    assert k.ntt_defines == (("NTT_MIN_BLOCKS", "2"), ("MONT_PORTABLE", "1"))
    assert k.msm_defines == (("MONT_MUL_KARATSUBA", "1"),)
    assert k.pin_method == "alloc"
    assert k.msm_host_chunk == 1 << 23
    assert k.msm_host_buffers == 6 and k.msm_host_lead == 0
    assert k.msm_host_chunk_grow == "off"
    assert k.msm_sort == "radix"
    assert (k.cubin_dir, k.commit) == ("/opt/cubin", "abc1234")
    assert (k.inject_dir, k.cupti_dir) == ("/opt/inject", "/opt/cupti")
    assert t.switch_interval_s == 0.005
    assert t.inject == "kill:worker:0:msm_h"
    assert t.heap_trim_s == 12.5
    assert t.accept_rate == 250.0
    # what a run records: plain values that survive the wire and JSON
    d = t.as_dict()
    assert msgpack.unpackb(msgpack.packb(d)) == d
    assert d["kernels"]["ntt_defines"] == {"NTT_MIN_BLOCKS": "2", "MONT_PORTABLE": "1"}


@pytest.mark.parametrize(
    "env, value",
    [
        ("PROVETOP_PIN_METHOD", "mlock"),
        ("PROVETOP_MSM_SORT", "bitonic"),
        ("PROVETOP_MSM_HOST_CHUNK", "12"),
        ("PROVETOP_MSM_HOST_BUFFERS", "1"),
        ("PROVETOP_MSM_HOST_BUFFERS", "two"),
        ("PROVETOP_MSM_HOST_LEAD", "-1"),
        ("PROVETOP_MSM_HOST_CHUNK_GROW", "yes"),
        ("PROVETOP_NTT_DEFINES", "1BAD=2"),
        ("PROVETOP_ACCEPT_RATE", "-1"),
        ("PROVETOP_ACCEPT_RATE", "fast"),
        ("PROVETOP_SWITCH_INTERVAL", "0"),
        ("PROVETOP_SWITCH_INTERVAL", "nan"),
        ("PROVETOP_SWITCH_INTERVAL", "2"),
    ],
)
def test_a_bad_value_is_one_error_naming_the_variable(env, value):
    with pytest.raises(SettingError, match=env):
        Tuning.from_env({env: value})


def test_the_kernel_record_alone_ignores_engine_settings():
    assert KernelTuning.from_env({"PROVETOP_SWITCH_INTERVAL": "nonsense"}) == KernelTuning()


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


def test_the_hello_event_carries_the_runs_tuning(tmp_path):
    """What an A/B run changed is in its recording: ``hello.tuning`` is the record the engine
    was given, and an engine given none records the defaults (never the environment)."""
    from provetop.engine.settings.config import from_preset
    from provetop.recordings.reader import open_recording
    from tests.engine.run_helper import run_engine

    tuning = Tuning.from_env(
        {"PROVETOP_SWITCH_INTERVAL": "0.002", "PROVETOP_MSM_HOST_BUFFERS": "6"}
    )
    rec = tmp_path / "run.pvtrec"
    cfg = from_preset("ci", partitions=1, workers_per_device=1)
    _engine, events = run_engine(cfg, record=str(rec), tuning=tuning)
    (hello,) = [e for e in events if e["k"] == "hello"]
    assert hello["tuning"] == tuning.as_dict()
    assert hello["tuning"]["switch_interval_s"] == 0.002
    assert hello["tuning"]["kernels"]["msm_host_buffers"] == 6
    assert open_recording(rec).hello["tuning"] == tuning.as_dict()  # and in the file
    _engine, events = run_engine(cfg)
    (hello,) = [e for e in events if e["k"] == "hello"]
    assert hello["tuning"] == Tuning().as_dict()


def test_a_recording_whose_tuning_names_a_removed_setting_still_reads(tmp_path):
    """``hello.tuning`` is a free map: a recording made while a setting since decided and
    removed still existed carries its key, and reads as any other."""
    from provetop.recordings.reader import open_recording
    from provetop.recordings.schema import validate
    from provetop.recordings.writer import RecordingWriter
    from tests.recordings.fixtures import hello

    old = {**Tuning().as_dict(), "sync_scope": "worker", "synthesis_after_h": "queued"}
    old["kernels"] = {**old["kernels"], "msm_pass_scalars": "host", "msm_host_interleave": "on"}
    event = {**hello(), "tuning": old}
    assert validate(event) is event
    rec = tmp_path / "old.pvtrec"
    with RecordingWriter(rec) as w:
        w.write(event)
    assert open_recording(rec).hello["tuning"] == old


@pytest.mark.parametrize("raw", ["fast", "0", "-1", "2", "nan", ""])
def test_a_bad_switch_interval_stops_provetop_engine_with_one_line(monkeypatch, capsys, raw):
    """A bad ``PROVETOP_SWITCH_INTERVAL`` is one line naming it and exit code 2, before any
    device is made or the run starts (any backend: the record is read once, up front)."""
    from provetop.cli import main

    monkeypatch.setenv("PROVETOP_SWITCH_INTERVAL", raw)
    code = main(["engine", "--preset", "ci", "--exit-when-done", "--no-record", "--listen", "unix"])
    assert code == 2
    out = capsys.readouterr()
    assert out.out == ""  # nothing started
    assert out.err.count("\n") == 1 and out.err.startswith("provetop: error:")
    assert "PROVETOP_SWITCH_INTERVAL" in out.err and repr(raw) in out.err


def test_provetop_inject_is_the_default_of_the_inject_flag(monkeypatch):
    """``PROVETOP_INJECT`` reaches the engine through the record; ``--inject`` overrides it."""
    import argparse

    from provetop.commands.engine import build_engine
    from provetop.engine.run.options import add_engine_arguments

    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    monkeypatch.setenv("PROVETOP_INJECT", "raise:h_step:1")
    for argv, spec in (([], "raise:h_step:1"), (["--inject", "raise:msm_h:2"], "raise:msm_h:2")):
        args = parser.parse_args(["--preset", "ci", "--no-record", *argv])
        engine = build_engine(args)
        try:
            assert engine.faults is not None and engine.faults.spec == spec
            assert engine.tuning.inject == "raise:h_step:1"
        finally:
            engine.close()


def test_the_engine_hands_the_kernel_settings_to_the_backend(monkeypatch):
    """``get_backend(name, tuning=...)`` receives the kernels' part of the run's record."""
    import provetop.engine.run.runner
    from provetop.engine.settings.config import from_preset
    from provetop.kernels.backends import get_backend

    kernels = KernelTuning(msm_host_buffers=3)
    seen = []

    def spy(name, tuning=None):
        seen.append((name, tuning))
        return get_backend(name, tuning=tuning)

    monkeypatch.setattr(provetop.engine.run.runner, "get_backend", spy)
    run = provetop.engine.run.runner.Engine(
        from_preset("ci"), listen=False, tuning=Tuning(kernels=kernels)
    )
    run.close()
    assert seen == [("cpu", kernels)]


def test_the_cuda_run_takes_its_switch_interval_from_the_record():
    """``PROVETOP_SWITCH_INTERVAL`` reaches the CUDA run through the record only: the run sets
    it for its life and restores the interpreter's at close (no GPU needed)."""
    import sys

    from provetop.engine.run.cuda_run import CudaRun

    before = sys.getswitchinterval()
    run = CudaRun(Tuning.from_env({"PROVETOP_SWITCH_INTERVAL": "0.002"}).switch_interval_s)
    try:
        assert sys.getswitchinterval() == pytest.approx(0.002)
    finally:
        run.close([])
    assert sys.getswitchinterval() == before


def test_defines_read_alike_from_settings_and_prebuild():
    """PROVETOP_*_DEFINES and `prebuild --define` go through one parser, so a prebuilt cubin
    and a run name the same defines (NAME alone is NAME=1); a bad name is one clear error."""
    from provetop.kernels.tuning import parse_defines

    env = {"PROVETOP_MSM_DEFINES": "MONT_SQR_SOS, G1_COLD_DBL=1"}
    from_env = Tuning.from_env(env).kernels.msm_defines
    flags = ["MONT_SQR_SOS", "G1_COLD_DBL=1"]  # as `--define X --define Y=1` collects them
    assert parse_defines(",".join(flags), "--define") == from_env
    assert from_env == (("MONT_SQR_SOS", "1"), ("G1_COLD_DBL", "1"))
    with pytest.raises(SettingError, match="--define: '1BAD' is not a C identifier"):
        parse_defines("1BAD", "--define")
