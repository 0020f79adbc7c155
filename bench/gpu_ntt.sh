#!/usr/bin/env bash
# One device call for the GPU NTT work: for each compile variant, the GPU tests, the
# self-test rows and the benchmark (JSON into $OUT); a short table last.
# Usage on the device machine: PROVETOP_COMMIT=<sha> bash bench/gpu_ntt.sh
# Variants: VARIANTS="label:DEFINES:SIZES ..." (DEFINES comma-separated, '-' for none).
# Mode small (`bash bench/gpu_ntt.sh small`, ~4 minutes): the GPU NTT tests (the small plans'
# among them), then `provetop bench ntt` with PROVETOP_NTT_SMALL=off and =on in the same run
# (JSON into $OUT/small-off, $OUT/small-on), and a table of the two last.
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ntt_out}
mkdir -p "$OUT"
if [ "${1:-}" = "small" ]; then
  LOG="$OUT/ntt-small.log"
  SIZES=${SIZES:-16,18,20,22,24,27}
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
  python3 - <<'PY' 2>&1 | tee -a "$LOG"
from kernels.cuda import ntt
mod = ntt.module()
print("ntt.cu loaded from", mod.origin)
for name in ("ntt_pass_dif", "ntt_pass_dit"):
    f = mod.get_function(name)
    print(name, "regs", f.num_regs, "local bytes", f.local_size_bytes)
PY
  timeout 240 python3 -m pytest -q -m gpu -rs tests/kernels/test_cuda_ntt.py 2>&1 | tail -6 | sed "s/^/[pytest] /" | tee -a "$LOG"
  for setting in off on; do
    mkdir -p "$OUT/small-$setting"
    PROVETOP_NTT_SMALL=$setting timeout 170 python3 -m provetop bench ntt --log-sizes "$SIZES" \
      --repeats 9 --json --results-dir "$OUT/small-$setting" 2>&1 | sed "s/^/[$setting] /" | tee -a "$LOG"
  done
  echo "==== summary (medians, ms; forward/inverse/coset forward natural order; H step)"
  grep -E "^\[pytest\]" "$LOG" | grep -E "passed|failed|error" | tail -2
  python3 - "$OUT" <<'PY'
import glob, json, sys
runs = {}
for s in ("off", "on"):
    files = sorted(glob.glob(f"{sys.argv[1]}/small-{s}/ntt-*.json"))
    runs[s] = {r["log_size"]: r for r in json.load(open(files[-1]))["sizes"]} if files else {}
    if files:
        print(s, "tuning.ntt_small =", json.load(open(files[-1]))["meta"].get("tuning", {}).get("ntt_small"))
cols = ("forward", "inverse", "coset_forward", "h_step")
print("| 2^k | " + " | ".join(f"{c} off | {c} on" for c in cols) + " |")
for k in sorted(set(runs["off"]) | set(runs["on"])):
    cells = []
    for c in cols:
        for s in ("off", "on"):
            r = runs[s].get(k, {}).get(c)
            cells.append("-" if r is None else f"{r['ms']:.4f}")
    print(f"| {k} | " + " | ".join(cells) + " |")
PY
  exit 0
fi
# The GPU tests and self-test rows run for the first variant only (the default build); the
# fr_mul_variants test covers the device build of every multiplication variant.
VARIANTS=${VARIANTS:-"default:-:16,20,24,26,27 v1:FR_MUL_VARIANT=1:24,27 v0:FR_MUL_VARIANT=0:24,27 mb2:NTT_MIN_BLOCKS=2:24,27"}
first=1
LOG="$OUT/ntt.log"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
for v in $VARIANTS; do
  label=${v%%:*}; rest=${v#*:}; defs=${rest%%:*}; sizes=${rest#*:}
  [ "$defs" = "-" ] && defs=""
  export PROVETOP_NTT_DEFINES="$defs"
  echo "==== variant $label (defines: ${defs:-none}) sizes $sizes" | tee -a "$LOG"
  python3 - <<'PY' 2>&1 | tee -a "$LOG"
import time
t = time.time()
from kernels.cuda import ntt
from kernels.tuning import KernelTuning
mod = ntt.module(KernelTuning.from_env())  # PROVETOP_NTT_DEFINES: this variant's defines
print(f"ntt.cu compiled+loaded in {time.time() - t:.1f} s ({mod.origin})")
for name in ("ntt_pass_dif", "ntt_pass_dit", "fr_mul_chain", "fr_mul_chain_v0", "fr_mul_chain_v2"):
    f = mod.get_function(name)
    print(name, "regs", f.num_regs, "local bytes", f.local_size_bytes, "binary", f.binary_version)
PY
  if [ $first = 1 ]; then
  timeout 200 python3 -m pytest -q -m gpu -rs tests/kernels/test_cuda_ntt.py 2>&1 | tail -4 | sed "s/^/[$label pytest] /" | tee -a "$LOG"
  python3 - <<'PY' 2>&1 | sed "s/^/[selftest] /" | tee -a "$LOG"
import time
from kernels.selftest.rows_cuda import ntt_checks
from kernels.tuning import KernelTuning
for c in ntt_checks(KernelTuning.from_env()):
    t = time.time()
    try:
        c.run(); status = "pass"
    except Exception as e:  # report, don't stop
        status = f"FAIL {e!r}"
    print(f"{c.name} (size {c.size}): {status} {time.time() - t:.2f} s")
PY
  fi
  first=0
  mkdir -p "$OUT/$label"
  timeout 150 python3 -m provetop bench ntt --log-sizes "$sizes" --repeats 9 --json --results-dir "$OUT/$label" 2>&1 | sed "s/^/[$label] /" | tee -a "$LOG"
done
echo "==== summary"
grep -E "pytest\]|selftest\]" "$LOG" | grep -E "passed|failed|error|FAIL" | head -20
grep -E "^\[[a-z0-9]+\] (\||copy|target)" "$LOG"
