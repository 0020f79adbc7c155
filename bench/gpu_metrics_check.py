"""Check, on a real GPU, the NVML `gpu` samples and the Prometheus endpoint of a running engine.

Run from the repository root on the GPU machine (CuPy, pynvml and prometheus-client there):

    PYTHONPATH=. python3 bench/gpu_metrics_check.py [--domain-log 22] [--proofs 6]

Starts `provetop engine --backend cuda --metrics 127.0.0.1:0`, scrapes the endpoint once a
second while partitions run, parses each scrape with prometheus-client's own parser, and checks
what a real card must satisfy: utilisation ratios in [0, 1], power above 0 and below its limit,
a temperature, clocks, NVML used <= total, the engine's own phase histograms filling. Then
reads the recording and counts its `gpu` events. Prints one table last; exit 1 on a failed check.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from provetop.recordings.reader import open_recording


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def values(sample: dict, name: str) -> list[float]:
    return [v for (n, _labels), v in sample.items() if n == name]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--domain-log", type=int, default=22)
    ap.add_argument("--proofs", type=int, default=6)
    ap.add_argument("--devices", default="0", help="the engine's --devices, e.g. 0,1,2,3")
    ap.add_argument("--out", default="/tmp/gpu-metrics-check")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rec = out / "metrics-run.pvtrec"
    cmd = [sys.executable, "-m", "provetop", "engine", "--backend", args.backend,
           "--preset", "small", "--domain-log", str(args.domain_log), "--proofs", str(args.proofs),
           "--devices", args.devices, "--metrics", "127.0.0.1:0", "--record", str(rec),
           "--exit-when-done"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url, lines = None, []
    for line in proc.stdout:
        lines.append(line)
        m = re.search(r"metrics on (http://\S+/metrics)", line)
        if m:
            url = m.group(1)
            break
    if url is None:
        print("".join(lines))
        print("FAILED: the engine printed no metrics address")
        return 1
    scrapes, times = [], []
    while proc.poll() is None and len(scrapes) < 120:
        t0 = time.perf_counter()
        try:
            scrapes.append(scrape(url))
            times.append(time.perf_counter() - t0)
        except OSError:
            break
        time.sleep(1.0)
    rest = proc.stdout.read()
    proc.wait(timeout=300)
    (out / "engine.log").write_text("".join(lines) + rest)
    checks: list[tuple[str, bool, str]] = []
    last = scrapes[-1] if scrapes else {}
    util = [v for s in scrapes for v in values(s, "provetop_gpu_utilization_ratio")]
    power = values(last, "provetop_gpu_power_watts")
    limit = values(last, "provetop_gpu_power_limit_watts")
    temp = values(last, "provetop_gpu_temperature_celsius")
    clocks = values(last, "provetop_gpu_clock_hertz")
    used, total = (
        values(last, "provetop_nvml_used_bytes"),
        values(last, "provetop_nvml_total_bytes"),
    )
    phases = values(last, "provetop_phase_duration_seconds_count")
    checks.append(("scrapes during the run", len(scrapes) >= 2, f"{len(scrapes)}"))
    checks.append(("utilisation in [0, 1]", bool(util) and all(0 <= u <= 1 for u in util),
                   f"max {max(util, default=float('nan')):.2f}"))  # fmt: skip
    checks.append(("power in (0, limit]", bool(power) and bool(limit) and 0 < power[0] <= limit[0],
                   f"{power[:1]} W of {limit[:1]} W"))  # fmt: skip
    checks.append(("temperature present", bool(temp), f"{temp[:1]} C"))
    checks.append(("clocks present", bool(clocks), f"{sorted(clocks)[-1:]} Hz"))
    checks.append(("NVML used <= total", bool(used) and used[0] <= total[0], f"{used[:1]}"))
    checks.append(("phase histograms fill", sum(phases) > 0, f"{int(sum(phases))} observations"))
    gpu_events = sum(1 for e in open_recording(rec).events if e.get("k") == "gpu")
    checks.append(("gpu events in the recording", gpu_events > 0, f"{gpu_events}"))
    med = sorted(times)[len(times) // 2] * 1e3 if times else float("nan")
    print(f"engine: {' '.join(cmd[3:])}")
    print(f"median scrape {med:.1f} ms over {len(times)} scrapes; engine exit {proc.returncode}")
    for name, ok, detail in checks:
        print(f"{'ok    ' if ok else 'FAILED'} {name:<30} {detail}")
    return 0 if all(ok for _n, ok, _d in checks) and proc.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
