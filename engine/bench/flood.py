"""``provetop bench flood``: what local clients and scrapers cost a run, measured.

Why a bench and not a timed test: the figure is partitions per second with and without each
attack, on a whole engine, over windows of seconds, and it depends on the machine. The engine
runs in this process (``ci`` preset, ``--verify never``, recorded, ``/metrics`` on); every
attack runs in a process of its own, as a real client would (in this process it would take
the engine's GIL and be counted as its cost). The run first warms for ``--warm`` seconds (its
live window fills over the first minute and each partition's fold costs more until then: the
quiet rate alone fell ~20 % over that minute). Each attack then gets ``--pairs`` pairs of a
quiet window and an attack window of the same length, in alternating order (quiet first, then
attack first, ...), so a drift of the machine's speed reaches both sides; the figure is the
median of the pairs' changes.

Attacks (the figures of docs/reliability.md): ``trim`` 10 connections at 90 commands/s each,
``marker`` 20 at 95/s, ``metrics`` back-to-back ``GET /metrics`` from two threads, ``idle``
200 idle Unix clients (then: is the operator served?), ``loris`` 8 slow-loris connections on
``/metrics``, reopened when cut, beside 40 real scrapes (how many succeed?).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.kernels.bench_meta import bench_command, host_bench_meta
from provetop.kernels.tuning import KernelTuning

ATTACKS = ("trim", "marker", "metrics", "idle", "loris")
TARGET = 0.10  # no attack may cost the run more than this share of its partitions/s

# The attacking process: python -c ATTACKER KIND ADDRESS METRICS_URL SECONDS; prints one JSON.
ATTACKER = r"""
import json, socket, sys, threading, time, urllib.request
from provetop.sources.client import EngineClient
kind, address, url, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
print("ready", flush=True)  # imports done: the attack window starts now
end = time.monotonic() + seconds
out = {"sent": 0, "ok": 0, "tries": 0}
lock = threading.Lock()
def flood(cmd, rate):
    try:
        c = EngineClient(address, timeout=30)
    except OSError:
        return
    n, t0 = 0, time.monotonic()
    while time.monotonic() < end:
        args = {"name": f"m{n}"} if cmd == "marker" else {}
        # a server that stops reading this connection (its budget spent) blocks the send:
        # it may, but the attack ends with its window all the same
        c.sock.settimeout(max(0.05, end - time.monotonic()))
        try:
            c.command(cmd, args)
        except OSError:
            break
        n += 1
        time.sleep(max(0.0, t0 + n / rate - time.monotonic()))
    with lock:
        out["sent"] += n
def drain(c):
    try:
        while c.read(timeout=0.5) is not None:
            pass
    except OSError:
        pass
threads = []
if kind in ("trim", "marker"):
    conns, rate = (10, 90) if kind == "trim" else (20, 95)
    threads = [threading.Thread(target=flood, args=(kind, rate)) for _ in range(conns)]
elif kind == "metrics":
    def scrape():
        while time.monotonic() < end:
            try:
                urllib.request.urlopen(url, timeout=5).read()
                with lock: out["sent"] += 1
            except OSError:
                pass
    threads = [threading.Thread(target=scrape) for _ in range(2)]
elif kind == "idle":
    path = address[5:]
    held = []
    for _ in range(200):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            s.connect(path); held.append(s)
        except OSError:
            s.close()
    time.sleep(min(2.0, seconds / 2))
    for _ in range(5):  # the operator, five times
        out["tries"] += 1
        try:
            with EngineClient(address, timeout=5) as op:
                if (op.next_event(timeout=5) or {}).get("k") == "hello":
                    out["ok"] += 1
        except OSError:
            pass
        time.sleep(0.2)
    time.sleep(max(0.0, end - time.monotonic()))
elif kind == "loris":
    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    def loris():
        while time.monotonic() < end:
            try:
                s = socket.create_connection((host, int(port)), timeout=10)
                s.sendall(b"GET /metrics HTTP/1.1\r\nX-a: ")
                while time.monotonic() < end and s.recv(1):
                    pass
            except OSError:
                pass
            time.sleep(0.01)
    threads = [threading.Thread(target=loris) for _ in range(8)]
    for t in threads: t.start()
    time.sleep(0.5)
    for _ in range(40):
        out["tries"] += 1
        try:
            urllib.request.urlopen(url, timeout=2).read(); out["ok"] += 1
        except OSError:
            pass
        time.sleep(max(0.0, min(0.25, end - time.monotonic())))
    threads = []
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(out))
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--window", type=float, default=10.0, help="seconds per window (10)")
    parser.add_argument("--pairs", type=int, default=3, help="quiet/attack pairs per attack (3)")
    parser.add_argument("--warm", type=float, default=60.0, help="seconds before measuring (60)")
    parser.add_argument("--attacks", default=",".join(ATTACKS), help="which, comma-separated")
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON")


