"""Load on the engine's socket: do attached clients slow the proving down?

One engine runs in this process (so its memory and its partitions are what is measured) and
clients run in separate processes (so their decoding does not compete for this process's GIL,
as on a real machine). One run, stages in turn, each separated by a marker:

1. ``quiet``: no client;
2. ``loaded``: 8 clients reading everything plus one that connects and never reads;
   (1 and 2 repeat ``--cycles`` times, so a drift of the machine shows up in both)
3. ``quiet-again``: every client gone;
4. ``churn``: 100 connections opened and closed as fast as one process can.

Reported: partition times per stage (median and quartiles of the partition's summed phase
times), the stuck client's lag (events skipped, from the bus counters), the engine's RSS and
the largest client queue, what the readers received, and whether the recording is complete.

    python bench/load_clients.py --seconds 10 --json out.json     # the benchmark
    python bench/load_clients.py client reader unix:/path 30      # (internal) one client

The CI test (tests/engine/test_load.py) runs :func:`run_load` with short stages.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# the longest the stuck client is kept connected after the readers leave, waiting for its queue
# to overflow: at ~1,200 events/s on a loaded 2-core box, a 1,000-event queue plus the socket
# buffers fill in a few seconds
STUCK_WAIT_S = 20.0


# -- clients (run in their own processes) -----------------------------------------------------


def client_main(mode: str, address: str, arg: float) -> int:
    """``reader``: read and decode everything for ``arg`` seconds, then print what it got;
    ``stuck``: connect with a tiny receive buffer and never read; ``churn``: open and close
    ``arg`` connections back to back."""
    sys.path.insert(0, str(ROOT))
    from provetop.sources.client import EngineClient

    if mode == "churn":
        t0 = time.monotonic()
        for _ in range(int(arg)):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(address.removeprefix("unix:"))
            s.close()
        print(json.dumps({"connects": int(arg), "seconds": time.monotonic() - t0}), flush=True)
        return 0
    if mode == "stuck":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(address.removeprefix("unix:"))
        print("connected", flush=True)
        time.sleep(arg)
        return 0
    client = EngineClient(address)
    print("connected", flush=True)
    got, lag, kinds = 0, 0, set()
    deadline = time.monotonic() + arg
    try:
        while time.monotonic() < deadline:
            try:
                e = client.next_event(timeout=max(0.01, deadline - time.monotonic()))
            except TimeoutError:
                break
            if e is None:
                break
            got += 1
            kinds.add(e["k"])
            if e["k"] == "lag":
                lag += e["missed"]
    finally:
        client.close()
    print(json.dumps({"events": got, "lag": lag, "kinds": sorted(kinds)}), flush=True)
    return 0


def _spawn(mode: str, address: str, arg: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "client", mode, address, str(arg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


# -- measurement ------------------------------------------------------------------------------


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class _Watch:
    """Samples RSS and the largest client queue every 50 ms."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.rss: list[tuple[float, int]] = []
        self.max_queue = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        bus = self.engine.bus
        while not self._stop.wait(0.05):
            self.rss.append((time.monotonic(), _rss()))
            with bus._lock:
                subs = list(bus._subs)
            for sub in subs:
                self.max_queue = max(self.max_queue, sub.pending())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _stats(ms: list[float]) -> dict[str, float]:
    if not ms:
        return {"n": 0}
    q = statistics.quantiles(ms, n=4) if len(ms) > 1 else [ms[0]] * 3
    return {"n": len(ms), "median": statistics.median(ms), "q1": q[0], "q3": q[2]}


