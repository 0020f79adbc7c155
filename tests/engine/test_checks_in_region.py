"""A checked partition's device sums run inside its own GPU region, never beside another's.

Why: on the H200 the CUDA runner took A, B, C(tau) during the upload and the aux sums after the
release, so they ran beside the neighbour's MSMs and stretched them by ~200 ms
(bench/notes/pipeline.md, b8f7d46). The CUDA sums need a GPU; here the driver's placement
of the two phases is checked with cpu ops that record what they are asked, on the cpu backend.
"""

from __future__ import annotations

import pytest

from provetop.engine.partition.cpu import CpuPartition
from provetop.engine.settings.config import from_preset
from tests.engine.run_helper import run_engine


def _fake_device_checks(monkeypatch) -> list[tuple[str, int, int]]:
    """Device checks on the cpu backend: each step records its call, and the check passes
    only when both of this attempt's sums were taken (a retry starts a fresh attempt)."""
    calls: list[tuple[str, int, int]] = []

    def inputs(self, att, a, b, c):
        calls.append(("inputs", att.proof, att.partition))
        att.abc_at_tau = (1, 2, 3)

    def sums(self, att, w, h):
        assert h is not None  # H is still on the device: copy_back has not freed d_a
        calls.append(("sums", att.proof, att.partition))
        return {"h": 4}

    def exact(self, att, w, h, results):
        assert h is None  # no host copy of H when the device summed it
        return att.abc_at_tau == (1, 2, 3) and att.device_sums == {"h": 4}

    def h_sum(self, att, h):  # the device checks' third step (H's sum before its block goes)
        return 4

    # the cpu ops have no device checks of their own: these are the DeviceChecks they take
    monkeypatch.setattr(CpuPartition, "checks_on_device", True)
    monkeypatch.setattr(CpuPartition, "check_inputs", inputs, raising=False)
    monkeypatch.setattr(CpuPartition, "check_h", h_sum, raising=False)
    monkeypatch.setattr(CpuPartition, "check_sums", sums, raising=False)
    monkeypatch.setattr(CpuPartition, "verify", exact)
    return calls


def test_check_phases_are_inside_the_checked_partitions_own_region(monkeypatch):
    calls = _fake_device_checks(monkeypatch)
    cfg = from_preset("ci", partitions=4, workers_per_device=2, verify="sampled", verify_every=2)
    _engine, events = run_engine(cfg)

    done = {(e["proof"], e["partition"]): e for e in events if e["k"] == "partition_done"}
    checked = {k for k, e in done.items() if e["verified"] is not None}
    assert checked == {(0, 0), (0, 2)} and all(done[k]["verified"] for k in checked)
    assert sorted(calls) == sorted((kind, *k) for k in checked for kind in ("inputs", "sums"))
    for key, e in done.items():
        phases = list(e["phases_ms"])
        has = {"check_inputs", "check_sums"} <= set(phases)
        assert has == (key in checked), (key, phases)
        if has:  # in pipeline order: before the H step, after the last MSM
            assert phases.index("check_inputs") < phases.index("h_step")
            assert phases.index("msm_b_g1") < phases.index("check_sums")
            assert phases.index("check_sums") < phases.index("copy_back")

    # inside the mutex: no other partition's GPU phase runs between this one's acquire and
    # release, and the check phases fall in between
    held: dict[tuple[int, int], list[int]] = {}
    for e in events:
        if e["k"] == "mutex":
            held.setdefault((e["proof"], e["partition"]), []).append(e["t"])
    for e in events:
        if e["k"] in ("phase_begin", "phase_end") and e["phase"].startswith("check_"):
            lo, hi = held[(e["proof"], e["partition"])][:2]
            assert lo <= e["t"] <= hi


def test_host_checks_keep_h_and_run_no_check_phase(tmp_path):
    """The cpu backend checks on the host after the release, from H's coefficients."""
    cfg = from_preset("ci", partitions=2, workers_per_device=1, verify="always")
    _engine, events = run_engine(cfg)
    done = [e for e in events if e["k"] == "partition_done"]
    assert len(done) == 2 and all(e["verified"] for e in done)
    assert all(not any(p.startswith("check_") for p in e["phases_ms"]) for e in done)


@pytest.mark.parametrize("phase", ["check_inputs", "check_sums"])
def test_a_fault_in_a_check_phase_is_retried_and_the_retry_checks_again(monkeypatch, phase):
    """An exception injected as a check phase starts fails the attempt inside the region;
    the retry (fallback path, a fresh attempt) takes both sums again and verifies."""
    calls = _fake_device_checks(monkeypatch)
    cfg = from_preset("ci", partitions=2, workers_per_device=1, verify="always")
    _engine, events = run_engine(cfg, inject=f"raise:{phase}:2")
    done = [e for e in events if e["k"] == "partition_done"]
    final = {(e["proof"], e["partition"]): e for e in done}
    assert all(e["ok"] and e["verified"] for e in final.values())
    failed = [e for e in done if not e["ok"]]
    assert [(e["partition"], e["attempt"]) for e in failed] == [(1, 0)]
    assert final[(0, 1)]["attempt"] == 1 and final[(0, 1)]["prestage"] == "fallback"
    assert "InjectedFault" in failed[0]["failure"]
    # the fault fires as the phase starts: the failed attempt took only the sums before it,
    # the retry both
    before = [] if phase == "check_inputs" else ["inputs"]
    assert [kind for kind, _proof, part in calls if part == 1] == [*before, "inputs", "sums"]
    ends = [e for e in events if e["k"] == "phase_end" and e["phase"] == phase]
    assert [e["ok"] for e in ends] == [True, False, True]
