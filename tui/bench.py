"""``provetop bench tui [--json]``: is the dashboard fast enough for an operator?

Measures the dashboard's targets (docs/dashboard.md), the way an operator meets them:

- **live**: a producer process serves 2,000 events/s (a synthetic 8-GPU run, looped) on a Unix
  socket in the engine's wire format, and one synthetic NVML ``gpu`` sample per GPU a second;
  the dashboard (``LiveSource``, the real Textual driver, writing to a pseudo-terminal of
  160x48) watches it. We record the process's CPU time over a
  window (the producer runs in another process, so it is not counted), then press keys and time
  each from the key event to the first frame drawn with its effect.
- **replay**: a one-hour recording of 8 GPUs (synthetic, written once with RecordingWriter) is
  opened (time to the first drawn state) and seeked to random positions (time per seek, from
  the request to the state ready to draw): a quarter of the seeks right after opening
  ("cold"), then ``prepare()`` (which the app runs in a background thread: faults, markers and
  in-memory checkpoints), then the timed seeks.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from provetop.base.errors import UsageError
from provetop.sources.live import LiveSource
from provetop.sources.protocol import Prepares
from provetop.sources.replay import open_replay
from provetop.sources.synthetic import GPU_SAMPLE_S, serve_synthetic, write_synthetic_recording
from provetop.tui.app import ProvetopApp

TARGETS = {"key_ms": 100.0, "cpu_cores": 0.5, "open_s": 2.0, "seek_ms": 200.0}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--rate", type=float, default=2000.0, help="live events per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="CPU measuring window")
    parser.add_argument("--keys", type=int, default=30, help="key presses to time")
    parser.add_argument("--hours", type=float, default=1.0, help="length of the recording")
    parser.add_argument("--devices", type=int, default=8, help="GPUs in the recording")
    parser.add_argument("--seeks", type=int, default=20, help="random seeks to time")
    parser.add_argument("--recording", metavar="FILE", help="reuse (or keep) this recording")
    parser.add_argument("--skip-live", action="store_true")
    parser.add_argument("--skip-replay", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # the dashboard side of "live"


POSITIVE = ("rate", "seconds", "keys", "hours", "devices", "seeks")


def run(args: argparse.Namespace) -> int:
    for name in POSITIVE:  # a zero or negative figure would never end (or measure nothing)
        value = getattr(args, name)
        if not value > 0 or value != value or value == float("inf"):
            raise UsageError(f"--{name} must be a positive number, got {value}")
    if args.child:
        return _live_child(args)
    results: dict[str, Any] = {"targets": TARGETS}
    if not args.skip_live:
        results["live"] = bench_live(args)
    if not args.skip_replay:
        results["replay"] = bench_replay(args)
    results["verdicts"] = verdicts(results)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print(results)
    out = sys.stderr if args.json else sys.stdout  # with --json, stdout is the JSON alone
    for name, figure, target, met in results["verdicts"]:
        print(f"{'MET   ' if met else 'MISSED'} {name}: {figure} (target {target})", file=out)
    missed = [v[0] for v in results["verdicts"] if not v[3]]
    if missed:
        print(f"provetop: bench tui missed {len(missed)} target(s): {', '.join(missed)}", file=out)
        return 1
    return 0


def verdicts(results: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(target, measured figure, target text, met) for every target that was measured: key
    latency by its p95, CPU by the cores used, open by its time, seeks by their p95."""
    out = []
    live, replay = results.get("live"), results.get("replay")
    if live:
        key, cpu = live["key_ms_p95"], live["cpu_cores"]
        out.append(
            (
                "key latency p95",
                f"{key} ms",
                f"< {TARGETS['key_ms']:.0f} ms",
                key < TARGETS["key_ms"],
            )
        )
        out.append(
            (
                "dashboard CPU",
                f"{cpu:.2f} cores",
                f"< {TARGETS['cpu_cores']} core",
                cpu < TARGETS["cpu_cores"],
            )
        )
    if replay:
        opened, seek = replay["open_s"], replay["seek_ms_p95"]
        out.append(
            ("open", f"{opened} s", f"<= {TARGETS['open_s']} s", opened <= TARGETS["open_s"])
        )
        out.append(
            (
                "seek p95",
                f"{seek} ms",
                f"<= {TARGETS['seek_ms']:.0f} ms",
                seek <= TARGETS["seek_ms"],
            )
        )
    return out


