"""The selftest registry and the ``provetop selftest`` command."""

from __future__ import annotations

import json

from provetop.cli import main
from provetop.kernels.selftest.registry import Check, run_check
from provetop.kernels.selftest.rows_cpu import cpu_checks


def test_registry_reports_failures_and_errors() -> None:
    def bad() -> None:
        raise AssertionError("mismatch at 3")

    def boom() -> None:
        raise RuntimeError("crash")

    assert run_check(Check("ok", 1, lambda: None)).status == "pass"
    r = run_check(Check("bad", 2, bad))
    assert r.status == "FAIL" and "mismatch at 3" in r.detail and not r.ok
    e = run_check(Check("boom", 2, boom))
    assert e.status == "ERROR" and "RuntimeError" in e.detail and not e.ok


def test_cpu_checks_are_named_and_sized() -> None:
    checks = cpu_checks()
    assert len(checks) >= 10
    assert len({c.name for c in checks}) == len(checks)
    assert all(isinstance(c.size, int) and c.size > 0 for c in checks)


def test_selftest_cli_json(capsys) -> None:
    rc = main(["selftest", "--backend", "cpu", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert all(r["status"] in ("pass", "skip") for r in out)
    assert {"name", "size", "status", "seconds"} <= set(out[0])


def test_selftest_cli_table_and_exit_code(capsys, monkeypatch) -> None:
    import provetop.kernels.selftest.runner as st

    def fail() -> None:
        raise AssertionError("deliberate")

    fine = [Check("fine", 4, lambda: None)]
    monkeypatch.setattr(st, "collect_checks", lambda backend, tuning: fine)
    assert main(["selftest"]) == 0
    text = capsys.readouterr().out
    assert "all passed" in text and "check" in text.splitlines()[0] and "fine" in text
    monkeypatch.setattr(st, "collect_checks", lambda backend, tuning: [Check("broken", 4, fail)])
    assert main(["selftest"]) == 1
    text = capsys.readouterr().out
    assert "FAIL" in text and "deliberate" in text and "1 FAILED" in text
