"""End to end on the cpu backend: every partition computed, verified exactly, recorded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.recordings.reader import open_recording
from provetop.recordings.schema import PHASES, validate

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path, **overrides):
    cfg = from_preset("ci", **overrides)
    path = tmp_path / "run.pvtrec"
    engine = Engine(cfg, listen=False, record=path)
    sub = engine.subscribe("test")
    engine.start()
    assert engine.wait(60), "engine did not finish"
    engine.close()
    events = [e for e in sub.drain() if e["k"] != "snapshot"]
    return engine, events, path


def test_ci_run_verifies_every_partition_and_records_it(tmp_path):
    engine, events, path = _run(tmp_path, proofs=2)
    assert engine.ok and engine.error is None
    for e in events:
        validate(e)
    done = [e for e in events if e["k"] == "partition_done"]
    assert sorted((e["proof"], e["partition"]) for e in done) == [
        (p, q) for p in (0, 1) for q in (0, 1)
    ]
    assert all(e["ok"] and e["verified"] is True and e["attempt"] == 0 for e in done)
    assert {e["proof"] for e in events if e["k"] == "proof_done" and e["ok"]} == {0, 1}
    # every phase of a partition is emitted in pipeline order, begin before end
    order = list(PHASES)
    for e in done:
        mine = [
            x
            for x in events
            if x["k"] in ("phase_begin", "phase_end")
            and (x["proof"], x["partition"]) == (e["proof"], e["partition"])
        ]
        names = [x["phase"] for x in mine if x["k"] == "phase_begin"]
        assert names == sorted(names, key=order.index)
        assert set(names) == set(e["phases_ms"])
        assert all(x["ok"] for x in mine if x["k"] == "phase_end")
    assert events[0]["k"] == "hello" and events[0]["modeled"] is True
    assert events[-1] == {**events[-1], "k": "engine_state", "state": "done"}
    assert any(e["k"] == "memory" and e["modeled"] for e in events)

    rec = open_recording(path)
    assert rec.complete and not rec.truncated
    state = rec.state()
    totals = state.totals()
    assert totals["partitions"] == totals["partitions_verified"] == 4
    assert totals["proofs_done"] == 2 and totals["ooms"] == 0
    # the recording holds exactly what the bus dispatched (the recorder never drops)
    assert len([e for e in rec.events if e["k"] != "snapshot"]) == len(events)


def test_wrong_kernel_result_is_caught_by_verification(tmp_path):
    from provetop.engine.partition.testing import GatedBackend
    from provetop.kernels.backends import get_backend

    class WrongMsm(GatedBackend):
        def msm(self, points, scalars, **kw):
            s = scalars.copy()
            if len(s):
                s[0, 0] ^= 1  # one flipped bit in one scalar
            return self.inner.msm(points, s, **kw)

    cfg = from_preset("ci", workers_per_device=1)
    engine = Engine(cfg, listen=False, backend=WrongMsm(get_backend("cpu")))
    sub = engine.subscribe()
    engine.start()
    assert engine.wait(60)
    engine.close()
    done = [e for e in sub.drain() if e["k"] == "partition_done"]
    assert done and all(e["verified"] is False for e in done)
    assert not engine.ok


@pytest.mark.parametrize("verify, expected", [("never", {None}), ("sampled", {True, None})])
def test_verify_modes(tmp_path, verify, expected):
    engine, events, _ = _run(tmp_path, verify=verify, partitions=4, workers_per_device=1)
    got = {e["verified"] for e in events if e["k"] == "partition_done"}
    assert got == expected
    assert engine.ok


def test_cli_done_criterion(tmp_path):
    """The issue's done criterion, through the real command line."""
    path = tmp_path / "x.prec"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "provetop",
            "engine",
            "--backend",
            "cpu",
            "--preset",
            "ci",
            "--proofs",
            "2",
            "--exit-when-done",
            "--record",
            str(path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "listening on unix:" in proc.stdout
    state = open_recording(path).state()
    assert state.totals()["partitions_verified"] == 4


def test_a_kernel_exception_is_a_fault_retried_once_and_never_stops_the_run(tmp_path):
    from provetop.engine.partition.testing import GatedBackend
    from provetop.kernels.backends import get_backend

    class FailsFirstH(GatedBackend):
        calls = 0

        def h_step(self, a, b, c, **kw):
            type(self).calls += 1
            if type(self).calls in (1, 3, 4):  # p0 once (retry ok), p1 twice (lost)
                raise RuntimeError("kernel launch failed")
            return self.inner.h_step(a, b, c, **kw)

    cfg = from_preset("ci", workers_per_device=1, partitions=3)
    engine = Engine(cfg, listen=False, backend=FailsFirstH(get_backend("cpu")))
    sub = engine.subscribe()
    engine.start()
    assert engine.wait(60)
    engine.close()
    events = sub.drain()
    faults = [e for e in events if e["k"] == "fault"]
    assert [f["kind"] for f in faults] == ["exception"] * 3
    assert all("kernel launch failed" in f["message"] for f in faults)
    final = {}
    for e in events:
        if e["k"] == "partition_done":
            final[e["partition"]] = e
    assert final[0]["ok"] and final[0]["attempt"] == 1 and final[0]["verified"]
    assert not final[1]["ok"] and final[1]["attempt"] == 1 and "RuntimeError" in final[1]["failure"]
    assert final[2]["ok"] and final[2]["attempt"] == 0 and final[2]["verified"]
    assert [e["ok"] for e in events if e["k"] == "proof_done"] == [False]
    assert engine.error is None and not engine.ok


def test_a_device_that_cannot_be_set_up_starts_no_worker_on_any_device(tmp_path):
    """Two devices, the second's context fails (on CUDA: its SRS placement or the host
    check). No worker may have started on the first: the run's teardown frees the devices'
    SRS, and nothing joins workers once the run has failed."""
    started = []

    class SecondDeviceFails(Engine):
        def _device_context(self, ctx, device):
            if device.index == 1:
                raise RuntimeError("device 1 cannot place its SRS")
            return super()._device_context(ctx, device)

        def _worker_target(self, ctx, device, w, mutex, gate):
            started.append((device.index, w))
            return super()._worker_target(ctx, device, w, mutex, gate)

    engine = SecondDeviceFails(from_preset("ci", devices=(0, 1)), listen=False)
    engine.start()
    assert engine.wait(60)
    engine.close()
    assert started == []
    assert engine.error == "RuntimeError: device 1 cannot place its SRS" and not engine.ok
