"""A real Prometheus scraping an engine with injected faults: does increase() count every one?

    PYTHONPATH=. python3 bench/prometheus_faults.py [--proofs 80] [--domain-log 14]
        [--scrape 2] [--out DIR] [--backend cpu] [--inject SPEC]

Starts Prometheus (Debian's ``prometheus``; ``apt-get install prometheus``) scraping one
``provetop engine --metrics`` every ``--scrape`` seconds, the engine on the cpu backend with
faults injected across the run (OOMs at the pre-stage, kernel exceptions, a killed worker,
delayed phases), n = 2^14 so that a partition takes about a second and the run a few
minutes. When every proof is done and three more scrapes have landed, it asks Prometheus for
``increase()`` of each fault kind, the OOMs, the retries, the partitions and the proofs over
the whole run, evaluated at the last scrape; then stops the engine and sets those beside the
engine's own summary (its ``done:`` line and the recording's events). Also: ``up`` over the
run, ``promtool check metrics`` on one scrape, how many of the Grafana dashboard's expressions
return data, and when the first scrape and the first count came.

Prints the table last; the recording, Prometheus's log and the numbers (JSON) go to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from provetop.recordings.reader import open_recording
from provetop.recordings.schema import FAULT_KINDS
from provetop.recordings.state import State
from tests.recordings import promql
from tests.recordings.test_grafana_promql import dashboard_exprs

# Spread over the run (prestage allocations: two a partition; h_step and msm_h starts: one a
# partition), all after Prometheus's first scrape of the engine: a count made before a series'
# first scrape is where Prometheus takes the series to begin, so no increase() can see it (the
# SRS, 2-3 s at 2^14, and the first partitions leave room for that scrape). Worker 1 dies at
# its first fallback upload (after an OOM).
INJECT = (
    "alloc:prestage:20,alloc:prestage:100,alloc:prestage:200,alloc:prestage:300,"
    "raise:h_step:15,raise:h_step:90,raise:h_step:150,kill:worker:1:fallback_upload,"
    "delay:msm_h:50ms:30,delay:msm_h:50ms:120"
)


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return str(r.read().decode())


def _proofs(text: str) -> float:
    total = 0.0
    for fam in text_string_to_metric_families(text):
        if fam.name == "provetop_proofs":
            total += sum(s.value for s in fam.samples if s.name == "provetop_proofs_total")
    return total


def _wait_for_target(prom: promql.Prometheus, timeout_s: float = 30.0) -> None:
    """Until Prometheus has tried the target once (it is down until the engine starts)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{prom.url}/api/v1/targets", timeout=5) as r:
            targets = json.load(r)["data"]["activeTargets"]
        if targets and not targets[0]["lastScrape"].startswith("0001"):
            return
        time.sleep(0.2)
    raise SystemExit("prometheus never scraped its target")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--proofs", type=int, default=80)
    ap.add_argument("--domain-log", type=int, default=14, help="2^K: about 1 s a partition")
    ap.add_argument("--scrape", type=float, default=2.0, help="scrape interval, seconds")
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--preset", default="ci")
    ap.add_argument("--inject", default=INJECT)
    ap.add_argument("--out", default="/tmp/provetop-prometheus-faults")
    args = ap.parse_args()
    promql.require()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    port = promql._free_port()
    metrics = f"http://127.0.0.1:{port}/metrics"
    rec = out / "run.pvtrec"
    config = (
        f"global:\n  scrape_interval: {args.scrape:g}s\n  scrape_timeout: {args.scrape / 2:g}s\n"
        f"scrape_configs:\n  - job_name: provetop\n    metrics_path: /metrics\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
    )
    cmd = [sys.executable, "-m", "provetop", "engine", "--backend", args.backend,
           "--preset", args.preset, "--domain-log", str(args.domain_log),
           "--proofs", str(args.proofs), "--inject", args.inject,
           "--metrics", f"127.0.0.1:{port}", "--record", str(rec)]  # fmt: skip
    started = time.time()
    with promql.serve(out / "tsdb", config, log=out / "prometheus.log") as prom:
        _wait_for_target(prom)  # Prometheus applies a new target set after up to 5 s
        engine = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            text = ""
            while _proofs(text) < args.proofs:  # every proof done (the engine keeps serving)
                if engine.poll() is not None:
                    raise SystemExit(f"the engine exited early: {engine.returncode}")
                time.sleep(1.0)
                try:
                    text = _scrape(metrics)
                except OSError:
                    text = ""
            time.sleep(3 * args.scrape + 0.5)  # three more scrapes
            check = subprocess.run(
                ["promtool", "check", "metrics"], input=_scrape(metrics), capture_output=True,
                text=True,
            )  # fmt: skip
            now = int(time.time() * 1000)
            last = prom.query('max(timestamp(provetop_events_total{job="provetop"}))', now)
            at = int(float(last[0]["value"][1]) * 1000)
            window = f"[{math.ceil(time.time() - started) + 60}s]"
            q = {
                "faults": f"sum by (kind) (increase(provetop_faults_total{window}))",
                "ooms": f"sum(increase(provetop_ooms_total{window}))",
                "retries": f"sum(increase(provetop_retries_total{window}))",
                "partitions": f"sum by (outcome) (increase(provetop_partitions_total{window}))",
                "proofs": f"sum by (outcome) (increase(provetop_proofs_total{window}))",
                "up": f'sum_over_time(up{{job="provetop"}}{window})',
                "scrapes": f'count_over_time(up{{job="provetop"}}{window})',
            }
            got = {k: prom.query(v, at) for k, v in q.items()}
            series = prom.query(f'provetop_events_total{{job="provetop"}}{window}', at)
            first_scrape_ms = float(series[0]["values"][0][0]) * 1000
            exprs = [e for e in dashboard_exprs()]
            with_data = sum(1 for e in exprs if prom.query(e, at))
        finally:
            engine.terminate()
            stdout, _ = engine.communicate(timeout=60)
    done = next((line for line in stdout.splitlines() if line.startswith("done:")), "")
    events = list(open_recording(rec).events)
    state = State().fold(events)
    wall = (state.hello or {}).get("wall_ns", 0)
    counted = [e["t"] for e in events if e["k"] in ("fault", "partition_done", "proof_done")]
    first_fault = min(counted, default=0)  # the first count of any counter
    first_scrape_s = (first_scrape_ms * 1e6 - wall) / 1e9  # of the engine's run time
    first_fault_s = first_fault / 1e9
    kinds = Counter(f["kind"] for f in state.faults)
    totals = state.totals()
    attempts = Counter("ok" if r.ok else "failed" for r in state.attempts)

    def value(key: str, label: str | None = None, name: str | None = None) -> float:
        for r in got[key]:
            if label is None or r["metric"].get(label) == name:
                return round(float(r["value"][1]), 6)
        return float("nan")

    rows = [(f"faults {k}", kinds.get(k, 0), value("faults", "kind", k)) for k in FAULT_KINDS]
    rows += [
        ("OOMs", totals["ooms"], value("ooms")),
        ("retries", state.tally["retries"], value("retries")),
        ("partitions ok", attempts["ok"], value("partitions", "outcome", "ok")),
        ("partitions failed", attempts["failed"], value("partitions", "outcome", "failed")),
        ("proofs ok", totals["proofs_done"], value("proofs", "outcome", "ok")),
        ("proofs failed", totals["proofs_failed"], value("proofs", "outcome", "failed")),
    ]
    problems = [line for line in (check.stdout + check.stderr).splitlines() if line.strip()]
    result = {
        # as typed on any machine: the interpreter by name, not this one's path
        "command": " ".join(["python", *cmd[1:]]),
        "prometheus": subprocess.run(
            ["prometheus", "--version"], capture_output=True, text=True
        ).stdout.splitlines()[0],  # fmt: skip
        "scrape_interval_s": args.scrape,
        "run_s": round(time.time() - started, 1),
        "up": f"{value('up'):g}/{value('scrapes'):g}",
        "promtool_problems": problems,
        "dashboard_exprs_with_data": f"{with_data}/{len(exprs)}",
        "engine_done_line": done,
        "first_scrape_s": round(first_scrape_s, 2),
        "first_count_s": round(first_fault_s, 2),
        "rows": [{"what": w, "engine": e, "prometheus": p} for w, e, p in rows],
    }
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"engine: {result['command']}")
    print(f"engine said: {done}")
    print(f"{result['prometheus']}, scrapes every {args.scrape:g} s over {result['run_s']} s; "
          f"up {result['up']}; promtool check metrics: {len(problems)} problems; dashboard "
          f"expressions with data: {result['dashboard_exprs_with_data']}")  # fmt: skip
    print(f"first scrape at {first_scrape_s:.2f} s of the engine's run, first count (fault, "
          f"partition or proof) at {first_fault_s:.2f} s")  # fmt: skip
    print(f"{'':20} {'engine':>8} {'increase()':>11}")
    bad = 0
    for what, engine_n, prom_n in rows:
        mark = "" if engine_n == prom_n else "  MISMATCH"
        bad += bool(mark)
        print(f"{what:20} {engine_n:>8} {prom_n:>11g}{mark}")
    print(re.sub(r"\s+", " ", f"{len(rows) - bad} of {len(rows)} equal"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
