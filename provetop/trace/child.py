"""The traced program: started with the library injected, its exit status passed through.

Why these rules: ``provetop trace -- CMD`` must behave like ``CMD`` to whatever runs it (a
systemd unit, a scheduler, a shell script): the program keeps the terminal's stdin, stdout and
stderr, its exit code is the trace's, a signal that killed it is reported as the shell does
(128 + the signal), and Ctrl-C or SIGTERM reach the program, which decides what to do (the
trace keeps reading until the program's libraries have flushed).
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

# The variables the library reads (docs/trace-records.md); any of them already set in the
# caller's environment is replaced, so a nested trace never writes into the outer one's socket.
LIBRARY_VARS = (
    "CUDA_INJECTION64_PATH",
    "PROVETOP_TRACE_OUT",
    "PROVETOP_TRACE_PID",
    "PROVETOP_TRACE_INTERVAL_MS",
    "PROVETOP_TRACE_RING",
    "PROVETOP_TRACE_HEAL",
    "PROVETOP_TRACE_HEAL_WAIT_MS",
)
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def traced_env(
    base: Mapping[str, str], library: Path, socket_path: str, *, interval_ms: int, heal: bool
) -> dict[str, str]:
    """The program's environment: the caller's, with the library's variables set."""
    env = {k: v for k, v in base.items() if k not in LIBRARY_VARS}
    env["CUDA_INJECTION64_PATH"] = str(library)
    env["PROVETOP_TRACE_OUT"] = f"unix:{socket_path}"
    env["PROVETOP_TRACE_INTERVAL_MS"] = str(interval_ms)
    if heal:
        env["PROVETOP_TRACE_HEAL"] = "1"
    return env


def exit_code(returncode: int) -> int:
    """The shell's convention: a program killed by signal N exits 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


class Child:
    """The program, started by :meth:`start`; signals the trace gets are passed on to it."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.proc: subprocess.Popen[bytes] | None = None
        self._old: dict[int, object] = {}

    def start(self) -> int:
        """Start it; its pid. OSError when it cannot be started (not found, not executable)."""
        self.proc = subprocess.Popen(self.argv, env=self.env)  # noqa: S603 (the user's command)
        for sig in FORWARDED:
            try:
                self._old[sig] = signal.signal(sig, self._forward)
            except ValueError:  # not the main thread (tests run sessions on threads)
                break
        return self.proc.pid

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.send_signal(signum)
            except OSError:
                pass

    def terminate(self) -> None:
        """SIGTERM to the program (the operator's ``stop``)."""
        self._forward(signal.SIGTERM, None)

    def wait(self, timeout: float | None = None) -> int | None:
        """Its exit code (:func:`exit_code`), or None while it runs past ``timeout``."""
        assert self.proc is not None
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return exit_code(rc)

    def restore_signals(self) -> None:
        for sig, old in self._old.items():
            try:
                signal.signal(sig, old)  # type: ignore[arg-type]
            except (ValueError, TypeError):
                pass
        self._old.clear()
