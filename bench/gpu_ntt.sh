#!/usr/bin/env bash
# One device call for the GPU NTT work: for each compile variant, the GPU tests, the
# self-test rows and the benchmark (JSON into $OUT); a short table last.
# Usage on the device machine: PROVETOP_COMMIT=<sha> bash bench/gpu_ntt.sh
# Variants: VARIANTS="label:DEFINES:SIZES ..." (DEFINES comma-separated, '-' for none; each
# set as PROVETOP_NTT_DEFINES).
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ntt_out}
mkdir -p "$OUT"
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
from provetop.kernels.cuda import ntt
from provetop.kernels.tuning import KernelTuning
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
from provetop.kernels.selftest.rows_cuda import ntt_checks
from provetop.kernels.tuning import KernelTuning
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
