"""One row per partition of a recording: where each GPU region's time went.

Why: the medians of ``provetop bench pipeline`` hide which partitions a change moved (a checked
partition, the first region, the last one without a neighbour); the engine A/Bs in
bench/notes/pipeline.md and memory.md compare these rows. Usage:

    python3 bench/partition_table.py RUN.pvtrec [TITLE]

Columns: gpu_total (the mutex hold), the host time of the fallback upload (its allocations
and queued copies), the device time (``gpu_ms``) of the H step and the MSM pass, the host time
of the partition's synthesis, and its mutex wait.
"""

from __future__ import annotations

import sys
from collections import defaultdict

from provetop.recordings.reader import open_recording

COLUMNS = ("h_step", "msm_interleaved")  # device time (gpu_ms)


def rows(path: str) -> list[dict]:
    """Per successful attempt: its ids, totals and the phases' device and host times."""
    gpu: dict[tuple, dict[str, float]] = defaultdict(dict)
    synth: dict[tuple, float] = {}
    out = []
    for e in open_recording(path).events:
        k = e["k"]
        if k == "phase_end" and "gpu_ms" in e:
            gpu[(e["proof"], e["partition"])][e["phase"]] = e["gpu_ms"]
        elif k == "partition_done":
            key = (e["proof"], e["partition"])
            phases = e.get("phases_ms") or {}
            if "synthesis" in phases:
                synth[key] = phases["synthesis"]
            if e["ok"]:
                out.append(
                    {
                        "key": key,
                        "worker": e.get("worker"),
                        "checked": e.get("verified") is not None,
                        "prestage": e.get("prestage"),
                        "gpu_total": e["gpu_total_ms"],
                        "wait": e["mutex_wait_ms"],
                        "gpu": gpu.get(key, {}),
                        "fb_upl": phases.get("fallback_upload"),
                    }
                )
    for r in out:
        r["synthesis"] = synth.get(r["key"])
    return out


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    title = argv[1] if len(argv) > 1 else argv[0]
    print(f"-- {title}")
    print("proof.part w  chk pre     gpu_total  fb_upl  h_step    pass  synth   wait")
    for r in sorted(rows(argv[0]), key=lambda r: r["key"]):
        g = r["gpu"]
        print(
            f"{r['key'][0]}.{r['key'][1]:<8} {r['worker']!s:>2} {'y' if r['checked'] else '-':>4} "
            f"{r['prestage'] or '-':<6} {r['gpu_total']:9.1f} "
            + f"{_ms(r['fb_upl']):>7} "
            + " ".join(f"{_ms(g.get(c)):>7}" for c in COLUMNS)
            + f" {_ms(r['synthesis']):>6} {r['wait']:6.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
