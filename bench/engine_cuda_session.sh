#!/usr/bin/env bash
# One device call for the engine on a real GPU (issue 6). Run from the repository root on the
# GPU machine, carrying the nvcc-built cubins in build/cubin (else msm.cu takes ~3 min of NVRTC):
#   python3 -c "from kernels.cuda_msm import build_cubin as b; b('msm.cu'); b('srs.cu')"
#   bash bench/engine_cuda_session.sh smoke     # gpu tests + one small engine run + summary
#   bash bench/engine_cuda_session.sh medium    # + a 2^20 run, aware, 2 workers (phase times)
#   bash bench/engine_cuda_session.sh phantom   # acceptance runs 1-3 (needs porep-32g to be
#                                               # feasible: see bench/engine_cuda_notes.md)
# Everything lands in $OUT (the device tool brings it back): logs, recordings, summaries.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/engine_cuda_out}
mkdir -p "$OUT"
MODE=${1:-smoke}
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv \
    | tee "$OUT/gpu.txt"
ls build/cubin 2>/dev/null
P="python3 -m provetop"
run_engine() {  # name, timeout (s), engine flags...
    local name=$1 limit=$2
    shift 2
    timeout "$limit" $P engine --backend cuda --exit-when-done --record "$OUT/$name.pvtrec" "$@" \
        2>&1 | tee "$OUT/$name.log" | tail -n 8
    $P summary "$OUT/$name.pvtrec" 2>&1 | tee "$OUT/$name.summary.txt" | tail -n 25
}
timeout 100 python3 -m pytest -q -m gpu tests/test_engine_cuda.py -p no:cacheprovider \
    2>&1 | tee "$OUT/pytest.txt" | tail -n 25
case "$MODE" in
smoke)
    run_engine smoke 40 --preset small --proofs 1
    ;;
medium)
    run_engine smoke 40 --preset small --proofs 1
    run_engine k20 85 --domain-log 20 --partitions 4 --proofs 1 --workers-per-device 2 \
        --allocator aware --verify sampled
    ;;
phantom)
    run_engine naive16 600 --preset porep-32g --proofs 2 --device-memory 16GiB \
        --workers-per-device 2 --allocator naive
    run_engine aware16 600 --preset porep-32g --proofs 2 --device-memory 16GiB \
        --workers-per-device 2 --allocator aware
    run_engine aware 600 --preset porep-32g --proofs 2 --workers-per-device 2 --allocator aware
    ;;
esac
