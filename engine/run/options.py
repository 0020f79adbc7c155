"""The engine's command-line flags, and the configuration and tuning built from them.

Why in the engine: ``provetop engine``, ``provetop run`` and ``provetop bench pipeline`` all
turn the same flags into an :class:`provetop.engine.settings.config.EngineConfig`, and a benchmark
in the
engine
must not import the command line above it (the layers of docs/architecture.md). Errors are
:class:`provetop.base.errors.UsageError` (a leaf module): one line, exit code 2.
"""

from __future__ import annotations

import argparse
import math

from provetop.base.errors import UsageError
from provetop.base.units import parse_size
from provetop.engine.devices.cuda import choose_backend
from provetop.engine.settings.config import ConfigError, EngineConfig, from_preset
from provetop.engine.settings.tuning import SettingError, Tuning


def add_engine_arguments(p: argparse.ArgumentParser) -> None:
    """The engine's flags (``provetop engine``; ``provetop run`` reuses them)."""
    p.add_argument(
        "--backend",
        choices=("cpu", "cuda"),
        help="kernel backend (default: cuda when a GPU is usable, else cpu)",
    )
    p.add_argument("--preset", help="demo, porep-32g, small, ci or phantom")
    p.add_argument("--domain-log", type=int, metavar="K", help="domain size n = 2^K (1..28)")
    p.add_argument("--partitions", type=int, help="partitions per proof")
    p.add_argument("--proofs", type=int, help="proofs to run")
    p.add_argument(
        "--duration",
        type=float,
        metavar="S",
        help="start no proof after S seconds of intake (the proofs started finish; the demo "
        "preset runs 60 s; --proofs without it runs a count instead)",
    )
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
    p.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics (off by default; ':9400' "
        "or '9400' is 127.0.0.1; another host only when named; port 0 picks one)",
    )
    p.add_argument("--read-only", action="store_true", help="refuse control commands")
    p.add_argument("--record", metavar="PATH", help="recording file (default: data directory)")
    p.add_argument("--no-record", action="store_true", help="do not write a recording")
    p.add_argument(
        "--on-record-error",
        choices=("stop", "continue"),
        help="when the recording cannot be written (disk full): stop after the partitions in "
        "flight (default) or continue without a recording; the exit code is 1 either way",
    )
    p.add_argument("--exit-when-done", action="store_true", help="exit when every proof is done")
    p.add_argument("--seed", type=int, help="seed for reproducible witnesses and SRS")
    p.add_argument(
        "--nvml-interval",
        type=_finite_positive,
        metavar="SECONDS",
        help="seconds between NVML samples of each GPU (utilisation, power...; default 1; "
        "rounded to the 10 Hz memory sampling's ticks)",
    )
    p.add_argument(
        "--inject",
        metavar="SPEC",
        help="inject faults, e.g. alloc:prestage:2,raise:h_step:1 (engine/partition/faults.py; "
        "default: $PROVETOP_INJECT)",
    )


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    """An EngineConfig from parsed flags (preset first, explicit flags on top); bad values
    raise UsageError with one line. Flags a parser lacks count as not given."""
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
            if not all(math.isfinite(x) and x >= 0 for x in profile):
                # nan passes any comparison, so a sum check alone let "nan,nan,nan" run
                raise UsageError(
                    f"--witness-profile {args.witness_profile!r}: each fraction must be a "
                    "finite number from 0 to 1"
                )
        seed = args.seed
        if seed is not None and not 0 <= seed < 1 << 63:
            raise UsageError(f"--seed {seed}: must be between 0 and 2^63 - 1")
        return from_preset(
            args.preset,
            backend=default_backend(args),
            domain_log=args.domain_log,
            partitions=args.partitions,
            proofs=args.proofs,
            duration_s=getattr(args, "duration", None),
            concurrency=getattr(args, "concurrency", None),
            workers_per_device=args.workers_per_device,
            devices=devices,
            device_memory=memory,
            allocator=args.allocator,
            witness_profile=profile,
            verify=args.verify,
            seed=seed,
            synthesis_ahead=getattr(args, "synthesis_ahead", None),
            on_record_error=getattr(args, "on_record_error", None),
            nvml_interval=getattr(args, "nvml_interval", None),
        )
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _finite_positive(text: str) -> float:
    """A float flag that must be a finite number above 0 (argparse turns the ValueError into
    one line and exit 2)."""
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(text)
    return value


def default_backend(args: argparse.Namespace) -> str:
    """``--backend``, else cuda when a GPU is visible and CuPy can use it, else cpu (the
    choice and its reason are kept on ``args`` for :func:`backend_note`)."""
    return _backend_choice(args)[0]


def _backend_choice(args: argparse.Namespace) -> tuple[str, str]:
    """(backend, why), probed once per parsed command line and kept on ``args``."""
    choice: tuple[str, str] | None = getattr(args, "_backend_choice", None)
    if choice is None:
        choice = args._backend_choice = choose_backend(args.backend)
    return choice


def backend_note(args: argparse.Namespace) -> str:
    """Why this backend: said once at start-up."""
    if args.backend:
        return f"backend {args.backend}"
    return _backend_choice(args)[1]


def tuning_from_env() -> Tuning:
    """The run's ``PROVETOP_*`` settings, read once (``provetop.engine.settings.tuning``); a bad
    value is a
    UsageError naming the variable."""
    try:
        return Tuning.from_env()
    except SettingError as exc:
        raise UsageError(str(exc)) from None
