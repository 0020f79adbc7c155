"""``provetop bench soak``: does a long run stay flat, and does a connect/close storm leave it
alone? The targets of docs/reliability.md (Soak), measured on the real engine.

Why a bench and not a timed test: the targets are about half an hour of running, far longer
than CI allows; ``--short`` runs the same stages in seconds for the one CI test that keeps
this script working. The engine runs in this process (``ci`` preset, ``--verify never``, no
client but the storm), so the RSS read from /proc is the engine's own.

Stages: run quietly; RSS at ``--early`` and at the end of the quiet stage (target: within
10 %); then ``--cycles`` connect/close cycles on the engine's socket (target: RSS afterwards
within 50 MB of before, and the median partition time during the storm within 20 % of quiet).

The storm comes from a process of its own, as a real client's connections would: in this
process it would take the engine's GIL itself and be measured as the engine's cost. It runs
in ``--rounds`` bursts, each after a quiet window as long as ``QUIET_WINDOW_S``; quiet is the
partitions of those windows, so a machine whose speed drifts (other jobs, a shared VM) moves
both figures alike instead of one.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from provetop.base.errors import UsageError
from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.engine.settings.tuning import Tuning
from provetop.kernels.tuning import SettingError

RSS_DRIFT = 0.10  # RSS late within 10 % of RSS early
STORM_RSS_BYTES = 50 << 20  # RSS after the storm within 50 MB of before
STORM_SLOWDOWN = 0.20  # storm partition time within 20 % of quiet
RSS_EVERY_S = 30.0  # RSS sampled this often into the JSON's ``rss_series`` (growth, not 2 points)
# Quiet partitions measured before each burst of the storm: with ~8 ms partitions on two
# workers, 10 s is ~2,500 of them, and the windows sit between the bursts, so a drift in the
# machine's speed during the stage reaches quiet and storm figures alike.
QUIET_WINDOW_S = 10.0
STORM_ROUNDS = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--minutes", type=float, default=30.0, help="quiet stage (30)")
    parser.add_argument("--early", type=float, default=2.0, help="minutes to the first RSS (2)")
    parser.add_argument("--cycles", type=int, default=1000, help="connect/close cycles (1000)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=STORM_ROUNDS,
        help=f"bursts the cycles are split into, each after a quiet window ({STORM_ROUNDS})",
    )
    parser.add_argument(
        "--short", action="store_true", help="seconds instead of minutes (for CI): 12 s, 100 cycles"
    )
    parser.add_argument(
        "--no-record",
        action="store_true",
        help="run without a recording (the engine records by default, and so does the bench)",
    )
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON")
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="diagnostic: trace Python allocations (slow) and print the 15 sites that grew most "
        "from --early to the end of the quiet stage",
    )


def malloc_bytes() -> tuple[int, int] | None:
    """(in use, free but kept) bytes of glibc's malloc over all its arenas (``mallinfo2``),
    or None elsewhere: RSS that grows while "in use" stays flat is the allocator's."""
    fn = _mallinfo2()
    if fn is None:
        return None
    info = fn()
    return info.uordblks, info.fordblks


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
        )
    ]


@functools.cache
def _mallinfo2() -> Callable[[], _MallInfo2] | None:
    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    return fn


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class PartitionTimes:
    """(wall time, partition ms) of every partition_done, fed by a bus listener."""

    def __init__(self) -> None:
        # the newest only (a minute at ~160 partitions/s): the bench must not grow either
        self.items: deque[tuple[float, float]] = deque(maxlen=10_000)
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> None:
        if event["k"] == "partition_done" and event.get("ok"):
            ms = sum(event["phases_ms"].values())
            with self._lock:
                self.items.append((time.monotonic(), ms))

    def median(self, start: float, end: float) -> float | None:
        return self.median_of([(start, end)])

    def median_of(self, spans: list[tuple[float, float]]) -> float | None:
        """The median of the partitions that ended inside any of ``spans``."""
        with self._lock:
            values = [ms for t, ms in self.items if any(a <= t < b for a, b in spans)]
        return statistics.median(values) if values else None


class RssSeries:
    """RSS every ``every`` seconds on a thread of its own: ``[seconds since start, RSS bytes,
    malloc in use, malloc free]`` (the last two None without glibc), so a slow climb shows as
    a slope (two points cannot tell a filling window from a leak) and the allocator's share
    of it is visible. 60 samples for half an hour at 30 s."""

    def __init__(self, every: float = RSS_EVERY_S) -> None:
        self.every = every
        self.samples: list[list[float | None]] = []
        self._t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-rss", daemon=True)

    def start(self) -> RssSeries:
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            used, free = malloc_bytes() or (None, None)
            self.samples.append([round(time.monotonic() - self._t0, 1), rss_bytes(), used, free])
            if self._stop.wait(self.every):
                return

    def stop(self) -> list[list[float | None]]:
        self._stop.set()
        self._thread.join(5.0)
        return self.samples


