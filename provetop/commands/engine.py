"""``provetop engine``: run the proving engine headless, serving telemetry on a socket.

Keeps its imports light (the parser is built for every command); the engine is imported only
when the command runs.
"""

from __future__ import annotations

import argparse
import os
import sys


def add_parser(sub, name: str, help_text: str) -> None:
    p = sub.add_parser(name, help=help_text, description=help_text)
    add_engine_arguments(p)


def add_engine_arguments(p: argparse.ArgumentParser) -> None:
    """The engine's flags; ``provetop run`` reuses them."""
    p.add_argument(
        "--backend",
        choices=("cpu", "cuda"),
        help="kernel backend (default: cuda when a GPU is usable, else cpu)",
    )
    p.add_argument("--preset", help="porep-32g, small, ci or phantom")
    p.add_argument("--domain-log", type=int, metavar="K", help="domain size n = 2^K (1..28)")
    p.add_argument("--partitions", type=int, help="partitions per proof")
    p.add_argument("--proofs", type=int, help="proofs to run")
    p.add_argument("--concurrency", type=int, help="proofs in flight")
    p.add_argument("--workers-per-device", type=int, help="worker threads per device (2)")
    p.add_argument("--devices", metavar="LIST", help="device indices, e.g. 0,1")
    p.add_argument("--device-memory", metavar="SIZE", help="device memory to use, e.g. 16GiB")
    p.add_argument("--allocator", choices=("naive", "aware"), help="allocation policy")
    p.add_argument(
        "--witness-profile", metavar="Z,O,D", help="fractions of zeros, ones, dense scalars"
    )
    p.add_argument("--verify", choices=("always", "sampled", "never"), help="exact checks")
    p.add_argument(
        "--synthesis-ahead",
        action="store_true",
        default=None,
        help="each worker synthesises its next partition while its current one runs "
        "(a second witness buffer per worker)",
    )
    p.add_argument("--listen", help="unix (default), unix:PATH or tcp://127.0.0.1:PORT")
    p.add_argument("--token-file", metavar="F", help="token required by TCP clients")
    p.add_argument("--read-only", action="store_true", help="refuse control commands")
    p.add_argument("--record", metavar="PATH", help="recording file (default: data directory)")
    p.add_argument("--no-record", action="store_true", help="do not write a recording")
    p.add_argument("--exit-when-done", action="store_true", help="exit when every proof is done")
    p.add_argument("--seed", type=int, help="seed for reproducible witnesses and SRS")
    p.add_argument(
        "--inject",
        metavar="SPEC",
        default=os.environ.get("PROVETOP_INJECT") or None,
        help="inject faults, e.g. alloc:prestage:2,raise:h_step:1 (engine/faults.py; "
        "default: $PROVETOP_INJECT)",
    )


def config_from_args(args: argparse.Namespace):
    """An EngineConfig from parsed flags (preset first, explicit flags on top); bad values
    raise UsageError with one line."""
    from engine.config import ConfigError, from_preset
    from engine.sizes import parse_size
    from provetop.errors import UsageError

    try:
        devices = None
        if args.devices is not None:
            try:
                devices = tuple(int(x) for x in args.devices.split(",") if x.strip() != "")
            except ValueError:
                raise UsageError(
                    f"--devices expects a list like 0,1, got {args.devices!r}"
                ) from None
        memory = None
        if args.device_memory is not None:
            try:
                memory = parse_size(args.device_memory)
            except ValueError as exc:
                raise UsageError(f"--device-memory: {exc}") from None
        profile = None
        if args.witness_profile is not None:
            try:
                profile = tuple(float(x) for x in args.witness_profile.split(","))
            except ValueError:
                raise UsageError(
                    f"--witness-profile expects zeros,ones,dense fractions, "
                    f"got {args.witness_profile!r}"
                ) from None
        return from_preset(
            args.preset,
            backend=default_backend(args),
            domain_log=args.domain_log,
            partitions=args.partitions,
            proofs=args.proofs,
            concurrency=args.concurrency,
            workers_per_device=args.workers_per_device,
            devices=devices,
            device_memory=memory,
            allocator=args.allocator,
            witness_profile=profile,
            verify=args.verify,
            seed=args.seed,
            synthesis_ahead=getattr(args, "synthesis_ahead", None),
        )
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def build_engine(args: argparse.Namespace, log=None):
    """Check the flags and construct (not start) the Engine; UsageError on bad values."""
    from engine.runner import Engine, EngineError
    from provetop.errors import UsageError

    config = config_from_args(args)
    if args.record and args.no_record:
        raise UsageError("--record and --no-record are mutually exclusive")
    if args.token_file and not (args.listen or "").startswith("tcp://"):
        raise UsageError("--token-file is only used with --listen tcp://127.0.0.1:PORT")
    record = None
    if not args.no_record:
        if args.record:
            record = args.record
            if os.path.lexists(record):  # a typo must not turn a file (or a link) into a recording
                raise UsageError(f"--record {record}: the path exists; the engine never overwrites")
        else:
            from recordings.writer import default_recording_path

            record = str(default_recording_path())
    try:
        return Engine(
            config,
            listen=args.listen,
            token_file=args.token_file,
            read_only=args.read_only,
            record=record,
            log=log,
            inject=getattr(args, "inject", None),
        )
    except EngineError as exc:
        raise UsageError(str(exc)) from None


