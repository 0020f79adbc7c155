"""Where a connect/close storm's cost goes: the engine's CPU per connection, and each of its
threads' CPU during a storm against the seconds before it.

Why a separate script: ``provetop bench soak`` says *how much* a storm slows the partitions;
this says *who* took the time. It runs the soak's engine (ci preset, ``--verify never``,
recorded) in this process and the storm (:func:`provetop.engine.bench.soak.storm_in_child`) in
another,
then prints:

- ``paused``: with the workers paused, the process's CPU (user and system, from
  ``getrusage``) per connection, the idle rate taken out;
- ``running``: per burst, the median partition time before and during it, and each thread
  group's CPU in ticks a second (``/proc/self/task/*/stat``; 100 ticks a second = one core),
  the threads named as ``threading`` names them (a connection's reader by its prefix).

The accept pace is the engine's (``PROVETOP_ACCEPT_RATE``), so two runs compare it.

    PYTHONPATH=. python3 bench/storm_probe.py --cycles 500 --bursts 2
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import threading
import time

from provetop.engine.bench.soak import PartitionTimes, storm_in_child
from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.engine.settings.tuning import Tuning

# After ``pause`` the partitions in flight finish and the recorder catches up: the idle rate
# taken out of the paused figure is read once that is over (2 s was too short on a 2-core VM:
# 0.115 core, against 0.01 at rest).
PAUSE_SETTLE_S = 8.0


def thread_ticks() -> dict[str, int]:
    """CPU ticks (user + system) of this process's threads, summed by name prefix."""
    names = {str(t.native_id): t.name for t in threading.enumerate()}
    out: dict[str, int] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        group = names.get(tid, "(not a Python thread)").split("#")[0].rstrip("0123456789-")
        out[group] = out.get(group, 0) + int(fields[11]) + int(fields[12])
    return out


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds before measuring")
    parser.add_argument("--cycles", type=int, default=500, help="connections per burst")
    parser.add_argument("--bursts", type=int, default=2, help="bursts while running")
    parser.add_argument("--quiet", type=float, default=4.0, help="seconds measured before each")
    args = parser.parse_args()
    hz = os.sysconf("SC_CLK_TCK")
    with tempfile.TemporaryDirectory(prefix="provetop-probe-") as tmp:
        cfg = from_preset("ci", proofs=10**9, verify="never")
        engine = Engine(
            cfg,
            tuning=Tuning.from_env(),
            listen=f"unix:{os.path.join(tmp, 'e.sock')}",
            record=os.path.join(tmp, "r.pvtrec"),
        )
        times = PartitionTimes()
        engine.bus.add_listener(times)
        engine.start()
        path = engine.address[len("unix:") :]
        print(f"accept pace: {engine.server.accept_rate:g}/s (PROVETOP_ACCEPT_RATE)")
        try:
            time.sleep(args.warmup)
            for _ in range(args.bursts):
                q0, t0 = time.monotonic(), thread_ticks()
                time.sleep(args.quiet)
                q1, t1 = time.monotonic(), thread_ticks()
                storm_in_child(path, args.cycles)
                s1, t2 = time.monotonic(), thread_ticks()
                quiet, during = times.median(q0, q1), times.median(q1, s1)
                slow = f"{during / quiet - 1:+.1%}" if quiet and during else "n/a"
                print(
                    f"running: {args.cycles} connections in {s1 - q1:.2f} s; partition "
                    f"{quiet or 0:.2f} -> {during or 0:.2f} ms ({slow}); ticks/s before, during:"
                )
                groups = sorted(set(t0) | set(t2), key=lambda g: -(t2.get(g, 0) - t1.get(g, 0)))
                for g in groups:
                    before = (t1.get(g, 0) - t0.get(g, 0)) / (q1 - q0) * 100 / hz
                    storm = (t2.get(g, 0) - t1.get(g, 0)) / (s1 - q1) * 100 / hz
                    if before or storm:
                        print(f"  {g:28s} {before:7.1f} {storm:7.1f}")
            engine.command("pause")
            time.sleep(PAUSE_SETTLE_S)
            c0, w0 = _cpu_s(), time.monotonic()
            time.sleep(3.0)
            idle = (_cpu_s() - c0) / (time.monotonic() - w0)
            c1, w1 = _cpu_s(), time.monotonic()
            storm_in_child(path, args.cycles)
            cpu = _cpu_s() - c1 - idle * (time.monotonic() - w1)
            print(
                f"paused: {cpu / args.cycles * 1e6:.0f} us of the engine's CPU per connection "
                f"({args.cycles} connections; idle {idle:.3f} core taken out)"
            )
        finally:
            engine.stop("probe done")
            engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