def storm(path: str, cycles: int) -> int:
    """Connect and close ``cycles`` times; the connections that got through."""
    done = 0
    for _ in range(cycles):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            s.recv(1)
            done += 1
        except OSError:
            pass
        finally:
            s.close()
    return done


def storm_in_child(path: str, cycles: int) -> int:
    """:func:`storm` in a process of its own (the engine's clients are other processes)."""
    code = (
        "import sys\nfrom provetop.engine.bench.soak import storm\n"
        "print(storm(sys.argv[1], int(sys.argv[2])))"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-c", code, path, str(cycles)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=600,
    )
    return int(done.stdout.strip() or 0)


@dataclass(frozen=True)
class SoakPlan:
    """The stages' lengths: ``--short`` scales minutes to seconds (and the defaults down)."""

    unit: float
    quiet_s: float
    early_s: float
    cycles: int
    window_s: float
    rounds: int

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> SoakPlan:
        unit = 1.0 if args.short else 60.0
        plan = cls(
            unit=unit,
            quiet_s=(12.0 if args.short and args.minutes == 30.0 else args.minutes) * unit,
            early_s=(4.0 if args.short and args.early == 2.0 else args.early) * unit,
            cycles=100 if args.short and args.cycles == 1000 else args.cycles,
            window_s=2.0 if args.short else QUIET_WINDOW_S,
            rounds=args.rounds,
        )
        early, quiet, cycles = plan.early_s, plan.quiet_s, plan.cycles
        if not 0 < early < quiet or cycles < 1 or not 1 <= plan.rounds <= cycles:
            raise UsageError(
                "bench soak needs 0 < --early < --minutes, --cycles >= 1 and "
                "1 <= --rounds <= --cycles"
            )
        return plan


@dataclass
class SoakFigures:
    """What the stages measured."""

    rss_early: int = 0
    rss_late: int = 0
    rss_after: int = 0
    grown: list[Any] | None = None  # tracemalloc's sites that grew most, with --tracemalloc
    served: int = 0
    storm_s: float = 0.0
    quiet_ms: float | None = None
    storm_ms: float | None = None
    rounds_ratio: list[float] = field(default_factory=list)
    partitions: int = 0
    rss_series: list[Any] = field(default_factory=list)
    rss_every: float = 0.0
    heap: Any = None  # the engine's HeapTrimmer
    started: float = 0.0  # time.monotonic() once the engine had started


def run(args: argparse.Namespace) -> int:
    plan = SoakPlan.from_args(args)
    figures = _soak(args, plan)
    rows = _rows(args, plan, figures)
    _print(sys.stdout, args, figures, rows, time.monotonic() - figures.started)
    if args.json:
        _write_json(args.json, args, plan, figures, rows)
    return 0 if all(ok for _, ok in rows) else 1


def _soak(args: argparse.Namespace, plan: SoakPlan) -> SoakFigures:
    """A ci engine run for the stages: RSS early and late in the quiet stage, then the
    connect/close bursts from another process, each after a quiet window."""
    with tempfile.TemporaryDirectory(prefix="provetop-soak-") as tmp:
        cfg = from_preset("ci", proofs=10**9, verify="never")
        record = None if args.no_record else os.path.join(tmp, "soak.pvtrec")
        if args.tracemalloc:
            tracemalloc.start()
        try:  # PROVETOP_HEAP_TRIM_S and the rest, as `provetop engine` reads them
            tuning = Tuning.from_env()
        except SettingError as exc:
            raise UsageError(str(exc)) from None
        engine = Engine(
            cfg, tuning=tuning, listen=f"unix:{os.path.join(tmp, 'e.sock')}", record=record
        )
        times = PartitionTimes()
        engine.bus.add_listener(times)
        engine.start()
        assert engine.address is not None  # a unix socket, started
        figures = SoakFigures(started=time.monotonic())
        series = RssSeries(1.0 if args.short else RSS_EVERY_S).start()
        try:
            _quiet_stage(args, plan, figures)
            _storm_stage(engine.address[len("unix:") :], plan, times, figures)
            time.sleep(2.0)
            figures.rss_after = rss_bytes()
            figures.partitions = engine.state.totals()["partitions_ok"]
            figures.heap = engine.heap
        finally:
            figures.rss_series = series.stop()
            figures.rss_every = series.every
            engine.stop("soak bench done")
            engine.close()
    return figures


def _quiet_stage(args: argparse.Namespace, plan: SoakPlan, figures: SoakFigures) -> None:
    """RSS early and late in the quiet stage (and what grew between, with tracemalloc)."""
    time.sleep(plan.early_s)
    figures.rss_early = rss_bytes()
    traced = tracemalloc.take_snapshot() if args.tracemalloc else None
    time.sleep(plan.quiet_s - plan.early_s)
    figures.rss_late = rss_bytes()
    if traced is not None:
        figures.grown = tracemalloc.take_snapshot().compare_to(traced, "lineno")[:15]
        tracemalloc.stop()