# ---------------------------------------------------------------------------------------------
# live


def bench_live(args: argparse.Namespace) -> dict[str, Any]:
    import multiprocessing as mp
    import pty

    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="provetop-bench-") as tmp:
        sock = os.path.join(tmp, "engine.sock")
        out = os.path.join(tmp, "result.json")
        ready = ctx.Event()
        producer = ctx.Process(target=serve_synthetic, args=(sock, args.rate, ready), daemon=True)
        producer.start()
        ready.wait(30)
        master, slave = pty.openpty()
        _set_size(slave, 160, 48)
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "48"}
        cmd = [
            sys.executable, "-m", "provetop", "bench", "tui", "--child", sock,
            "--seconds", str(args.seconds), "--keys", str(args.keys), "--recording", out,
        ]  # fmt: skip
        child = subprocess.Popen(
            cmd, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
        )
        os.close(slave)
        drained = 0
        deadline = time.monotonic() + 120 + args.seconds + args.keys
        try:
            while child.poll() is None:  # drain the terminal like a terminal emulator would
                drained += _drain(master, 0.1)
                if time.monotonic() > deadline:
                    child.kill()
                    raise RuntimeError("the dashboard child did not finish in time")
            drained += _drain(master, 0.1)
        finally:
            os.close(master)
            producer.terminate()
            producer.join(5)
        if not os.path.exists(out):
            raise RuntimeError(f"the dashboard child failed (exit {child.returncode})")
        result: dict[str, Any] = json.loads(Path(out).read_text())
        result["terminal_bytes_per_s"] = round(drained / max(1e-9, result.pop("wall_s")))
        result["gpu_samples"] = f"8 GPUs every {GPU_SAMPLE_S:g} s (synthetic NVML samples)"
        return result


def _set_size(fd: int, cols: int, rows: int) -> None:
    import fcntl
    import struct
    import termios

    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _drain(fd: int, timeout: float) -> int:
    import select

    n = 0
    ready, _, _ = select.select([fd], [], [], timeout)
    while ready:
        try:
            data = os.read(fd, 1 << 16)
        except OSError:
            return n
        if not data:
            return n
        n += len(data)
        ready, _, _ = select.select([fd], [], [], 0)
    return n


KEY_WAIT_S = 5.0  # longest a key's redraw is waited for; a key past it counts as 5,000 ms


def _live_child(args: argparse.Namespace) -> int:
    """Inside the pseudo-terminal: run the dashboard on the producer's socket and measure."""
    import asyncio

    source = LiveSource(args.child, keep=False)
    app = ProvetopApp([source])
    result: dict[str, Any] = {}

    async def measure() -> None:
        waited = time.monotonic()
        while not (app.views and app.views[0].state.events > 1000):
            if time.monotonic() - waited > 60:
                app.exit(1)  # no producer: the parent reports the failure
                return
            await asyncio.sleep(0.05)
        await asyncio.sleep(2.0)  # let the window fill
        events0, cpu0, wall0 = app.views[0].state.events, time.process_time(), time.monotonic()
        await asyncio.sleep(args.seconds)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        events = app.views[0].state.events - events0
        result.update(
            events_per_s=round(events / wall),
            cpu_cores=round(cpu / wall, 3),
            wall_s=wall,
        )
        latencies = []
        keys = ["plus", "minus", "down", "up", "g", "g"]
        timeline = app.timeline
        for i in range(args.keys):
            key = keys[i % len(keys)]
            before = timeline.builds
            t0 = time.perf_counter()
            app.simulate_key(key)
            while timeline.builds == before or timeline.built_at < t0:
                if time.perf_counter() - t0 > KEY_WAIT_S:  # counted, never waited out forever
                    break
                await asyncio.sleep(0.001)
            latencies.append((max(timeline.built_at, t0) - t0) * 1000)
            if time.perf_counter() - t0 > KEY_WAIT_S:
                latencies[-1] = KEY_WAIT_S * 1000
            await asyncio.sleep(0.15 + random.random() * 0.1)
        result.update(
            key_ms_median=round(statistics.median(latencies), 1),
            key_ms_p95=round(sorted(latencies)[int(0.95 * (len(latencies) - 1))], 1),
            key_ms_max=round(max(latencies), 1),
            keys=len(latencies),
            lagged=app.views[0].state.lagged,
        )
        Path(args.recording).write_text(json.dumps(result))
        app.exit(0)

    parent = os.getppid()

    async def orphaned() -> None:
        """The child runs in a session of its own: if its parent dies without killing it (a
        timeout's SIGKILL), nothing else would, and it kept a core busy for an hour once."""
        while os.getppid() == parent:
            await asyncio.sleep(1.0)
        app.exit(1)

    async def start() -> None:
        app.run_worker(measure(), name="bench")
        app.run_worker(orphaned(), name="orphan-watch")

    app.call_later(start)
    app.run()
    return 0


