"""The dashboard's commands refuse bad arguments with one line and exit code 2, before any
terminal is taken over."""

from __future__ import annotations

import pytest

from provetop.cli import main


@pytest.mark.parametrize(
    "argv, message",
    [
        (["replay", "/nonexistent/run.pvtrec"], "no such recording"),
        (["watch", "http://127.0.0.1:9"], "unsupported address"),
        (["watch", "tcp://127.0.0.1"], "expected tcp://HOST:PORT"),
        (["watch", "tcp://127.0.0.1:7001"], "needs --token-file"),
        (["watch"], "no local engine found"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # no engine lives here
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_replay_refuses_what_is_not_a_recording(tmp_path, capsys):
    bogus = tmp_path / "notes.txt"
    bogus.write_text("hello")
    assert main(["replay", str(bogus)]) == 2
    assert "not a provetop recording" in capsys.readouterr().err
    assert main(["replay", str(bogus), "--speed", "32"]) == 2


def test_run_takes_the_engine_flags():
    from provetop.cli import build_parser

    args = build_parser().parse_args(
        ["run", "--backend", "cpu", "--preset", "ci", "--proofs", "3", "--light"]
    )
    assert (args.backend, args.preset, args.proofs, args.light) == ("cpu", "ci", 3, True)
