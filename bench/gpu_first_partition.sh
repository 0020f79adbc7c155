#!/usr/bin/env bash
# A new GPU machine with prebuilt cubins: is the first partition of a run within 2x the
# second? (the engine's warm-up must leave nothing to compile inside a partition). One call:
#   1. `provetop warmup` (nvcc, where installed, builds the missing cubins; else NVRTC fills
#      CuPy's cache once), as the README says to do after installing;
#   2. CuPy's kernel cache emptied (CUPY_CACHE_DIR set to a fresh folder) so CuPy's own
#      elementwise, scan and reduction kernels are as on a new machine, and a `small` run of
#      2 proofs (`provetop bench pipeline --preset small --backend cuda --record ...`);
#   3. the recording's attempts in start order: each one's gpu_total and its slowest phases,
#      and the verdict, first <= 2 x second (the two workers' first partitions against
#      their second ones).
# Usage on the device machine: bash bench/gpu_first_partition.sh   (PRESET=porep-32g to try
# the real size; PROOFS=2). Prints a short table last; the files land in $OUT.
set -uo pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/first_partition}
PRESET=${PRESET:-small}
PROOFS=${PROOFS:-2}
mkdir -p "$OUT"
export PROVETOP_COMMIT=$(bash bench/commit.sh 2>/dev/null || git rev-parse --short HEAD)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

t0=$(date +%s.%N)
python3 -m provetop warmup --backend cuda 2>&1 | tee "$OUT/warmup.txt" | tail -3
echo "warmup: $(python3 -c "import time; print(round(time.time() - $t0, 1))") s" | tee -a "$OUT/warmup.txt"

export CUPY_CACHE_DIR=$(mktemp -d /tmp/cupy-cache.XXXXXX)  # CuPy's own kernels: none yet
export CUPY_CACHE_SAVE_CUDA_SOURCE=1  # each compiled kernel's source beside it: named below
REC="$OUT/first-$PRESET.pvtrec"
rm -f "$REC"
python3 -m provetop bench pipeline --backend cuda --preset "$PRESET" --proofs "$PROOFS" \
    --record "$REC" --json >"$OUT/pipeline.json" 2>"$OUT/pipeline.err" || {
    echo "the run failed:"; tail -20 "$OUT/pipeline.err"; exit 1; }
python3 -m provetop summary "$REC" >"$OUT/summary.txt"

# which of CuPy's kernels compiled when: seconds from the recording's start, beside the first
# partitions' phases (a compile inside a partition is what the warm-up missed)
python3 - "$REC" "$CUPY_CACHE_DIR" <<'PY' | tee "$OUT/compiles.txt"
import glob, os, re, sys
from provetop.recordings.reader import open_recording
rec = open_recording(sys.argv[1])
hello = next(e for e in rec.events if e["k"] == "hello")
t0_wall, t0 = hello.get("wall_ns", 0) / 1e9, 0  # wall_ns is the wall clock at t = 0
marks = []
for e in rec.events:
    if e["k"] in ("phase_begin", "phase_end") and e.get("proof") == 0 and e.get("partition", 9) < 2:
        marks.append(((e["t"] - t0) / 1e9, f"{e['k'][6:]:5} p{e['partition']} {e['phase']}"))
    elif e["k"] == "progress" and e["done"] in (0, e["total"]):
        marks.append(((e["t"] - t0) / 1e9, f"progress {e['task']} {e['done']}/{e['total']}"))
for path in glob.glob(os.path.join(sys.argv[2], "*.cu")):
    names = re.findall(r"__global__\s+void\s+(\w+)", open(path, errors="replace").read())
    marks.append((os.path.getmtime(path) - t0_wall, "COMPILED " + ",".join(names)[:100]))
for t, what in sorted(marks):
    print(f"{t:9.3f} s  {what}")
PY

python3 - "$REC" <<'PY'
import sys
from provetop.recordings.reader import open_recording
from provetop.recordings.summary import build_summary

rec = open_recording(sys.argv[1])
begins = {}
for e in rec.events:
    if e["k"] == "phase_begin":
        begins.setdefault((e["proof"], e["partition"], e.get("attempt", 0)), e["t"])
rows = [a for a in build_summary(rec)["attempts"] if a["ok"]]
rows.sort(key=lambda a: begins.get((a["proof"], a["partition"], a["attempt"]), 0))
print(f"{'#':>2} {'proof/part':>10} {'worker':>6} {'gpu_ms':>9}  slowest phases (ms)")
for i, a in enumerate(rows[:6]):
    top = sorted(a["phases_ms"].items(), key=lambda kv: -kv[1])[:4]
    phases = ", ".join(f"{k} {v:.0f}" for k, v in top)
    print(f"{i:>2} {a['proof']:>5}/{a['partition']:<4} {a['worker']:>6} {a['gpu_total_ms']:>9.1f}  {phases}")
by_worker = {}
for a in rows:
    by_worker.setdefault(a["worker"], []).append(a["gpu_total_ms"])
ok = True
for w, times in sorted(by_worker.items()):
    if len(times) < 2:
        continue
    first, second = times[0], times[1]
    within = first <= 2 * second
    ok &= within
    print(f"worker {w}: first {first:.1f} ms, second {second:.1f} ms, ratio "
          f"{first / second:.2f}: {'within 2x' if within else 'NOT within 2x'}")
print("verdict:", "first partition within 2x the second" if ok else "FAILED: first > 2x second")
sys.exit(0 if ok else 1)
PY
