"""``provetop run``: start an engine and watch it in the dashboard.

Takes exactly the flags of ``provetop engine`` (shared from its module). The engine runs as a
child process (``provetop engine`` with the same flags) and the dashboard attaches to its
socket, as ``provetop watch`` would; other dashboards can attach too. Quitting the dashboard
stops the engine as Ctrl-C does (partitions in flight finish, the recording gets its footer).

Why a child process and not a thread: the engine's host work (the cpu backend's pure-Python
arithmetic, the CUDA backend's kernel launches) shares the GIL with anything in its process.
In one process a busy engine starved the dashboard's key handling on a loaded 2-core machine
(the real-terminal test froze), and the engine's short GIL switch interval for its launches
applied to the dashboard too.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO

from provetop.base.errors import UsageError
from provetop.base.files import check_path
from provetop.commands.engine import PROGRESS_PREFIX, add_engine_arguments, config_from_args
from provetop.commands.watch import read_token
from provetop.recordings.writer import default_recording_path
from provetop.sources.live import LiveSource
from provetop.tui.app import ProvetopApp

STARTUP_TIMEOUT_S = 600.0  # the engine prints its address before the SRS is made: this is
# only reached when the child hangs before serving (a GPU start can take a minute)
STOP_GRACE_S = 15.0  # after Ctrl-C, partitions in flight finish (a 2^27 one takes seconds)
STOP_TERM_S = 3.0  # then SIGTERM, then SIGKILL: quitting never hangs on the engine


def engine_argv(args: argparse.Namespace) -> list[str]:
    """The ``provetop engine`` flags equal to the engine flags given to ``run``."""
    probe = argparse.ArgumentParser(add_help=False)
    add_engine_arguments(probe)
    argv: list[str] = []
    for action in probe._actions:
        if not action.option_strings:
            continue
        value = getattr(args, action.dest, None)
        if value is None or value is False or value == action.default:
            continue
        flag = action.option_strings[-1]
        argv += [flag] if value is True else [flag, str(value)]
    return argv


def _check_flags(args: argparse.Namespace) -> str | None:
    """Refuse bad flags here with the engine's one-line messages, before any process starts;
    returns the recording path the engine will write (None for --no-record)."""
    config_from_args(args)
    if args.record is not None and args.no_record:
        raise UsageError("--record and --no-record are mutually exclusive")
    if args.token_file is not None:
        check_path(args.token_file, "--token-file")
    if args.token_file and not (args.listen or "").startswith("tcp://"):
        raise UsageError("--token-file is only used with --listen tcp://127.0.0.1:PORT")
    if args.no_record:
        return None
    if args.record is not None:
        check_path(args.record, "--record")  # an empty path is a typo, not the default
        if os.path.lexists(args.record):
            raise UsageError(
                f"--record {args.record}: the path exists; the engine never overwrites"
            )
        record: str = args.record
        return record
    return str(default_recording_path())


def _start_engine(
    args: argparse.Namespace, record: str | None
) -> tuple[subprocess.Popen[str], str, IO[str]]:
    """Start the child engine; return it, the address it serves (read from its stdout) and
    the file its stderr goes to."""
    argv = engine_argv(args)
    if record is not None and not args.record:
        argv += ["--record", record]
    cmd = [sys.executable, "-m", "provetop", "engine", *argv]
    err = tempfile.TemporaryFile(mode="w+")
    child = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL, text=True, bufsize=1
    )
    address = None
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    assert child.stdout is not None
    while time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:  # the engine exited before serving: its error is on stderr
            child.wait()
            err.seek(0)
            message = err.read().strip().splitlines()
            last = message[-1] if message else f"the engine exited with {child.returncode}"
            raise UsageError(last.removeprefix("provetop: ").removeprefix("error: "))
        if line.strip().startswith("listening on "):
            address = line.strip().removeprefix("listening on ")
            break
    if address is None:
        child.kill()
        raise UsageError("the engine did not start serving in time")
    # keep reading its stdout so the child never blocks on a full pipe
    threading.Thread(target=child.stdout.read, daemon=True).start()
    return child, address, err


def _stop_engine(child: subprocess.Popen[str], grace: float = STOP_GRACE_S) -> int:
    """Ctrl-C for the engine (SIGINT): intake stops, partitions in flight finish, the
    recording is closed; SIGTERM after ``grace`` seconds, SIGKILL STOP_TERM_S later."""
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, STOP_TERM_S)):
        if child.poll() is not None:
            break
        child.send_signal(sig)
        try:
            child.wait(wait)
        except subprocess.TimeoutExpired:
            continue
    if child.poll() is None:
        child.kill()
        child.wait()
    return int(child.returncode or 0)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def run(args: argparse.Namespace) -> int:
    record = _check_flags(args)
    token = read_token(args.token_file) if args.token_file else None
    child, address, err = _start_engine(args, record)
    code = 0
    if threading.current_thread() is threading.main_thread():
        # a SIGTERM to the dashboard must still stop the child cleanly (the finally below),
        # not leave an orphaned engine serving forever
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        source = LiveSource(address, token=token)
        app = ProvetopApp(
            [source], save_dir=args.save_dir, light=args.light, stop=lambda: _stop_engine(child)
        )
        code = int(app.run() or 0)
    finally:
        if child.poll() is None:  # left before the engine stopped (q twice, an error)
            print("stopping the engine…", file=sys.stderr, flush=True)
        engine_code = _stop_engine(child, grace=STOP_TERM_S)
    if record is not None:
        print(f"recording: {record}")
    if engine_code != 0:
        err.seek(0)
        lines = err.read().strip().splitlines()
        tail = [line for line in lines if not line.startswith(PROGRESS_PREFIX)][-3:]
        for line in tail:
            print(line, file=sys.stderr)
        print(f"provetop: the engine exited with {engine_code}", file=sys.stderr)
        return 1
    return code
