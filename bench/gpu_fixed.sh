#!/usr/bin/env bash
# One device call for the fixed-base MSM (kernels/cuda/msm_fixed.py): its GPU tests and the
# general MSM's, then two alternating rounds of `bench msm --points device` and `--points fixed`
# (the first fixed round with a window sweep up to 2^22), with gmpy2 from .whl. Carry
# kernels/cuda/cubin and .whl. Logs and JSON are packed into one tgz in $OUT; the tables last.
#   PROVETOP_COMMIT=<sha> bash bench/gpu_fixed.sh
#   TESTS=fixed SWEEP=0 bash bench/gpu_fixed.sh   # the fixed-base tests only, no sweep
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/fixed_out}
W=/tmp/gpu-fixed
mkdir -p "$OUT" "$W"
export PROVETOP_COMMIT=$(bash bench/commit.sh)
trap 'tar czf "$OUT/gpu-fixed.tgz" -C /tmp gpu-fixed' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used,memory.total \
    --format=csv | tee "$W/gpu.txt"
SITE=$(bash bench/gmpy2_site.sh)
export PYTHONPATH=.:$SITE
SIZES=${SIZES:-16,20,22,24}
TEST_FILES="tests/kernels/test_cuda_msm_fixed.py tests/kernels/test_cuda_msm.py"
[ "${TESTS:-all}" = fixed ] && TEST_FILES=tests/kernels/test_cuda_msm_fixed.py
timeout 240 python3 -m pytest -q -m gpu $TEST_FILES -p no:cacheprovider >"$W/tests.log" 2>&1
tail -n 3 "$W/tests.log"
for r in 1 2; do
    sweep=""
    [ "$r" = 1 ] && [ "${SWEEP:-1}" = 1 ] && sweep="--sweep=-4,-2,-1,1,2 --sweep-max-log 22"
    timeout 150 python3 -m provetop bench msm --points device --log-sizes "$SIZES" --check \
        --json --results-dir "$W" --tag "general-r$r" >"$W/general-r$r.log" 2>&1
    timeout 240 python3 -m provetop bench msm --points fixed --log-sizes "$SIZES" --check \
        $sweep --json --results-dir "$W" --tag "fixed-r$r" >"$W/fixed-r$r.log" 2>&1
done
python3 - "$W" <<'PY'
import json, pathlib, sys
rows = {}
for f in sorted(pathlib.Path(sys.argv[1]).glob("msm-*.json")):
    tag = f.name.split("-")[3]  # general / fixed
    for r in json.loads(f.read_text())["rows"]:
        rows.setdefault((r["log_size"], tag), []).append(r)
print(f"{'n':>5} {'setting':>8} {'c':>3} {'medians ms':>18} {'check':>6} {'table':>9} {'build ms':>9}  breakdown (r1)")
for (k, tag), rs in sorted(rows.items()):
    r = rs[0]
    bd = ", ".join(f"{s} {v:.2f}" for s, v in r.get("breakdown_ms", {}).items())
    tb = f"{r['table_bytes'] / 2**30:.2f}G" if "table_bytes" in r else "-"
    meds = " / ".join(f"{x['median_ms']:.2f}" for x in rs)
    print(f"2^{k:<3} {tag:>8} {r['window_bits']:>3} {meds:>18} "
          f"{str(r.get('check', '-')):>6} {tb:>9} {r.get('table_build_ms', 0):>9.0f}  {bd}")
    for cw, s in sorted(r.get("sweep", {}).items(), key=lambda kv: int(kv[0])):
        print(f"{'':>14} sweep c={cw}: {s['median_ms']:.2f} ms (model {s['model_cost']:.3g})")
PY