def run(args: argparse.Namespace) -> int:
    attacks = [a for a in args.attacks.split(",") if a]
    work = tempfile.mkdtemp(prefix="provetop-flood-")
    config = from_preset("ci", backend="cpu", proofs=10**6, verify="never")
    record = os.path.join(work, "flood.pvtrec")
    engine = Engine(config, listen=f"unix:{work}/e.sock", record=record, metrics="127.0.0.1:0")
    done: list[float] = []

    def on_event(e: dict[str, Any]) -> None:
        if e["k"] == "partition_done":
            done.append(time.monotonic())

    engine.bus.add_listener(on_event)
    engine.start()
    rows: list[dict[str, Any]] = []
    try:
        while len(done) < 20:  # the SRS is made, the workers run
            time.sleep(0.2)
        time.sleep(max(args.window / 2, args.warm))
        for kind in attacks:
            pairs = [
                _pair(engine, record, done, kind, args.window, attack_first=bool(i % 2))
                for i in range(max(1, args.pairs))
            ]
            rows.append(_row(kind, pairs))
        counters = engine.server.listener_counters() if engine.server else {}
    finally:
        engine.close()
    _print(rows, counters)
    if args.json:
        meta = host_bench_meta(bench_command(), KernelTuning.from_env())
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows, "counters": counters, "window_s": args.window,
                       "pairs": args.pairs, "warm_s": args.warm}, f, indent=1)  # fmt: skip
    return 0 if all(r["change"] is not None and r["change"] >= -TARGET for r in rows) else 1


def _window(record: str, done: list[float], seconds: float) -> tuple[float, float]:
    """A quiet window: (partitions/s, recording bytes/s)."""
    t0, size0 = time.monotonic(), os.path.getsize(record)
    time.sleep(seconds)
    t1, size1 = time.monotonic(), os.path.getsize(record)
    return sum(t0 <= t < t1 for t in done) / (t1 - t0), (size1 - size0) / (t1 - t0)


def _attack(
    engine: Engine, record: str, done: list[float], kind: str, seconds: float
) -> tuple[float, float, dict[str, Any]]:
    """An attack window: (partitions/s, recording bytes/s, the attacker's own figures)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", ATTACKER, kind, str(engine.address), str(engine.metrics_url),
         str(seconds)],
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    assert proc.stdout is not None
    proc.stdout.readline()  # the attacker's start-up (imports) is not its attack
    t0, size0 = time.monotonic(), os.path.getsize(record)
    try:
        out, _ = proc.communicate(timeout=seconds * 4 + 60)
    except subprocess.TimeoutExpired:  # a hung attacker is a row, not a traceback
        proc.kill()
        out, _ = proc.communicate()
    t1, size1 = time.monotonic(), os.path.getsize(record)
    try:
        client = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        client = {}
    return sum(t0 <= t < t1 for t in done) / (t1 - t0), (size1 - size0) / (t1 - t0), client


def _pair(
    engine: Engine, record: str, done: list[float], kind: str, seconds: float, attack_first: bool
) -> dict[str, Any]:
    """One quiet window and one attack window, in the order given."""
    if attack_first:
        storm, storm_b, client = _attack(engine, record, done, kind, seconds)
        time.sleep(1.0)  # the attack's connections are gone before the quiet window
        quiet, quiet_b = _window(record, done, seconds)
    else:
        quiet, quiet_b = _window(record, done, seconds)
        storm, storm_b, client = _attack(engine, record, done, kind, seconds)
        time.sleep(1.0)
    return {"quiet_pps": quiet, "storm_pps": storm, "quiet_Bps": quiet_b, "storm_Bps": storm_b,
            "change": storm / quiet - 1 if quiet else None, "attack_first": attack_first,
            "client": client}  # fmt: skip


def _row(kind: str, pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """An attack's figures: medians over its pairs, each pair kept."""
    changes = [p["change"] for p in pairs if p["change"] is not None]
    client: dict[str, Any] = {}
    for p in pairs:
        for k, v in p["client"].items():
            client[k] = client.get(k, 0) + v
    return {
        "attack": kind,
        "quiet_pps": statistics.median(p["quiet_pps"] for p in pairs),
        "storm_pps": statistics.median(p["storm_pps"] for p in pairs),
        "change": statistics.median(changes) if changes else None,
        "changes": changes,
        "record_quiet_Bps": statistics.median(p["quiet_Bps"] for p in pairs),
        "record_storm_Bps": statistics.median(p["storm_Bps"] for p in pairs),
        "pairs": pairs,
        **{f"client_{k}": v for k, v in client.items()},
    }


def _print(rows: list[dict[str, Any]], counters: dict[str, int]) -> None:
    print(f"{'attack':<8} {'quiet p/s':>10} {'storm p/s':>10} {'change':>8} "
          f"{'rec B/s q':>10} {'rec B/s s':>10}  pairs' changes; client")  # fmt: skip
    for r in rows:
        change = "?" if r["change"] is None else f"{r['change'] * 100:+.1f}%"
        extra = (
            f"operator served {r.get('client_ok')}/{r.get('client_tries')}"
            if r["attack"] == "idle"
            else f"scrapes ok {r.get('client_ok')}/{r.get('client_tries')}"
            if r["attack"] == "loris"
            else f"sent {r.get('client_sent')}"
        )
        rates = f"{r['record_quiet_Bps']:>10.0f} {r['record_storm_Bps']:>10.0f}"
        each = " ".join(f"{c * 100:+.0f}" for c in r.get("changes", []))
        print(f"{r['attack']:<8} {r['quiet_pps']:>10.1f} {r['storm_pps']:>10.1f} {change:>8} "
              f"{rates}  [{each}] {extra}")  # fmt: skip
    print("(medians over the pairs; quiet and attack windows alternate in order)")
    print("listener: " + ", ".join(f"{k} {v}" for k, v in counters.items()))


__all__ = ["add_arguments", "run"]
