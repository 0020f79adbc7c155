"""Run a module with a thread that samples every thread's Python stack (a diagnostic).

Why: a phase that takes far longer on the host than its CUDA events say (the look-ahead's
1.2 s uploads of a 233 ms copy on the H200) is blocked somewhere in Python or the driver; the
samples say where, with wall-clock times to set beside a recording's ``hello.wall_ns``.

    python3 bench/stack_sampler.py OUT.txt.gz 0.02 -m provetop bench pipeline ...

Each line: ``wall_ns<TAB>thread name<TAB>innermost frames (file:line func, up to 6)``; a
sample whose time is far from the last one's means the sampler itself waited for the GIL.
"""

from __future__ import annotations

import gzip
import runpy
import sys
import threading
import time
import traceback


def _sample(out: str, interval: float, stop: threading.Event) -> None:
    me = threading.get_ident()
    with gzip.open(out, "wt") as f:
        while not stop.wait(interval):
            names = {t.ident: t.name for t in threading.enumerate()}
            now = time.time_ns()
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                stack = traceback.extract_stack(frame)[-6:]
                where = " < ".join(
                    f"{fr.filename.rsplit('/', 2)[-1]}:{fr.lineno} {fr.name}"
                    for fr in reversed(stack)
                )
                f.write(f"{now}\t{names.get(ident, ident)}\t{where}\n")


def main() -> None:
    out, interval = sys.argv[1], float(sys.argv[2])
    if sys.argv[3] != "-m":
        raise SystemExit("usage: stack_sampler.py OUT INTERVAL -m MODULE ARGS...")
    module = sys.argv[4]
    sys.argv = [module, *sys.argv[5:]]
    stop = threading.Event()
    t = threading.Thread(target=_sample, args=(out, interval, stop), daemon=True)
    t.start()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        stop.set()
        t.join(5)


if __name__ == "__main__":
    main()
