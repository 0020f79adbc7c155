#!/usr/bin/env bash
# One device call (< 10 minutes) for the MSM's radix-partition sort (PROVETOP_MSM_SORT) against
# the counting sort in the same run, after their GPU tests; then the NVML tests of `provetop
# top`'s source. Run from the repository root on the GPU machine with the sm_90 cubins carried
# (python3 -m provetop.kernels.cuda.prebuild --arch sm_90):
#   PROVETOP_COMMIT=<hash> bash bench/gpu_kernels_ab.sh
# The full mode is `bash bench/gpu_msm.sh sort` (longer test runs, the auto sort and the
# ones-heavy MSM too). Logs and JSON are packed into $OUT/kernels-ab.tgz; the table is printed
# last.
set -u
export PYTHONPATH=${PYTHONPATH:-$PWD} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/kernels_ab_out}
W=/tmp/kernels-ab
mkdir -p "$OUT" "$W/msm"
export PROVETOP_COMMIT=$(bash bench/commit.sh)  # pass it in: the device copy's git may lag
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv \
    | tee "$W/gpu.txt"
trap 'tar czf "$OUT/kernels-ab.tgz" -C /tmp kernels-ab' EXIT
t() {  # label, limit (s), command...: the log's last lines
    local label=$1 limit=$2
    shift 2
    timeout "$limit" "$@" >"$W/$label.log" 2>&1
    echo "== $label rc=$?"
    tail -n 4 "$W/$label.log"
}
t msm-tests 110 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_cuda_msm.py \
    -k "radix or sort"
for s in counting radix; do
    PROVETOP_MSM_SORT=$s t "msm-bench-$s" 75 python3 -m provetop.kernels.bench_msm --log-sizes 20,24,27 \
        --check --json --results-dir "$W/msm" --tag "sort-$s"
done
t nvml-tests 40 python3 -m pytest -q -s -m gpu -p no:cacheprovider \
    tests/sources/test_nvml_source.py tests/engine/test_nvml_gpu.py
python3 - "$W" <<'PY'
import glob, json, sys
w = sys.argv[1]
print("MSM dense, device points, medians (ms): counting -> radix")
rows = {}
for s in ("counting", "radix"):
    for f in sorted(glob.glob(f"{w}/msm/msm-dense-device-sort-{s}-*.json"))[-1:]:
        for r in json.load(open(f))["rows"]:
            rows.setdefault(r["log_size"], {})[s] = r
for k in sorted(rows):
    a, b = rows[k].get("counting"), rows[k].get("radix")
    if a and b:
        print(f"2^{k}: {a['median_ms']:.2f} -> {b['median_ms']:.2f} (x{b['median_ms'] / a['median_ms']:.3f})"
              f" check {a.get('check')}/{b.get('check')}; radix stages {b.get('breakdown_ms')}")
PY
