"""Check ``provetop top`` on a real GPU: the one-shot text and JSON, and the screen at 160x48.

Run from the repository root on the GPU machine (pynvml, CuPy and tmux there)::

    PYTHONPATH=. python3 bench/gpu_top_check.py

Starts a cuda engine (``--preset small``, a few proofs) so that a provetop process holds GPU
memory, then runs ``provetop top --json`` and ``--once`` (the engine must be listed as
attached, its pid among the GPU processes marked as provetop's, with %CPU, %MEM and run time),
and ``provetop top`` in a tmux server of its own at 160x48 for a few seconds, whose screen is
printed: first the engine (attached at once, as the docs say), then after `e` the GPU
monitor (a block per GPU, the process table). Prints one table last; exit 1
on a failed check.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid


def _capture(tmux: list[str], session: str) -> str:
    return subprocess.run([*tmux, "capture-pane", "-p", "-t", session],
                          capture_output=True, text=True).stdout  # fmt: skip


def main() -> int:
    runtime = tempfile.mkdtemp(prefix="top-check-")
    env = {
        **os.environ,
        "XDG_RUNTIME_DIR": runtime,
        "PYTHONPATH": os.pathsep.join(
            [os.getcwd(), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        ),
    }
    py = [sys.executable, "-m", "provetop"]
    engine = subprocess.Popen(
        [*py, "engine", "--backend", "cuda", "--preset", "small", "--proofs", "1000",
         "--no-record"],
        env=env, stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(os.environ.get("OUT", runtime), "top-engine.err"), "w"),
    )  # fmt: skip
    checks: list[tuple[str, bool, str]] = []
    try:
        report: dict = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = subprocess.run([*py, "top", "--json"], env=env, capture_output=True, text=True)
            report = json.loads(done.stdout or "{}")
            if (
                report.get("attached")
                and report["attached"][0]["pools"]
                and any(p.get("pid") == engine.pid for p in report.get("processes", []))
            ):
                break
            time.sleep(2)
        gpus = report.get("gpus", [])
        checks.append(("GPUs from NVML", bool(gpus), f"{len(gpus)}"))
        mine = [p for p in report.get("processes", []) if p.get("pid") == engine.pid]
        checks.append(("engine among GPU processes", bool(mine), str(engine.pid)))
        if mine:
            p = mine[0]
            checks.append(("marked as provetop's", bool(p.get("provetop")), str(p.get("provetop"))))
            figures = all(p.get(k) is not None for k in ("cpu_pct", "mem_pct", "run_s", "used"))
            checks.append(("%CPU %MEM time GPU mem", figures,
                           f"{p.get('cpu_pct')} {p.get('mem_pct')} {p.get('run_s')}"))  # fmt: skip
        attached = report.get("attached", [])
        checks.append(("engine attached with pools", bool(attached and attached[0]["pools"]),
                       str(len(attached))))  # fmt: skip
        text = subprocess.run([*py, "top", "--once"], env=env, capture_output=True, text=True)
        print(text.stdout)
        checks.append(("--once exit 0", text.returncode == 0, str(text.returncode)))
        if shutil.which("tmux"):
            sock, session = f"top-check-{uuid.uuid4().hex[:6]}", "top"
            cmd = f"cd {os.getcwd()} && {sys.executable} -m provetop top; sleep 30"
            tmux = ["tmux", "-L", sock]
            subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "160", "-y", "48",
                            cmd], env={**env, "TERM": "xterm-256color"}, check=True)  # fmt: skip
            time.sleep(6)
            # the engine running before top started is attached and shown at once (its
            # pipeline); the GPU monitor is the next source, a key `e` away
            first = _capture(tmux, session)
            print(first)
            checks.append(("screen: engine shown first", "partitions" in first.lower(), ""))
            subprocess.run([*tmux, "send-keys", "-t", session, "e"], check=True)
            time.sleep(2)
            screen = _capture(tmux, session)
            subprocess.run([*tmux, "kill-server"], capture_output=True)
            print(screen)
            checks.append(("e: a block per GPU", "gpu0 " in screen and "SM util" in screen,
                           ""))  # fmt: skip
            checks.append(("e: process table", "%CPU" in screen, ""))
    finally:
        engine.terminate()
        try:
            engine.wait(30)
            checks.append(("engine exits on SIGTERM", True, f"rc {engine.returncode}"))
        except subprocess.TimeoutExpired:  # a stop that hangs is a finding, not a crash
            engine.send_signal(signal.SIGUSR1)  # its threads' stacks, to its stderr
            time.sleep(2)
            engine.kill()
            engine.wait()
            checks.append(("engine exits on SIGTERM", False, "not within 30 s: killed"))
    print(f"{'check':<32} {'ok':<4} value")
    for name, ok, value in checks:
        print(f"{name:<32} {'yes' if ok else 'NO':<4} {value}")
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
