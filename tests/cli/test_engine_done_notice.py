"""``provetop engine`` says on stderr when its last proof is done, and whether it stays up."""

from __future__ import annotations

import io

from provetop.commands.engine import done_notice


def _said(stays_up: bool, stopping: bool = False, **event: object) -> str:
    err = io.StringIO()
    notice = done_notice(err, stays_up=stays_up, stopping=lambda: stopping)
    notice({"k": "partition_done", "ok": True})
    notice({"k": "engine_state", "state": "running"})
    notice({"k": "engine_state", "state": "done", **event})
    return err.getvalue()


def test_staying_up_after_the_last_proof_is_said_with_how_to_end_it():
    line = _said(True, reason="all proofs done")
    assert line.count("\n") == 1
    assert "all proofs done; staying up" in line and "Ctrl-C" in line
    assert "--exit-when-done" in line


def test_exit_when_done_says_it_exits():
    assert _said(False, reason="all proofs done") == "provetop engine: all proofs done; exiting\n"


def test_a_stopped_or_failed_run_adds_no_line_to_the_one_that_says_why():
    assert _said(True, reason="stopped before every proof was done") == ""
    assert _said(False, reason="failed") == ""
    # every proof done, but a stop was asked for (a recording that cannot be written): it exits
    assert _said(True, stopping=True, reason="all proofs done") == ""
