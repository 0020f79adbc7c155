"""The engine's command-line flags (``provetop engine``; ``provetop run`` and the tests reuse
them).

Why a module of their own that imports nothing but argparse: every ``provetop ... --help``
builds them, and help must answer without loading NumPy, the kernels or a CUDA probe. Turning
the parsed flags into a configuration is :mod:`provetop.engine.run.options`'s job.
"""

from __future__ import annotations

import argparse
import math


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
        type=_finite,
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


def _finite(text: str) -> float:
    """A float flag that must be a finite number (argparse turns the ValueError into one line
    and exit 2; the range is the configuration's to check, with its own message)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value
