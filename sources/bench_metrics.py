"""``provetop bench metrics``: what one ``/metrics`` scrape costs at fleet-host size.

Why a bench and not a timed test: a scrape of 8 devices x 2 workers must stay well under a
Prometheus scrape interval on a small machine (target: 50 ms on 2 cores), but timings in tests
are flaky. The events are synthetic (``sources/synthetic.py``: the shapes of a real run, not a
measurement), folded once; then the exposition alone and a full HTTP scrape over loopback are
timed, and the fold's own rate is reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from typing import Any

from provetop.recordings.prometheus.fold import MetricsFold
from provetop.recordings.prometheus.http_server import MetricsServer
from provetop.sources.synthetic import generate

TARGET_MS = 50.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--devices", type=int, default=8, help="devices (8)")
    parser.add_argument("--workers", type=int, default=2, help="workers per device (2)")
    parser.add_argument("--seconds", type=float, default=120.0, help="synthetic run length (120)")
    parser.add_argument("--repeat", type=int, default=50, help="scrapes to time (50)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def measure(devices: int, workers: int, seconds: float, repeat: int) -> dict[str, Any]:
    """The report: event count, fold rate, exposition and HTTP scrape medians (ms)."""
    events = generate(devices=devices, workers=workers, duration_s=seconds, oom_every=23)
    fold = MetricsFold()
    t0 = time.perf_counter()
    fold.fold(events)
    fold_s = time.perf_counter() - t0
    render_ms = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        body = fold.render()
        render_ms.append((time.perf_counter() - t0) * 1e3)
    server = MetricsServer(fold.render, "127.0.0.1:0")
    url = server.start()
    scrape_ms = []
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            with urllib.request.urlopen(url, timeout=10) as resp:
                resp.read()
            scrape_ms.append((time.perf_counter() - t0) * 1e3)
    finally:
        server.close()
    samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return {
        "devices": devices,
        "workers_per_device": workers,
        "events": len(events),
        "fold_events_per_s": round(len(events) / fold_s) if fold_s > 0 else None,
        "samples": samples,
        "body_bytes": len(body),
        "render_ms_median": round(statistics.median(render_ms), 2),
        "scrape_ms_median": round(statistics.median(scrape_ms), 2),
        "scrape_ms_max": round(max(scrape_ms), 2),
        "target_ms": TARGET_MS,
        "within_target": statistics.median(scrape_ms) <= TARGET_MS,
    }


def run(args: argparse.Namespace) -> int:
    report = measure(args.devices, args.workers, args.seconds, max(1, args.repeat))
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    rows = [
        ("devices x workers", f"{report['devices']} x {report['workers_per_device']}"),
        ("events folded", f"{report['events']:,}"),
        ("fold rate", f"{report['fold_events_per_s']:,} events/s"),
        ("samples per scrape", f"{report['samples']:,} ({report['body_bytes']:,} bytes)"),
        ("exposition, median", f"{report['render_ms_median']:.2f} ms"),
        ("HTTP scrape, median", f"{report['scrape_ms_median']:.2f} ms"),
        ("HTTP scrape, max", f"{report['scrape_ms_max']:.2f} ms"),
        ("target", f"<= {TARGET_MS:.0f} ms: {'met' if report['within_target'] else 'MISSED'}"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    return 0
