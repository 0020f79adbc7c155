"""``provetop trace [options] -- COMMAND [ARGS...]``: run a CUDA program unmodified and see its
pools (both CUDA allocators, the phantom, every out-of-memory refusal) as the engine's
telemetry: ``watch`` and ``top`` attach to it, it records, and /metrics serves it.

The program keeps its terminal: its stdout and stderr are its own, so the trace says what it
does on stderr, and its exit status is the program's (128 + N when signal N killed it). Exit
2 (one line, the program not started) when the trace cannot run: no NVIDIA GPU or driver here,
no injection library and no way to build it, a bad option.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
from pathlib import Path

from provetop.base.errors import UsageError
from provetop.base.units import fmt_bytes
from provetop.kernels.cuda import inject_build
from provetop.recordings.writer import default_recording_path
from provetop.trace.session import TraceError, TraceOptions, TraceSession


def _command(args: argparse.Namespace) -> list[str]:
    cmd = list(args.program)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("trace: no command given (provetop trace [options] -- COMMAND ...)")
    return cmd


def gpu_problem() -> str | None:
    """Why CUDA cannot run a program here (None when a device is visible): the driver's own
    answer, asked without a context (cuInit and cuDeviceGetCount make none)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver here (libcuda.so.1 not found)"
    count = ctypes.c_int(0)
    rc = cuda.cuInit(0)
    if rc != 0:
        return f"the NVIDIA driver did not initialise (cuInit returned {rc})"
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return "no CUDA device is visible (check CUDA_VISIBLE_DEVICES)"
    return None


def find_library(given: str | None) -> Path:
    """The injection library: ``--library``, else built (or found in its cache) here."""
    if given:
        path = Path(given)
        if not path.is_file():
            raise UsageError(f"trace: --library {given}: no such file")
        return path.resolve()
    result = inject_build.build()
    if not result.ok or result.path is None:
        raise UsageError(
            f"trace: the injection library cannot be built here: {result.reason} "
            "(pip install 'provetop[cuda12]' brings CUPTI; then provetop warmup)"
        )
    return result.path


def _check(args: argparse.Namespace) -> None:
    if args.record and args.no_record:
        raise UsageError("trace: --record and --no-record are mutually exclusive")
    if args.listen and args.no_listen:
        raise UsageError("trace: --listen and --no-listen are mutually exclusive")
    if args.record and os.path.lexists(args.record):
        raise UsageError(
            f"trace: --record {args.record}: the path exists; a trace never overwrites"
        )
    if args.interval_ms < 0 or args.interval_ms > 60_000:
        raise UsageError(f"trace: --interval-ms {args.interval_ms}: between 0 and 60000")
    if args.workers_per_device < 1:
        raise UsageError("trace: --workers-per-device must be at least 1")
    if args.cuzk_log and args.cuzk_log != "-" and not os.path.exists(args.cuzk_log):
        # the log may not exist yet (the program writes it): only its folder must
        folder = os.path.dirname(os.path.abspath(args.cuzk_log))
        if not os.path.isdir(folder):
            raise UsageError(f"trace: --cuzk-log {args.cuzk_log}: no folder {folder}")


def run(args: argparse.Namespace) -> int:
    command = _command(args)
    _check(args)
    problem = gpu_problem()
    if problem is not None:
        raise UsageError(f"trace needs an NVIDIA GPU: {problem}")
    library = find_library(args.library)

    record = None if args.no_record else (args.record or None)
    options = TraceOptions(
        command=command,
        library=library,
        listen=False if args.no_listen else args.listen,
        token_file=args.token_file,
        record=record,
        metrics=args.metrics,
        heal=args.heal,
        interval_ms=args.interval_ms,
        cuzk_log=args.cuzk_log,
        workers_per_device=args.workers_per_device,
        read_only=args.read_only,
    )
    session = TraceSession(options)
    if not args.no_record and not args.record:
        options.record = str(default_recording_path(session.engine_id))
    err = sys.stderr
    try:
        pid = session.start()
    except TraceError as exc:
        raise UsageError(f"trace: {exc}") from None

    def say(line: str) -> None:
        print(f"provetop trace: {line}", file=err, flush=True)

    say(f"pid {pid}: {session.line}" + (" (heal on)" if args.heal else ""))
    if session.address:
        say(f"listening on {session.address}")
    if session.metrics_url:
        say(f"metrics on {session.metrics_url}")
    if options.record:
        say(f"recording to {options.record}")
    try:
        rc = session.wait()
    finally:
        session.close()
    s = session.summary()
    lanes = ", ".join(
        f"gpu{v['gpu']} pid {v['pid']} pool peak {fmt_bytes(v['async_high'])}"
        for _, v in sorted(s["lanes"].items())
    )
    say(
        f"{command[0]} exited with code {rc}; {s['processes']} process(es) traced, "
        f"{s['ooms']} out-of-memory refusal(s), {s['heals']} heal(s)"
        + (f"; {lanes}" if lanes else "")
    )
    for problem in session.bus.recorder_errors:
        say(f"recording problem: {problem}")
    return rc
