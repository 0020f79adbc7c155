"""``provetop bench signals``: how long a stop signal takes to act, at each stage of a run.

Why a bench and not a timed test: the figure is seconds from the signal to the engine's
reaction on a whole ``provetop engine`` process, at whatever stage its start-up has reached
after a delay, and the stages and their lengths depend on the machine, the backend and the
domain. For each delay a fresh engine is started (``--no-record --exit-when-done``, a Unix
socket of its own), a client follows its telemetry so the stage at the signal is known (the
last ``engine_state`` reason and ``progress`` step), the signal is sent, and three times are
taken: to the engine's ``stopping`` state (it acted: intake ended), to the process's exit, and
its exit code. A stop during start-up must exit within the target; once partitions run, the
partitions in flight finish first (documented), so there only ``stopping`` is held to it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from provetop.sources.client import EngineClient

TARGET_S = 2.0  # a stop signal acts within this many seconds at every stage
SIGNALS = {"TERM": signal.SIGTERM, "INT": signal.SIGINT}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--preset", default="porep-32g", help="engine preset (porep-32g)")
    parser.add_argument("--domain-log", type=int, help="domain size 2^K (the preset's)")
    parser.add_argument(
        "--at", default="1,3,5,10,20", help="seconds after the start to signal, comma-separated"
    )
    parser.add_argument("--signal", choices=tuple(SIGNALS), default="TERM")
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON")


class _Follower:
    """The engine's telemetry, read on a thread: the stage reached and when it stopped."""

    def __init__(self, address: str, deadline: float) -> None:
        self.address = address
        self.deadline = deadline
        self.state = "not listening yet"
        self.step = ""
        self.stopping_at: float | None = None
        self.running = False  # a partition began: start-up is over
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        client = None
        while client is None and time.monotonic() < self.deadline:
            try:
                client = EngineClient(self.address, timeout=2)
            except (OSError, ValueError):
                time.sleep(0.05)
        if client is None:
            return
        with client:
            try:
                for e in client.events(timeout=0.5):
                    self._take(e)
            except OSError:
                pass

    def _take(self, e: dict[str, Any]) -> None:
        k = e.get("k")
        if k == "engine_state":
            self.state = f"{e.get('state')}: {e.get('reason')}"
            if e.get("state") == "stopping" and self.stopping_at is None:
                self.stopping_at = time.monotonic()
        elif k == "progress":
            self.step = f"{e.get('task')} {e.get('done')}/{e.get('total')}"
        elif k == "phase_begin":
            self.running = True


def probe(args: argparse.Namespace, delay: float) -> dict[str, Any]:
    """One engine, signalled ``delay`` seconds after its start."""
    work = tempfile.mkdtemp(prefix="provetop-signals-")
    sock = os.path.join(work, "e.sock")
    cmd = [sys.executable, "-m", "provetop", "engine", "--backend", args.backend,
           "--preset", args.preset, "--no-record", "--exit-when-done",
           "--listen", f"unix:{sock}", "--proofs", "100000"]  # fmt: skip
    if args.domain_log is not None:
        cmd += ["--domain-log", str(args.domain_log)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    follower = _Follower(f"unix:{sock}", t0 + delay + 30)
    time.sleep(max(0.0, t0 + delay - time.monotonic()))
    stage = f"{follower.state}" + (f" ({follower.step})" if follower.step else "")
    running = follower.running
    if proc.poll() is not None:  # it ended (or failed) before the signal: nothing measured
        _, err = proc.communicate()
        last = (err or "").strip().splitlines()[-1:] or [""]
        return {"at_s": delay, "stage": "ended before the signal", "partitions_running": running,
                "acted_s": None, "exit_s": 0.0, "rc": proc.returncode,
                "last_line": last[0][:200], "held": False}  # fmt: skip
    sent = time.monotonic()
    proc.send_signal(SIGNALS[args.signal])
    try:
        _, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    exited = time.monotonic() - sent
    acted = None if follower.stopping_at is None else follower.stopping_at - sent
    last = (err or "").strip().splitlines()[-1:] or [""]
    return {
        "at_s": delay,
        "stage": stage,
        "partitions_running": running,
        "acted_s": acted,
        "exit_s": exited,
        "rc": proc.returncode,
        "last_line": last[0][:200],
        "held": _held(running, acted, exited),
    }


def _held(running: bool, acted: float | None, exited: float) -> bool:
    """Within the target: during start-up the exit, once partitions run the ``stopping``
    state (the partitions in flight then finish, as documented)."""
    if not running:
        return exited <= TARGET_S
    return acted is not None and acted <= TARGET_S


def run(args: argparse.Namespace) -> int:
    try:
        delays = [float(x) for x in args.at.split(",") if x.strip()]
    except ValueError:
        print(f"provetop: error: --at {args.at!r}: seconds, comma-separated", file=sys.stderr)
        return 2
    rows = [probe(args, d) for d in delays]
    _print(args, rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"backend": args.backend, "preset": args.preset, "domain_log": args.domain_log,
                 "signal": args.signal, "target_s": TARGET_S, "rows": rows},
                f, indent=1,
            )  # fmt: skip
    return 0 if all(r["held"] for r in rows) else 1


def _print(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    size = f"2^{args.domain_log}" if args.domain_log is not None else f"preset {args.preset}"
    print(f"SIG{args.signal} to `provetop engine --backend {args.backend}` ({size}); "
          f"target {TARGET_S:g} s")  # fmt: skip
    print(f"{'at s':>5} {'acted s':>8} {'exit s':>7} {'rc':>4} {'held':>5}  stage at the signal")
    for r in rows:
        acted = "-" if r["acted_s"] is None else f"{r['acted_s']:.2f}"
        stage = r["stage"] + (" [partitions running]" if r["partitions_running"] else "")
        print(f"{r['at_s']:>5g} {acted:>8} {r['exit_s']:>7.2f} {r['rc']:>4} "
              f"{'yes' if r['held'] else 'NO':>5}  {stage[:90]}")  # fmt: skip


__all__ = ["add_arguments", "run"]