# ---------------------------------------------------------------------------------------------
# replay


def bench_replay(args: argparse.Namespace) -> dict[str, Any]:
    tmp = None
    if args.recording:
        path = Path(args.recording)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="provetop-bench-")
        path = Path(tmp.name) / "hour.pvtrec"
    try:
        made: dict[str, float] | None = None
        if not path.exists():
            t = time.perf_counter()
            events = write_synthetic_recording(path, args.hours, args.devices)
            made = {"events": events, "write_s": round(time.perf_counter() - t, 1)}
        window = int(30e9)
        t0 = time.perf_counter()
        source = open_replay(path)
        state, _ = source.state_at(source.start, window)
        open_s = time.perf_counter() - t0
        rng = random.Random(1)
        cold = []  # before prepare() (the app runs it in the background after opening)
        for _ in range(max(1, args.seeks // 4)):
            position = rng.randrange(source.start, source.end)
            t0 = time.perf_counter()
            state, _ = source.state_at(position, window)
            cold.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        if isinstance(source, Prepares):
            source.prepare()
        prepare_s = time.perf_counter() - t0
        seeks = []
        for _ in range(args.seeks):
            position = rng.randrange(source.start, source.end)
            t0 = time.perf_counter()
            state, _ = source.state_at(position, window)
            seeks.append((time.perf_counter() - t0) * 1000)
        result: dict[str, Any] = {
            "file_mb": round(path.stat().st_size / 1e6, 1),
            "hours": args.hours,
            "devices": args.devices,
            "open_s": round(open_s, 3),
            "prepare_s": round(prepare_s, 3),  # faults, markers and in-memory checkpoints
            "cold_seek_ms_median": round(statistics.median(cold), 1),
            "cold_seek_ms_max": round(max(cold), 1),
            "seek_ms_median": round(statistics.median(seeks), 1),
            "seek_ms_p95": round(sorted(seeks)[int(0.95 * (len(seeks) - 1))], 1),
            "seek_ms_max": round(max(seeks), 1),
            "seeks": len(seeks),
            "window_s": window / 1e9,
        }
        if made:
            result.update(made)
        else:
            result["events"] = source.event_count
        source.close()
        return result
    finally:
        if tmp is not None:
            tmp.cleanup()


def _print(results: dict[str, Any]) -> None:
    live, replay = results.get("live"), results.get("replay")
    if live:
        print(
            f"live   {live['events_per_s']} events/s: key latency median {live['key_ms_median']} "
            f"ms, p95 {live['key_ms_p95']} ms, max {live['key_ms_max']} ms "
            f"(target < {TARGETS['key_ms']:.0f}); CPU {live['cpu_cores']:.2f} cores "
            f"(target < {TARGETS['cpu_cores']}); with {live['gpu_samples']}"
        )
    if replay:
        print(
            f"replay {replay['hours']:g} h, {replay['devices']} GPUs, {replay['events']} events, "
            f"{replay['file_mb']} MB: open {replay['open_s']} s (target <= {TARGETS['open_s']}), "
            f"seek median {replay['seek_ms_median']} ms, p95 {replay['seek_ms_p95']} ms, max "
            f"{replay['seek_ms_max']} ms (target <= {TARGETS['seek_ms']:.0f})"
        )
