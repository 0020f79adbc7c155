"""``provetop engine``: run the proving engine headless, serving telemetry on a socket.

Keeps its imports light (the parser is built for every command): the flags come from
``provetop.engine.run.options`` (configuration only); the engine itself is imported when the
command runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, TextIO

from provetop.base.errors import UsageError
from provetop.base.files import check_path
from provetop.base.units import fmt_bytes
from provetop.engine.run.options import (
    add_engine_arguments,
    backend_note,
    config_from_args,
    tuning_from_env,
)
from provetop.engine.run.runner import Engine, EngineError
from provetop.recordings.progress import progress_line
from provetop.recordings.writer import default_recording_path

PROGRESS_PREFIX = "progress: "  # the stderr lines of a long start-up step (run skips them)
PROGRESS_LINE_S = 1.0  # at most one line a second per step on stderr, and always its last
PROGRESS_AFTER_S = 2.0  # a step shorter than this writes nothing (the event log has its line)
# The main thread waits this long at a time, so a signal's handler runs within it (SIGTERM and
# SIGINT must act within 2 s at every stage: a quarter of that, in short waits that cost nothing)
SIGNAL_POLL_S = 0.25

__all__ = ["add_engine_arguments", "build_engine", "config_from_args", "run"]


def build_engine(args: argparse.Namespace, log: Callable[[str], None] | None = None) -> Engine:
    """Check the flags and the ``PROVETOP_*`` settings and construct (not start) the Engine;
    UsageError on bad values."""

    config = config_from_args(args)
    tuning = tuning_from_env()  # the only read of the environment's settings
    inject = getattr(args, "inject", None)
    if args.record is not None and args.no_record:
        raise UsageError("--record and --no-record are mutually exclusive")
    if args.token_file is not None:
        check_path(args.token_file, "--token-file")
    if args.token_file and not (args.listen or "").startswith("tcp://"):
        raise UsageError("--token-file is only used with --listen tcp://127.0.0.1:PORT")
    record = None
    if not args.no_record:
        if args.record is not None:
            # an empty or overlong path is a typo, never "the default place"
            record = check_path(args.record, "--record")
            if os.path.lexists(record):  # a typo must not turn a file (or a link) into a recording
                raise UsageError(f"--record {record}: the path exists; the engine never overwrites")
        else:
            record = str(default_recording_path())
    try:
        return Engine(
            config,
            listen=args.listen,
            token_file=args.token_file,
            read_only=args.read_only,
            record=record,
            log=log,
            inject=inject if inject is not None else tuning.inject,
            tuning=tuning,
            metrics=getattr(args, "metrics", None),
        )
    except EngineError as exc:
        raise UsageError(str(exc)) from None


def progress_printer(
    err: TextIO, interval: float = PROGRESS_LINE_S, clock: Callable[[], float] = time.monotonic
) -> Callable[[dict[str, Any]], None]:
    """A bus listener that writes ``progress`` events to ``err`` once a step has run
    :data:`PROGRESS_AFTER_S`: one line per step at most every ``interval`` seconds (the events
    come twice a second), and the line that says the step is done. Why stderr: stdout carries
    the address ``provetop run`` reads."""
    last: dict[tuple[object, object, object], float] = {}

    def on_event(e: dict[str, Any]) -> None:
        if e.get("k") != "progress" or float(e.get("elapsed_s") or 0.0) < PROGRESS_AFTER_S:
            return
        key = (e["task"], e.get("device"), e.get("worker"))
        now = clock()
        if e["done"] < e["total"] and key in last and now - last[key] < interval:
            return
        last[key] = now
        try:
            print(PROGRESS_PREFIX + progress_line(e), file=err, flush=True)
        except (OSError, ValueError):  # stderr closed: the run goes on
            pass

    return on_event


def done_notice(
    err: TextIO, stays_up: bool, stopping: Callable[[], bool] = lambda: False
) -> Callable[[dict[str, Any]], None]:
    """A bus listener that says on ``err`` when the run's last proof is done and what the
    engine does next: an operator who started it headless otherwise sees a process that
    neither works nor exits. A run that stopped or failed gets no line here (the one that
    says why is printed already). stderr, because stdout carries what ``provetop run``
    reads."""

    def on_event(e: dict[str, Any]) -> None:
        if e.get("k") != "engine_state" or e.get("state") != "done":
            return
        if e.get("reason") != "all proofs done" or stopping():
            return  # stopped or failed: the lines that say why are printed already
        if stays_up:
            line = (
                "provetop engine: all proofs done; staying up so that dashboards and clients "
                "can still read it (Ctrl-C or a client's stop ends it; --exit-when-done exits)"
            )
        else:
            line = "provetop engine: all proofs done; exiting"
        try:
            print(line, file=err, flush=True)
        except (OSError, ValueError):
            pass

    return on_event


def _sigterm_as_interrupt() -> None:
    """SIGTERM ends the run like Ctrl-C: intake stops, running partitions finish, the
    recording gets its footer and the socket is removed."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _stacks_on_sigusr1() -> None:
    """``kill -USR1 PID`` writes every thread's Python stack to stderr and the engine runs
    on: what an operator (or ``provetop bench signals``) needs when a run or its stop hangs,
    without a debugger on the machine."""
    import faulthandler
    import signal

    try:
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    except (AttributeError, ValueError, RuntimeError, OSError):  # no such signal here
        pass


