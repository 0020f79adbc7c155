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
        (["top", "--interval", "0"], "--interval must be above 0"),
        (["top", "--interval", "nan"], "--interval must be above 0"),
        (
            ["top", "--cuzk-interval", "-1", "--cuzk-status", "http://127.0.0.1:9"],
            "--cuzk-interval must be a positive",
        ),  # fmt: skip
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # no engine lives here
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_watch_with_no_engine_falls_into_the_gpu_monitor(tmp_path, monkeypatch):
    """What ``provetop top`` runs: the local GPUs (the monitor's own screen) and discovery;
    ``--only``/``--pid`` reach the dashboard."""
    import provetop.commands.watch as watch

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # no engine lives here
    made = []

    class App:
        def __init__(self, sources, **kw):
            made.append((sources, kw))

        def run(self):
            return 0

    monkeypatch.setattr(watch, "ProvetopApp", App)
    assert main(["watch"]) == 0
    assert main(["top", "--interval", "0.5", "--only", "0,2", "--pid", "4242"]) == 0
    for sources, kw in made:
        assert [type(s).__name__ for s in sources] == ["NvmlSource"]
        assert kw["discover"]
    assert [s[0].interval for s, _ in made] == [1.0, 0.5]
    assert made[1][1]["only"] == {0, 2} and made[1][1]["pids"] == {4242}


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


def test_run_hands_the_engine_exactly_its_flags():
    """`provetop run` starts `provetop engine` as a child with the same engine flags: parsing
    what it passes gives the same values, and display flags stay with the dashboard."""
    from provetop.cli import build_parser
    from provetop.commands.run import engine_argv

    given = ["--backend", "cpu", "--preset", "small", "--proofs", "3", "--device-memory", "8GiB"]
    given += ["--workers-per-device", "1", "--verify", "always", "--seed", "7", "--read-only"]
    args = build_parser().parse_args(["run", *given, "--light", "--save-dir", "/tmp"])
    child = build_parser().parse_args(["engine", *engine_argv(args)])
    for name in ("backend", "preset", "proofs", "device_memory", "workers_per_device"):
        assert getattr(child, name) == getattr(args, name)
    assert (child.verify, child.seed, child.read_only) == ("always", 7, True)
    assert "--light" not in engine_argv(args) and "--save-dir" not in engine_argv(args)


def test_run_reports_an_engine_that_cannot_start(tmp_path, capsys):
    """A flag only the engine can refuse (here: a cuda backend without CuPy) ends `run` with
    the engine's one-line reason and exit code 2, before the dashboard opens."""
    import importlib.util

    if importlib.util.find_spec("cupy") is not None:
        import pytest

        pytest.skip("CuPy is importable here: the cuda backend may start")
    rec = tmp_path / "r.pvtrec"
    assert main(["run", "--backend", "cuda", "--preset", "ci", "--record", str(rec)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--backend cuda is not available" in err and len(err.splitlines()) == 1
    assert "error: error" not in err and not rec.exists()
