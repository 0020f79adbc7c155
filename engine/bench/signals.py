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
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from provetop.kernels.bench_meta import bench_command, host_bench_meta
from provetop.kernels.tuning import KernelTuning
from provetop.recordings.framing import FrameDecoder, FrameError

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
    parser.add_argument(
        "--wait", type=float, default=30.0,
        help="seconds to wait for the exit before the stacks are dumped and it is killed (30)",
    )  # fmt: skip
    parser.add_argument("--logs", metavar="DIR", help="stderr of an engine that hung, per delay")
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
        # a plain reader of the socket's frames (the engine may not import the clients)
        path = self.address.removeprefix("unix:")
        sock: socket.socket | None = None
        while sock is None and time.monotonic() < self.deadline:
            attempt = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                attempt.connect(path)
                sock = attempt
            except OSError:
                attempt.close()
                time.sleep(0.05)
        if sock is None:
            return
        decoder = FrameDecoder()
        with sock:
            try:
                while data := sock.recv(1 << 16):
                    decoder.feed(data)
                    for e in decoder.frames():
                        if isinstance(e, dict):
                            self._take(e)
            except (OSError, FrameError):
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
                "last_line": last[0][:200], "held": False, "hung": False}  # fmt: skip
    sent = time.monotonic()
    proc.send_signal(SIGNALS[args.signal])
    hung = False
    try:
        _, err = proc.communicate(timeout=args.wait)
    except subprocess.TimeoutExpired:  # where is it stuck? every thread's stack, then kill
        hung = True
        proc.send_signal(signal.SIGUSR1)  # provetop engine dumps its threads' stacks on it
        time.sleep(2.0)
        proc.kill()
        _, err = proc.communicate()
    exited = time.monotonic() - sent
    acted = None if follower.stopping_at is None else follower.stopping_at - sent
    last = (err or "").strip().splitlines()[-1:] or [""]
    if hung and args.logs:
        os.makedirs(args.logs, exist_ok=True)
        with open(os.path.join(args.logs, f"hung-at-{delay:g}s.txt"), "w") as f:
            f.write(err or "")
    return {
        "hung": hung,
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
    _print_head(args)
    rows = []
    for d in delays:  # each row as it comes: a run that hangs still shows the ones before
        rows.append(probe(args, d))
        _print_row(rows[-1])
    if args.json:
        meta = host_bench_meta(bench_command(), KernelTuning.from_env())
        with open(args.json, "w") as f:
            json.dump(
                {"meta": meta, "backend": args.backend, "preset": args.preset,
                 "domain_log": args.domain_log,
                 "signal": args.signal, "target_s": TARGET_S, "rows": rows},
                f, indent=1,
            )  # fmt: skip
    return 0 if all(r["held"] for r in rows) else 1


def _print_head(args: argparse.Namespace) -> None:
    size = f"2^{args.domain_log}" if args.domain_log is not None else f"preset {args.preset}"
    print(f"SIG{args.signal} to `provetop engine --backend {args.backend}` ({size}); "
          f"target {TARGET_S:g} s", flush=True)  # fmt: skip
    print(f"{'at s':>5} {'acted s':>8} {'exit s':>7} {'rc':>4} {'held':>5}  stage at the signal")


def _print_row(r: dict[str, Any]) -> None:
    acted = "-" if r["acted_s"] is None else f"{r['acted_s']:.2f}"
    stage = r["stage"] + (" [partitions running]" if r["partitions_running"] else "")
    stage += " [HUNG: stacks dumped, killed]" if r.get("hung") else ""
    print(f"{r['at_s']:>5g} {acted:>8} {r['exit_s']:>7.2f} {r['rc']:>4} "
          f"{'yes' if r['held'] else 'NO':>5}  {stage[:110]}", flush=True)  # fmt: skip


__all__ = ["add_arguments", "run"]
