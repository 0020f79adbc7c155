#!/usr/bin/env bash
# One device call that checks the CUDA side after a change of structure: how long a bare GPU
# machine takes to its first self-test, the GPU tests, and the kernel benchmarks to compare
# with the published figures. Run from the repository root on the GPU machine:
#   bash bench/gpu_check.sh coldstart  # first selftest with the carried cubins; then, with
#                                      # none, `provetop warmup` (nvcc) and selftest; GPU tests
#   bash bench/gpu_check.sh bench      # bench ntt and msm (2^20, 2^24, 2^27), the engine's
#                                      # acceptance run aware (porep-32g, uncapped)
#   bash bench/gpu_check.sh metrics    # NVML samples and /metrics of a running cuda engine
#                                      # (bench/gpu_metrics_check.py); porep-32g, aware, one
#                                      # proof at 24 and 40 GiB (points of the memory curve)
#   bash bench/gpu_check.sh overhead   # GPU tests; porep-32g aware at 80 GiB (1 proof); the
#                                      # partition times with /metrics scraped every second
#   bash bench/gpu_check.sh alltests   # the self-test, then every GPU test of the repository
#                                      # (kernels, engine, sources), with the carried cubins
# Carry the sm_90 cubins built here (`python3 -m provetop.kernels.cuda.prebuild --arch sm_90`, into
# kernels/cuda/cubin) for the first step of coldstart. Logs and JSON go to $OUT (at most 8
# files come back, so they are packed into one tgz); the short table is printed last.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD}
OUT=${OUT:-/tmp/gpu_check_out}
MODE=${1:-coldstart}
W=/tmp/gpu-check-$MODE
mkdir -p "$OUT" "$W"
export PROVETOP_COMMIT=$(bash bench/commit.sh)  # pass it in: the device copy's git may lag
P="python3 -m provetop"
SUMMARY="$W/summary.txt"
: >"$SUMMARY"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used,memory.total \
    --format=csv | tee "$W/gpu.txt"
echo "commit $PROVETOP_COMMIT, $(date -u +%FT%TZ)" | tee -a "$SUMMARY"
pack() { tar czf "$OUT/gpu-check-$MODE.tgz" -C /tmp "gpu-check-$MODE"; }
trap pack EXIT

timed() {  # timed LABEL LIMIT_S COMMAND...: wall seconds and exit code into the summary
    local label=$1 limit=$2
    shift 2
    local t0 t1 rc
    t0=$(date +%s.%N)
    timeout "$limit" "$@" >"$W/$label.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    printf "%-34s %8s s  rc=%s\n" "$label" "$(python3 -c "print(round($t1 - $t0, 1))")" "$rc" | tee -a "$SUMMARY"
    tail -n 12 "$W/$label.log"
}

if [ "$MODE" = "coldstart" ]; then
    ls kernels/cuda/cubin/* 2>/dev/null | tee "$W/carried-cubins.txt"
    # 1. a bare machine with cubins prebuilt where nvcc was (a wheel built after a prebuild)
    export CUPY_CACHE_DIR=/tmp/cupy-cache-1
    timed selftest-prebuilt-cubins 300 $P selftest --backend cuda
    # 2. no cubins at all, nvcc on this machine: the explicit warmup, then the self-test
    export CUPY_CACHE_DIR=/tmp/cupy-cache-2 XDG_CACHE_HOME=/tmp/xdg-2
    mv kernels/cuda/cubin /tmp/carried-cubin 2>/dev/null
    timed warmup-nvcc 400 $P warmup --backend cuda
    timed selftest-after-warmup 200 $P selftest --backend cuda
    timed warmup-again 100 $P warmup --backend cuda
    mv /tmp/carried-cubin kernels/cuda/cubin 2>/dev/null
    # 3. every GPU test (kernels and engine)
    timed gpu-tests 420 python3 -m pytest -q -m gpu tests/kernels tests/engine -p no:cacheprovider
    grep -E "passed|failed" "$W/gpu-tests.log" | tail -n 2
elif [ "$MODE" = "bench" ]; then
    timed bench-ntt 150 $P bench ntt --log-sizes 20,24,27 --json --results-dir "$W"
    timed bench-msm 200 $P bench msm --log-sizes 20,24,27 --check --json --results-dir "$W"
    timed pipeline-aware 300 $P bench pipeline --preset porep-32g --proofs 2 \
        --workers-per-device 2 --allocator aware --json --out "$W/pipeline-aware.json" \
        --record "$W/pipeline-aware.pvtrec"
    grep -h -A9 "^NTT\|^MSM" "$W"/bench-*.log | tail -n 40
    tail -n 25 "$W/pipeline-aware.log"
elif [ "$MODE" = "metrics" ]; then
    timed gpu-metrics 200 python3 bench/gpu_metrics_check.py --out "$W/metrics"
    for mem in 24GiB 40GiB; do
        timed "pipeline-aware-$mem" 200 $P bench pipeline --preset porep-32g --proofs 1 \
            --workers-per-device 2 --allocator aware --device-memory "$mem" --json \
            --out "$W/pipeline-aware-$mem.json"
    done
    for mem in 24GiB 40GiB; do
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], 'gpu_total', \
round(d['gpu_total_ms_median'] or 0), 'ms, s/proof', round(d['s_per_proof'] or 0, 1), 'lost', \
d['partitions_lost'], 'ooms', d['ooms'], 'prestage', d['prestage'], 'busy', \
round(d['gpu_busy_steady'] or 0, 3))" "$W/pipeline-aware-$mem.json" "$mem" || true
    done
elif [ "$MODE" = "overhead" ]; then
    timed gpu-tests 200 python3 -m pytest -q -m gpu tests/kernels tests/engine -p no:cacheprovider
    grep -E "passed|failed" "$W/gpu-tests.log" | tail -n 2
    timed pipeline-aware-80GiB 150 $P bench pipeline --preset porep-32g --proofs 1 \
        --workers-per-device 2 --allocator aware --device-memory 80GiB --json \
        --out "$W/pipeline-aware-80GiB.json"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('80GiB gpu_total', \
round(d['gpu_total_ms_median'] or 0), 'ms, s/proof', round(d['s_per_proof'] or 0, 1), 'lost', \
d['partitions_lost'], 'ooms', d['ooms'], 'prestage', d['prestage'], 'phases', \
{k: round(v) for k, v in d['phase_ms_median'].items() if v})" "$W/pipeline-aware-80GiB.json" || true
    timed metrics-overhead 260 python3 bench/metrics_overhead.py --out "$W/overhead"
    tail -n 4 "$W/metrics-overhead.log"
elif [ "$MODE" = "alltests" ]; then
    timed selftest 200 $P selftest --backend cuda
    timed gpu-tests-all 480 python3 -m pytest -q -m gpu tests/kernels tests/engine tests/sources \
        --ignore tests/sources/test_client_security.py -p no:cacheprovider -rs  # Textual:
    # tests/tui and that file need it, and the GPU image lacks it
    grep -E "^SKIPPED|passed|failed|error" "$W/gpu-tests-all.log" | tail -n 12
fi
echo "---- summary"
cat "$SUMMARY"