def _storm_stage(path: str, plan: SoakPlan, times: PartitionTimes, figures: SoakFigures) -> None:
    """The connect/close bursts, each after a quiet window: partition times compared."""
    quiet_spans: list[tuple[float, float]] = []
    storm_spans: list[tuple[float, float]] = []
    cycles, rounds = plan.cycles, plan.rounds
    for r in range(rounds):
        start = time.monotonic()
        time.sleep(plan.window_s)
        quiet_spans.append((start, time.monotonic()))
        start = time.monotonic()
        figures.served += storm_in_child(path, cycles // rounds + (r < cycles % rounds))
        storm_spans.append((start, time.monotonic()))
    figures.quiet_ms = times.median_of(quiet_spans)
    figures.storm_ms = times.median_of(storm_spans)
    figures.storm_s = sum(b - a for a, b in storm_spans)
    figures.rounds_ratio = [
        (times.median(*s) or 0) / (times.median(*q) or 1) - 1
        for q, s in zip(quiet_spans, storm_spans, strict=True)
    ]


def _rows(args: argparse.Namespace, plan: SoakPlan, f: SoakFigures) -> list[tuple[str, bool]]:
    """The three targets, each a line and whether it passed."""
    drift = (f.rss_late - f.rss_early) / f.rss_early
    quiet_ms, storm_ms = f.quiet_ms, f.storm_ms
    slowdown = None if not quiet_ms or not storm_ms else storm_ms / quiet_ms - 1
    unit, rounds = plan.unit, plan.rounds
    return [
        (
            f"RSS at {plan.quiet_s / unit:g} {'s' if args.short else 'min'} vs "
            f"{plan.early_s / unit:g}: {f.rss_late / 2**20:.1f} vs {f.rss_early / 2**20:.1f} MiB "
            f"({drift:+.1%}, target within {RSS_DRIFT:.0%})",
            abs(drift) <= RSS_DRIFT,
        ),
        (
            f"{plan.cycles} connect/close cycles from another process in {rounds} bursts "
            f"({f.served} served, {f.storm_s:.1f} s): "
            f"RSS {f.rss_late / 2**20:.1f} -> {f.rss_after / 2**20:.1f} MiB "
            f"(target within {STORM_RSS_BYTES >> 20} MB)",
            abs(f.rss_after - f.rss_late) <= STORM_RSS_BYTES,
        ),
        (
            f"partition time quiet {quiet_ms or 0:.2f} ms, during the storm {storm_ms or 0:.2f} ms"
            f" (medians over {rounds} {plan.window_s:g}-s quiet windows and the bursts after them)"
            + (
                f" ({slowdown:+.1%}, target within {STORM_SLOWDOWN:.0%})"
                if slowdown is not None
                else " (too few partitions to compare)"
            ),
            slowdown is not None and slowdown <= STORM_SLOWDOWN,
        ),
    ]


def _print(
    out: Any, args: argparse.Namespace, f: SoakFigures, rows: list[tuple[str, bool]], took: float
) -> None:
    print(
        f"soak: ci preset, --verify never, {'no recording' if args.no_record else 'recorded'}, "
        f"{f.partitions} partitions in "
        f"{took:.0f} s",
        file=out,
    )
    for text, ok in rows:
        print(f"  {'PASS' if ok else 'FAIL'}  {text}", file=out)
    if f.grown is not None:
        print("  tracemalloc, the sites that grew most during the quiet stage:", file=out)
        for stat in f.grown:
            print(f"    {stat}", file=out)


def _write_json(
    path: str,
    args: argparse.Namespace,
    plan: SoakPlan,
    f: SoakFigures,
    rows: list[tuple[str, bool]],
) -> None:
    heap = f.heap
    figures = {
        "quiet_s": plan.quiet_s,
        "early_s": plan.early_s,
        "rss_early": f.rss_early,
        "rss_late": f.rss_late,
        "rss_after_storm": f.rss_after,
        "rss_every_s": f.rss_every,
        # [seconds since the engine started, RSS, malloc in use, malloc free] (bytes)
        "rss_series": f.rss_series,
        "cycles": plan.cycles,
        "served": f.served,
        "rounds": plan.rounds,
        "quiet_window_s": plan.window_s,
        "storm_s": round(f.storm_s, 3),
        # each burst's median partition time against the quiet window before it
        "storm_rounds_slowdown": [round(x, 4) for x in f.rounds_ratio],
        "quiet_partition_ms": f.quiet_ms,
        "storm_partition_ms": f.storm_ms,
        "partitions": f.partitions,
        # provetop.engine.run.heap: malloc_trim every heap_trim_every_s (0: off,
        # PROVETOP_HEAP_TRIM_S)
        "heap_trim_every_s": heap.every if heap.active else 0,
        "heap_trims": heap.trims,
        "heap_trim_longest_ms": round(heap.longest_ms, 3),
        "recorded": not args.no_record,
        "pass": [ok for _, ok in rows],
    }
    with open(path, "w") as fh:
        json.dump(figures, fh, indent=2)
