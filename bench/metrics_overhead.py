"""Does scraping /metrics every second change the engine's partition times? An A/B in one call.

    PYTHONPATH=. python3 bench/metrics_overhead.py [--backend cuda] [--preset porep-32g]
        [--proofs 1] [--out DIR]

Runs `provetop engine` twice on the same workload: without `--metrics`, then with it and a
client scraping the endpoint once a second for the whole run. Each run's recording is reduced
by `provetop summary --json`; the table compares the median gpu_total and s/proof. Prints the
table last; the JSON of both runs goes to --out.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path


def run_engine(args: argparse.Namespace, out: Path, label: str, scrape: bool) -> dict:
    rec = out / f"{label}.pvtrec"
    rec.unlink(missing_ok=True)  # this script's own folder: a rerun replaces its recordings
    cmd = [sys.executable, "-m", "provetop", "engine", "--backend", args.backend,
           "--preset", args.preset, "--proofs", str(args.proofs), "--record", str(rec),
           "--exit-when-done"]  # fmt: skip
    if scrape:
        cmd += ["--metrics", "127.0.0.1:0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stop, scrapes, lines = threading.Event(), [], []

    def scraper(url: str) -> None:
        while not stop.wait(1.0):
            t0 = time.perf_counter()
            try:
                urllib.request.urlopen(url, timeout=5).read()
                scrapes.append(time.perf_counter() - t0)
            except OSError:
                return

    thread = None
    for line in proc.stdout:
        lines.append(line)
        m = re.search(r"metrics on (http://\S+/metrics)", line)
        if m and thread is None:
            thread = threading.Thread(target=scraper, args=(m.group(1),), daemon=True)
            thread.start()
    proc.wait()
    stop.set()
    (out / f"{label}.log").write_text("".join(lines))
    summary = subprocess.run(
        [sys.executable, "-m", "provetop", "summary", str(rec), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(summary.stdout)
    data["scrapes"] = len(scrapes)
    data["scrape_ms_median"] = sorted(scrapes)[len(scrapes) // 2] * 1e3 if scrapes else None
    data["engine_exit"] = proc.returncode
    return data


def median_gpu_total(summary: dict) -> float | None:
    """The median gpu_total over the summary's partition rows (ms)."""
    rows = [a.get("gpu_total_ms") for a in summary.get("attempts", []) if a.get("ok")]
    vals = sorted(v for v in rows if v)
    return vals[len(vals) // 2] if vals else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--preset", default="porep-32g")
    ap.add_argument("--proofs", type=int, default=1)
    ap.add_argument("--out", default="/tmp/metrics-overhead")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    quiet = run_engine(args, out, "quiet", scrape=False)
    scraped = run_engine(args, out, "scraped", scrape=True)
    (out / "metrics-overhead.json").write_text(json.dumps({"quiet": quiet, "scraped": scraped}))
    print(f"{args.backend} {args.preset}, {args.proofs} proof(s) a run")
    print(f"{'run':<8} {'gpu_total median ms':>20} {'s/proof':>8} {'scrapes':>8} {'scrape ms':>10}")
    for label, d in (("quiet", quiet), ("scraped", scraped)):
        g = median_gpu_total(d)
        spp = d.get("totals", {}).get("s_per_proof")
        sm = d["scrape_ms_median"]
        print(
            f"{label:<8} {g if g is None else round(g, 1)!s:>20} "
            f"{spp if spp is None else round(spp, 2)!s:>8} {d['scrapes']:>8} "
            f"{'-' if sm is None else f'{sm:.1f}':>10}"
        )
    return 0 if quiet["engine_exit"] == 0 and scraped["engine_exit"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