def default_backend(args: argparse.Namespace) -> str:
    """``--backend``, else cuda when a GPU is visible and CuPy can use it, else cpu (the
    choice and its reason are kept on ``args`` for :func:`backend_note`)."""
    if getattr(args, "_backend_choice", None) is None:
        from engine.devices.cuda import choose_backend

        args._backend_choice = choose_backend(args.backend)
    return args._backend_choice[0]


def backend_note(args: argparse.Namespace) -> str:
    """Why this backend: said once at start-up."""
    if args.backend:
        return f"backend {args.backend}"
    default_backend(args)
    return args._backend_choice[1]


def _sigterm_as_interrupt() -> None:
    """SIGTERM ends the run like Ctrl-C: intake stops, running partitions finish, the
    recording gets its footer and the socket is removed."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _ignore_signals() -> None:
    """While the run shuts down cleanly, a second Ctrl-C or SIGTERM would cut the recording's
    footer; the shutdown is bounded (Engine.close), and SIGKILL still works."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def run(args: argparse.Namespace) -> int:
    from engine.runner import EngineError
    from engine.sizes import fmt_size
    from provetop.errors import UsageError

    engine = build_engine(args)
    out = sys.stdout
    _sigterm_as_interrupt()
    cfg = engine.config
    interrupted = False
    try:
        engine.start()
    except EngineError as exc:
        raise UsageError(str(exc)) from None
    try:
        dev = engine.devices[0]
        print(f"provetop engine {engine.engine_id}: {backend_note(args)}", file=out)
        print(
            f"  workload: n = 2^{cfg.domain_log}, {cfg.partitions} partitions x {cfg.proofs} "
            f"proofs, concurrency {cfg.concurrency}, {cfg.workers_per_device} workers/device, "
            f"allocator {cfg.allocator}, verify {cfg.verify_mode}"
            + (", synthesis ahead" if cfg.synthesis_ahead else ""),
            file=out,
        )
        print(
            f"  devices: {', '.join(str(d.index) for d in engine.devices)} "
            f"({fmt_size(dev.capacity)} each{', modeled' if dev.modeled else ''})",
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
        if engine.record_path:
            print(f"  recording to {engine.record_path}", file=out)
        out.flush()
        if args.exit_when_done:
            engine.wait()
        else:
            engine.wait_for_stop()
            engine.wait()
    except KeyboardInterrupt:
        interrupted = True
        _ignore_signals()
        engine.stop("interrupted")
    finally:
        engine.close()
    totals = engine.state.totals()
    print(
        f"done: {totals['proofs_done']}/{cfg.proofs} proofs, "
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
    if interrupted:  # the operator asked to stop, and the run stopped cleanly
        print("provetop: interrupted; in-flight partitions finished, recording closed", file=out)
        return 0
    return 0 if engine.ok else 1