def _wait_interruptibly(wait: Callable[[float], bool]) -> None:
    """``wait(timeout)`` until it returns True, a short timeout at a time. Why not one wait
    with no timeout: Python runs a signal's handler in the main thread only once that thread
    is back in the interpreter, and a process-wide SIGTERM may be delivered to any thread; in
    a CUDA run (the driver's and NVML's threads beside ours) it was, and the main thread
    stayed blocked in the untimed wait: SIGTERM was never acted on (H100, 2026-12-07)."""
    while not wait(SIGNAL_POLL_S):
        pass


def _ignore_signals() -> None:
    """While the run shuts down cleanly, a second Ctrl-C or SIGTERM would cut the recording's
    footer; the shutdown is bounded (Engine.close), and SIGKILL still works."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def run(args: argparse.Namespace) -> int:
    engine = build_engine(args)
    engine.bus.add_listener(progress_printer(sys.stderr))
    if not args.exit_when_done:  # with it, stdout's "done:" line is the last word
        engine.bus.add_listener(done_notice(sys.stderr, True, engine.stopping))
    out = sys.stdout
    _sigterm_as_interrupt()
    _stacks_on_sigusr1()
    cfg = engine.config
    interrupted = False
    try:
        engine.start()
    except EngineError as exc:
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:  # a signal while the recording and the socket were opened
        _ignore_signals()
        engine.close()
        print("provetop: interrupted during start-up; recording closed", file=out)
        return 1 if engine.record_error is not None else 0
    try:
        dev = engine.devices[0]
        print(f"provetop engine {engine.engine_id}: {backend_note(args)}", file=out)
        count = f"{cfg.proofs} proofs" if cfg.duration_s is None else f"{cfg.duration_s:g} s of"
        print(
            f"  workload: n = 2^{cfg.domain_log}, {cfg.partitions} partitions x {count} "
            f"proofs, concurrency {cfg.concurrency}, {cfg.workers_per_device} workers/device, "
            f"allocator {cfg.allocator}, verify {cfg.verify_mode}"
            + (", synthesis ahead" if cfg.synthesis_ahead else ""),
            file=out,
        )
        print(
            f"  devices: {', '.join(str(d.index) for d in engine.devices)} "
            f"({fmt_bytes(dev.capacity)} each{', modeled' if dev.modeled else ''})",
            file=out,
        )
        if cfg.backend == "cpu" and cfg.domain_log > 16:
            print(
                f"  note: n = 2^{cfg.domain_log} on the cpu backend is exact but slow "
                "(pure-Python NTT and checks); expect minutes to hours per partition",
                file=out,
            )
        if engine.address:
            print(f"  listening on {engine.address}", file=out)
        if engine.metrics_url:
            print(f"  metrics on {engine.metrics_url}", file=out)
        if engine.record_path:
            print(f"  recording to {engine.record_path}", file=out)
        out.flush()
        if args.exit_when_done:
            _wait_interruptibly(engine.wait)
        else:
            _wait_interruptibly(engine.wait_for_stop)
            _wait_interruptibly(engine.wait)
    except KeyboardInterrupt:
        interrupted = True
        _ignore_signals()
        engine.stop("interrupted")
    finally:
        engine.close()
    totals = engine.state.totals()
    print(
        f"done: {totals['proofs_done']}/{engine.scheduler.proofs} proofs, "
        f"{totals['partitions_ok']}/{totals['partitions']} partitions ok, "
        f"{totals['partitions_verified']} verified, {totals['ooms']} OOMs, "
        f"{totals['retries']} retries",
        file=out,
    )
    for problem in engine.bus.recorder_errors:
        print(f"provetop: recording problem: {problem}", file=sys.stderr)
    if engine.error:
        print(f"provetop: engine failed: {engine.error}", file=sys.stderr)
        return 1
    if engine.record_error is not None:  # 1 on every stop path, whatever --on-record-error
        return 1
    if interrupted:  # the operator asked to stop, and the run stopped cleanly
        print("provetop: interrupted; in-flight partitions finished, recording closed", file=out)
        return 0
    return 0 if engine.ok else 1
