"""Does ``provetop trace`` see what the engine sees? Compare an engine's own recording with the
trace of the same run, made from outside (``provetop trace -- provetop engine ...``).

Both recordings carry ``memory`` events of the same device; their clocks are put on one axis
by each hello's wall-clock anchor. For each of the engine's samples, the trace's samples of the
engine's process within one sampling interval either side are taken, and the engine's
stream-ordered reserved and used bytes must lie within their range (a pool that moved between
the two readings moves both), with a tolerance of one 2 MiB page. The out-of-memory faults of
both are matched in time the same way. Prints a table and writes JSON with ``--json``.

    python3 bench/trace_vs_engine.py ENGINE.pvtrec TRACE.pvtrec [--interval-ms 100] [--json F]
"""

from __future__ import annotations

import argparse
import bisect
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from provetop.recordings.reader import open_recording  # noqa: E402

PAGE = 2 << 20  # one granule of the driver's device allocations: readings differ by whole pages
FIELDS = ("async_reserved", "async_used")


def wall(events: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    hello = next(e for e in events if e["k"] == "hello")
    return int(hello["wall_ns"]), hello


def compare(engine_path: str, trace_path: str, interval_ms: int) -> dict[str, Any]:
    eng = open_recording(engine_path).events
    tr = open_recording(trace_path).events
    e_wall, e_hello = wall(eng)
    t_wall, _ = wall(tr)
    pid = e_hello.get("pid")
    window = interval_ms * 1_000_000
    samples = [
        (int(e["t"]) + t_wall, e)
        for e in tr
        if e["k"] == "memory" and e.get("pid") == pid and e.get("cuda_device") == 0
    ]
    samples.sort(key=lambda s: s[0])
    times = [s[0] for s in samples]
    result: dict[str, Any] = {"engine_pid": pid, "trace_samples": len(samples)}
    for field in FIELDS:
        agree = total = 0
        worst = 0
        for e in eng:
            if e["k"] != "memory" or e.get("device") != 0:
                continue
            at = int(e["t"]) + e_wall
            lo, hi = bisect.bisect_left(times, at - window), bisect.bisect_right(times, at + window)
            if lo >= hi:
                continue
            values = [int(samples[i][1][field]) for i in range(lo, hi)]
            v = int(e[field])
            total += 1
            miss = max(0, min(values) - PAGE - v, v - max(values) - PAGE)
            agree += miss == 0
            worst = max(worst, miss)
        result[field] = {
            "engine_samples_compared": total,
            "agree": agree,
            "fraction": agree / total if total else None,
            "worst_miss": worst,
        }
    e_ooms = [int(e["t"]) + e_wall for e in eng if e["k"] == "fault" and e.get("kind") == "oom"]
    t_ooms = [int(e["t"]) + t_wall for e in tr if e["k"] == "fault" and e.get("kind") == "oom"]
    matched = sum(any(abs(a - b) <= window for b in t_ooms) for a in e_ooms)
    result["ooms"] = {
        "engine": len(e_ooms),
        "trace": len(t_ooms),
        "matched": matched,
        "trace_phantom_cases": sum(
            1 for e in tr if e["k"] == "fault" and e.get("case") == "phantom"
        ),
    }
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("engine")
    p.add_argument("trace")
    p.add_argument("--interval-ms", type=int, default=100)
    p.add_argument("--json")
    a = p.parse_args()
    r = compare(a.engine, a.trace, a.interval_ms)
    print(f"engine pid {r['engine_pid']}, {r['trace_samples']} trace samples of it on device 0")
    print(f"{'field':<16} {'compared':>9} {'agree':>7} {'fraction':>9} {'worst miss':>12}")
    for f in FIELDS:
        x = r[f]
        frac = f"{x['fraction']:.3f}" if x["fraction"] is not None else "-"
        print(
            f"{f:<16} {x['engine_samples_compared']:>9} {x['agree']:>7} {frac:>9} "
            f"{x['worst_miss']:>12}"
        )
    o = r["ooms"]
    print(
        f"OOMs: engine {o['engine']}, trace {o['trace']}, matched within one interval "
        f"{o['matched']}, trace says phantom {o['trace_phantom_cases']}"
    )
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