def run_load(
    seconds: float = 10.0,
    readers: int = 8,
    churn: int = 100,
    domain_log: int = 7,
    client_queue: int | None = None,
    record: str | None = None,
    cycles: int = 1,
) -> dict[str, Any]:
    """Run ``cycles`` x (quiet, loaded), then quiet-again and churn (``seconds`` each) on one
    engine; return the report. Alternating cycles let slow drifts of the machine cancel out."""
    sys.path.insert(0, str(ROOT))
    from provetop.engine.run.runner import Engine
    from provetop.engine.settings.config import from_preset
    from provetop.recordings.reader import open_recording

    cfg = from_preset("ci", domain_log=domain_log, partitions=4, proofs=10**6, workers_per_device=1)
    engine = Engine(cfg, record=record)
    if client_queue is not None:
        engine.bus.client_queue = client_queue
    engine.server.send_buffer = 4096  # the stuck client falls behind after a few events
    engine.start()
    address = engine.address
    watch = _Watch(engine)
    stages: list[tuple[str, int]] = []
    spawned: list[subprocess.Popen] = []
    out: dict[str, Any] = {"seconds_per_stage": seconds, "domain_log": domain_log}
    out.update(
        stuck_lagged_events=0,
        lagged_events_loaded=0,
        readers=[],
        rss_growth_loaded=[],
        clients_left=[],
    )
    try:

        def stage(name: str) -> None:
            engine.command("marker", {"name": f"stage {name}"})
            engine.bus.flush()
            stages.append((name, engine.bus.clock.now()))

        time.sleep(min(1.0, seconds / 2))  # warm-up: SRS, first partitions
        for cycle in range(cycles):
            stage(f"quiet#{cycle}")
            time.sleep(seconds)
            clients = [_spawn("reader", address, seconds + 0.5) for _ in range(readers)]
            stuck = _spawn("stuck", address, 2 * seconds + 30)
            spawned.extend([*clients, stuck])
            for c in [*clients, stuck]:
                assert c.stdout.readline().strip() == "connected", c.stderr.read()
            rss_before = _rss()
            lag_before = engine.bus.lagged_events
            stage(f"loaded#{cycle}")
            time.sleep(seconds)
            engine.bus.flush()
            out["lagged_events_loaded"] += engine.bus.lagged_events - lag_before
            out["rss_growth_loaded"].append(_rss() - rss_before)
            out["readers"] += [json.loads(c.communicate(timeout=60)[0]) for c in clients]
            # the readers are gone, the stuck client is the one left; on a slow machine its
            # queue may not have overflowed yet, so give the running engine time to fill it
            # (how soon depends on the event rate, that it happens and stays bounded does not)
            t0 = time.monotonic()
            while time.monotonic() - t0 < STUCK_WAIT_S:
                missed = engine.bus.missed_by_client()
                if any(missed.values()):
                    break
                time.sleep(0.05)
            out["stuck_lagged_events"] += max(missed.values(), default=0)
            out["stuck_wait_s"] = round(time.monotonic() - t0, 2)
            stuck.terminate()
            t0 = time.monotonic()
            while engine.bus.clients and time.monotonic() - t0 < 10:
                time.sleep(0.01)
            out["clients_left"].append(engine.bus.clients)
        stage("quiet-again")
        time.sleep(seconds)
        stage("churn")
        churner = _spawn("churn", address, churn)
        spawned.append(churner)
        churned = json.loads(churner.communicate(timeout=60)[0])
        out["churn"] = churned
        time.sleep(max(0.0, seconds - churned["seconds"]))
        stage("end")
        engine.stop("load benchmark done")
        assert engine.wait(120)
    finally:
        watch.stop()
        for c in spawned:
            if c.poll() is None:
                c.kill()
                c.wait(10)
        engine.close()
    out["dropped_clients"] = engine.bus.dropped_clients
    state = engine.state
    names = [n for n, _ in stages]
    times: dict[str, list[float]] = {n: [] for n in names[:-1]}
    for row in state.attempts:
        for (a, ta), (_b, tb) in zip(stages, stages[1:], strict=False):
            if ta <= (row.t_done or 0) < tb:
                times[a].append(sum(row.phases_ms.values()))
    out["stages"] = {n: _stats(v) for n, v in times.items()}
    groups = {"quiet": [], "loaded": [], "quiet-again": [], "churn": []}
    for n, v in times.items():
        groups[n.split("#")[0]].extend(v)
    out["partition_ms"] = {g: _stats(v) for g, v in groups.items()}
    # per cycle: loaded median over the mean of the quiet medians before and after it
    ratios = []
    for c in range(cycles):
        after = f"quiet#{c + 1}" if c + 1 < cycles else "quiet-again"
        quiet = (out["stages"][f"quiet#{c}"]["median"] + out["stages"][after]["median"]) / 2
        ratios.append(out["stages"][f"loaded#{c}"]["median"] / quiet)
    out["loaded_over_quiet"] = ratios
    out["partitions_failed"] = sum(1 for r in state.attempts if not r.ok)
    out["max_client_queue"] = watch.max_queue
    out["client_queue_limit"] = engine.bus.client_queue
    out["rss_max"] = max(r for _t, r in watch.rss) if watch.rss else _rss()
    out["events"] = engine.bus.events
    if record:
        rec = open_recording(record)
        rs = rec.state()
        out["recording"] = {
            "complete": rec.complete,
            "events": rec.event_count,
            "partitions": rs.totals()["partitions"],
            "partitions_ok": rs.totals()["partitions_ok"],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "client":
        return client_main(argv[1], argv[2], float(argv[3]))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0, help="length of each stage")
    p.add_argument("--readers", type=int, default=8)
    p.add_argument("--churn", type=int, default=100, help="connections in the churn stage")
    p.add_argument("--domain-log", type=int, default=7)
    p.add_argument("--client-queue", type=int, help="events queued per client before lag")
    p.add_argument("--record", help="recording path (default: a temporary file)")
    p.add_argument("--cycles", type=int, default=3, help="quiet/loaded pairs")
    p.add_argument("--json", help="write the report here")
    args = p.parse_args(argv)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        record = args.record or str(Path(d) / "load.pvtrec")
        report = run_load(
            args.seconds,
            args.readers,
            args.churn,
            args.domain_log,
            args.client_queue,
            record,
            args.cycles,
        )
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
