#!/usr/bin/env bash
# One device call for the engine on a real GPU (the porep-32g acceptance runs: aware, aware16,
# naive16). Run from the repository root on the GPU machine, carrying the nvcc-built cubins in
# kernels/cuda/cubin (else msm.cu takes ~3 min of NVRTC at first use; `provetop warmup` does
# that once, up front):
#   python3 -m provetop.kernels.cuda.prebuild --arch sm_90
#   bash bench/gpu_engine.sh smoke     # gpu tests + selftest + one small engine run
#   bash bench/gpu_engine.sh probe     # gpu tests + 2^24 and one porep-32g proof
#   bash bench/gpu_engine.sh acceptance  # checks + acceptance runs aware16, naive16 (16 GiB)
#   bash bench/gpu_engine.sh final     # gpu tests + busy + acceptance, one call
#   bash bench/gpu_engine.sh checks    # aware with/without checks; aware16 again
#   bash bench/gpu_engine.sh busy      # aware (uncapped) beside it with --synthesis-ahead
#   bash bench/gpu_engine.sh uncapped  # gpu tests + acceptance run aware (no memory cap)
#   bash bench/gpu_engine.sh sortauto  # aware with the MSM sort auto and counting; aware16
#                                      # (TESTS=1: the engine's GPU tests first)
#   bash bench/gpu_engine.sh naive     # acceptance run naive16 (16 GiB, naive)
#   bash bench/gpu_engine.sh aware     # acceptance runs aware16 and aware (16 GiB / uncapped)
#   bash bench/gpu_engine.sh multi     # two GPUs (--devices 0,1), on nvidia-h200-x2
#   bash bench/gpu_engine.sh samples   # GPU tests, the MSM by the sort rule, aware, aware16, naive16
#   bash bench/gpu_engine.sh pinning   # registered large-page pools: GPU tests, aware
#   bash bench/gpu_engine.sh pin       # page-locking a witness pool, by method
#   bash bench/gpu_engine.sh plans     # the H step in one/two slots: GPU tests, aware at
#                                      # 12 and 8 GiB (memory plans two slots / one slot)
#   bash bench/gpu_engine.sh sweep     # porep-32g aware, 1 proof at 8..80 GiB and uncapped
#   bash bench/gpu_engine.sh stream    # streamed MSMs: GPU tests, the 2^27 host-point MSM,
#                                      # aware16 at the plan's chunk and at 2^23, naive16
#   bash bench/gpu_engine.sh aware16   # porep-32g aware at 16 GiB, 1 proof; no tests
#   bash bench/gpu_engine.sh workers   # GPU tests (engine, streamed H step), then aware16 with
#                                      # one worker, alone and with --synthesis-ahead
#   bash bench/gpu_engine.sh workers-small  # aware at 8 and 12 GiB (one-slot and two-slot plans)
#                                      # with one worker and with two; no tests
#   bash bench/gpu_engine.sh refresh   # the engine's GPU tests with today's default builds, then
#                                      # aware16, naive16 and aware (uncapped), 1 proof each
#   bash bench/gpu_engine.sh chunks    # the streamed chunk size with z read from host memory:
#                                      # the pass probed at 6 (z on the device), 8, 11, 16 Mi,
#                                      # then aware16 at 8 and 11 Mi, aware24 at the plan's
#   bash bench/gpu_engine.sh buffers   # the gaps of large chunks: the pass probed at 8, 11,
#                                      # 16 Mi with 4, 5, 6 buffers and leads 0 and 5, then
#                                      # aware16 at lead 0, at 8 Mi with 5 buffers, and aware24
#                                      # at 16 Mi with 6
#   bash bench/gpu_engine.sh handover2  # every partition offering its H block: the engine's
#                                      # GPU tests, aware16 twice, naive16
#   bash bench/gpu_engine.sh switch    # aware16 at switch intervals 0.5 (default), 0.1, 2 ms
# Each run is `provetop bench pipeline` (table + JSON) with its recording and `provetop
# summary`. Everything is written to $W and packed into $OUT/engine-$MODE.tgz (the device tool
# brings back at most 8 files); the tables are printed last.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD}
OUT=${OUT:-/tmp/engine_cuda_out}
MODE=${1:-smoke}
W=/tmp/engine-$MODE
mkdir -p "$OUT" "$W"
export PROVETOP_COMMIT=$(bash bench/commit.sh)  # pass it in: the device copy's git may lag
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv \
    | tee "$W/gpu.txt"
P="python3 -m provetop"
TIME=""
[ -x /usr/bin/time ] && TIME="/usr/bin/time -v"  # peak host memory, when the tool exists
TABLES="$W/tables.txt"
: >"$TABLES"
pack() {  # on any exit: whatever ran comes back
    free -g >>"$TABLES"
    tar czf "$OUT/engine-$MODE.tgz" -C /tmp "engine-$MODE"
    cp "$TABLES" "$OUT/tables-$MODE.txt"
    cat "$TABLES"
}
trap pack EXIT
bench() {  # name, timeout (s), bench pipeline flags...
    local name=$1 limit=$2
    shift 2
    echo "== $name: provetop bench pipeline $*" | tee -a "$TABLES"
    local run="$P"
    # SAMPLE=1: every thread's Python stack every 20 ms, to set beside the recording
    [ -n "${SAMPLE:-}" ] && run="python3 bench/stack_sampler.py $W/$name.stacks.gz 0.02 -m provetop"
    $TIME timeout "$limit" $run bench pipeline --backend cuda \
        --record "$W/$name.pvtrec" --out "$W/$name.json" "$@" >"$W/$name.log" 2>&1
    echo "rc=$?" >>"$W/$name.log"
    grep -v "^\s*$" "$W/$name.log" | grep -v "^\s[A-Z]" | head -n 12 | tee -a "$TABLES"
    grep -E "Maximum resident|Elapsed" "$W/$name.log" | tee -a "$TABLES"
    $P summary "$W/$name.pvtrec" >"$W/$name.summary.txt" 2>&1
    $P summary --json "$W/$name.pvtrec" >"$W/$name.summary.json" 2>&1
}
gpu_tests() {  # timeout (s), test files...
    local limit=$1 log
    shift
    log="$W/pytest-$(basename "$1" .py).txt"  # one log per call: a later call must not overwrite it
    timeout "$limit" python3 -m pytest -q -m gpu -p no:cacheprovider "$@" >"$log" 2>&1
    tail -n 15 "$log" | tee -a "$TABLES"
}
porep1() {  # name, timeout (s), device memory, more flags...: porep-32g aware, 1 proof, 2 workers
    local name=$1 limit=$2 mem=$3
    shift 3
    bench "$name" "$limit" --preset porep-32g --proofs 1 --device-memory "$mem" \
        --workers-per-device 2 --allocator aware "$@"
}
probe() {  # title, timeout (s), stream_probe.py flags...: the pass alone, rows kept in $W
    local title=$1 limit=$2
    shift 2
    echo "== stream probe, $title" | tee -a "$TABLES"
    timeout "$limit" python3 bench/stream_probe.py --log 27 --window 20 --repeats 3 \
        --out "$W/stream-probe.json" "$@" >"$W/stream-probe.txt" 2>&1
    echo "rc=$?" >>"$W/stream-probe.txt"
    tail -n 24 "$W/stream-probe.txt" | tee -a "$TABLES"
}
plans_of() {  # run names: each summary's memory plan line into the tables
    for r in "$@"; do
        grep -E "memory plan|pre-stage|OOMs" "$W/$r.summary.txt" | head -n 4 | sed "s/^/$r: /" \
            | tee -a "$TABLES"
    done
}
runs_16gib() {  # limits (s): the checks at 2^12, then acceptance runs aware16 and naive16
    timeout "$1" python3 bench/debug_checks.py 12 >"$W/debug_checks.txt" 2>&1
    tail -n 14 "$W/debug_checks.txt" | tee -a "$TABLES"
    bench aware16 "$2" --preset porep-32g --proofs 2 --device-memory 16GiB \
        --workers-per-device 2 --allocator aware
    bench naive16 "$3" --preset porep-32g --proofs 2 --device-memory 16GiB \
        --workers-per-device 2 --allocator naive
}
case "$MODE" in
acceptance)  # aware16 and naive16 inside one 10-minute call; aware is in busy
    # At 16 GiB all 41 GB of SRS are made into pinned host memory, and the partitions mostly
    # alternate on the fallback path (bench/notes/memory.md, "16 GiB at bd04ed3
    # and db942e6"): the aware16 run at 5535ebd (2026-11-29) did not finish in 200 s, so these two get most of the call.
    runs_16gib 40 290 230
    ;;
final)  # one call for the three acceptance runs: engine GPU tests, aware without and with the
    # look-ahead, the checks at 2^12, aware16 and naive16. The limits add up to < 600 s.
    gpu_tests 60 tests/engine/test_cuda.py
    bench aware 100 --preset porep-32g --proofs 2 --workers-per-device 2 --allocator aware
    bench ahead 105 --preset porep-32g --proofs 2 --workers-per-device 2 --allocator aware \
        --synthesis-ahead
    runs_16gib 30 140 140
    ;;
checks)  # the engine's GPU tests; the checks inside their region against no checks (aware),
    # then aware16 again (16 GiB: aware's cache reclaim, 5318edb)
    gpu_tests 120 tests/engine/test_cuda.py tests/kernels/test_cuda_check.py
    gpu_tests 90 tests/kernels/test_cuda_msm.py -k host_streamed  # the reused copy stream (kit)
    bench aware 100 --preset porep-32g --proofs 2 --workers-per-device 2 --allocator aware
    bench noverify 100 --preset porep-32g --proofs 2 --workers-per-device 2 --allocator aware \
        --verify never
    bench aware16 140 --preset porep-32g --proofs 2 --device-memory 16GiB \
        --workers-per-device 2 --allocator aware
    ;;
samples)  # after the sort rule (a30e5a8): its GPU tests and the engine's (these also compile
    # CuPy's synthesis kernels, ~30 s on a bare machine, before any timed run), the MSM at 2^24
    # and 2^27, then the three acceptance runs for recordings/samples; limits sum to < 570 s
    gpu_tests 50 tests/kernels/test_cuda_msm.py -k "sort or window or reference or host_streamed"
    gpu_tests 80 tests/engine/test_cuda.py
    timeout 50 python3 -m provetop.kernels.bench_msm --log-sizes 24,27 --repeats 5 --json \
        --results-dir "$W" --tag rule >"$W/msm-rule.log" 2>&1
    tail -n 4 "$W/msm-rule.log" | tee -a "$TABLES"
    bench aware 85 --preset porep-32g --proofs 2 --workers-per-device 2 --allocator aware
    bench aware16 150 --preset porep-32g --proofs 2 --device-memory 16GiB \
        --workers-per-device 2 --allocator aware
    bench naive16 150 --preset porep-32g --proofs 2 --device-memory 16GiB \
        --workers-per-device 2 --allocator naive
    ;;
pinning)  # the witness pools registered on large pages (kernels/cuda/host_pinned.py), and kept
    # until the run closes: its GPU tests and the engine's, then aware
    gpu_tests 110 tests/kernels/test_host_pinned.py tests/engine/test_cuda.py
    bench aware 90 --preset porep-32g --proofs 2 --workers-per-device 2 --allocator aware
    ;;
busy)  # the GPU-busy A/B in one call: the same run without and with the look-ahead (sampled)
    gpu_tests 150 tests/engine/test_cuda.py
    bench aware 200 --preset porep-32g --proofs 2 --workers-per-device 2 --allocator aware
    SAMPLE=1 bench ahead 260 --preset porep-32g --proofs 2 --workers-per-device 2 \
        --allocator aware --synthesis-ahead
    ;;
sortauto)  # the MSM sort auto (radix for dense entries from 2^22) against counting in the
    # engine: aware uncapped with each (resident MSMs take radix), aware16 (TESTS=1: the
    # engine's GPU tests first)
    [ "${TESTS:-0}" = 1 ] && gpu_tests 90 tests/engine/test_cuda.py
    bench aware 110 --preset porep-32g --proofs 2 --workers-per-device 2 --allocator aware
    PROVETOP_MSM_SORT=counting bench aware-counting 110 --preset porep-32g --proofs 2 \
        --workers-per-device 2 --allocator aware
    bench aware16 150 --preset porep-32g --proofs 2 --device-memory 16GiB \
        --workers-per-device 2 --allocator aware
    ;;
uncapped)
    gpu_tests 150 tests/engine/test_cuda.py tests/kernels/test_cuda_check.py
    bench aware 400 --preset porep-32g --proofs 2 --workers-per-device 2 --allocator aware
    ;;
smoke)
    gpu_tests 240 tests/engine/test_cuda.py tests/kernels/test_cuda_check.py tests/kernels/test_cuda_ntt.py
    timeout 120 $P selftest --backend cuda 2>&1 | tail -n 12 | tee -a "$TABLES"
    bench smoke 60 --preset small --proofs 1
    ;;
probe)
    gpu_tests 200 tests/engine/test_cuda.py tests/kernels/test_cuda_check.py
    bench k24 150 --preset porep-32g --domain-log 24 --proofs 1 --partitions 4 --verify always
    bench porep1 300 --preset porep-32g --proofs 1 --partitions 4
    ;;
naive)
    bench naive16 560 --preset porep-32g --proofs 2 --device-memory 16GiB \
        --workers-per-device 2 --allocator naive
    ;;
aware)
    bench aware16 280 --preset porep-32g --proofs 2 --device-memory 16GiB \
        --workers-per-device 2 --allocator aware
    bench aware 280 --preset porep-32g --proofs 2 --workers-per-device 2 --allocator aware
    ;;
pin)
    timeout 200 python3 bench/pin_probe.py --gib 1,4,17 2>&1 | tee -a "$TABLES"
    ;;
stream)  # the streamed MSMs at their defaults, all in the same call: the GPU tests, the 2^27
    # dense MSM from host points (chunks of 2^22), porep-32g aware at 16 GiB (the plan's chunk,
    # then chunks of 2^23) and naive16
    gpu_tests 100 tests/kernels/test_cuda_msm.py -k "host_streamed or window or selftest"
    gpu_tests 100 tests/engine/test_cuda.py
    mkdir -p "$W/msm"
    echo "== msm host points 2^27 dense, chunk 2^22" | tee -a "$TABLES"
    timeout 90 python3 -m provetop.kernels.bench_msm --log-sizes 27 --points host --chunk-log 22 \
        --repeats 3 --json --results-dir "$W/msm" --tag host-22 >"$W/msm-host-22.log" 2>&1
    echo "rc=$?" >>"$W/msm-host-22.log"
    tail -n 3 "$W/msm-host-22.log" | tee -a "$TABLES"
    bench aware16 100 --preset porep-32g --proofs 1 --device-memory 16GiB \
        --workers-per-device 2 --allocator aware
    PROVETOP_MSM_HOST_CHUNK_GROW=off PROVETOP_MSM_HOST_CHUNK=8388608 bench aware16-chunk23 100 \
        --preset porep-32g --proofs 1 --device-memory 16GiB --workers-per-device 2 \
        --allocator aware
    bench naive16 110 --preset porep-32g --proofs 1 --device-memory 16GiB \
        --workers-per-device 2 --allocator naive
    ;;
aware16)  # the 16 GiB point alone
    bench aware16 100 --preset porep-32g --proofs 1 --device-memory 16GiB \
        --workers-per-device 2 --allocator aware
    ;;
workers)  # one worker with deep pipelining against two sharing the mutex, at 16 GiB (the
    # two-worker run is the sweep's 16 GiB point)
    gpu_tests 240 tests/engine/test_cuda.py tests/kernels/test_cuda_h_streamed.py
    bench aware16-w1 100 --preset porep-32g --proofs 1 --device-memory 16GiB \
        --workers-per-device 1 --allocator aware
    bench aware16-w1-ahead 100 --preset porep-32g --proofs 1 --device-memory 16GiB \
        --workers-per-device 1 --allocator aware --synthesis-ahead
    ;;
refresh)  # the samples' runs again after a kernel change: the engine's GPU tests first (the
    # default builds), then the three runs recordings/samples keeps
    gpu_tests 260 tests/engine/test_cuda.py tests/kernels/test_cuda_h_streamed.py \
        tests/kernels/test_cuda_msm.py
    bench aware16 110 --preset porep-32g --proofs 1 --device-memory 16GiB \
        --workers-per-device 2 --allocator aware
    bench naive16 110 --preset porep-32g --proofs 1 --device-memory 16GiB \
        --workers-per-device 2 --allocator naive
    bench aware 80 --preset porep-32g --proofs 1 --workers-per-device 2 --allocator aware
    # where the 16 GiB pass's time goes, per query, at the plan's chunk and window
    # (PROBE_CHUNK=0: no probe)
    if [ "${PROBE_CHUNK:-6291456}" != 0 ]; then
        echo "== stream probe, chunk ${PROBE_CHUNK:-6291456}, H window 20" | tee -a "$TABLES"
        timeout 120 python3 bench/stream_probe.py --log 27 --chunk "${PROBE_CHUNK:-6291456}" \
            --window 20 --leads 5 --repeats 3 --out "$W/stream-probe.json" \
            >"$W/stream-probe.txt" 2>&1
        echo "rc=$?" >>"$W/stream-probe.txt"
        tail -n 8 "$W/stream-probe.txt" | tee -a "$TABLES"
    fi
    ;;
chunks)  # why 16 Mi chunks lost at 24 GiB (5a95826 sweep) while 11 Mi won at 16 GiB: the pass
    # alone at each chunk (per-query sums, gaps, before/after), then the engine at 16 GiB with 8
    # and 11 Mi chunks and at 24 GiB with the plan's (capped) chunk, same call
    probe "chunks 6/8/11/16 Mi" 200 --modes prelude,host \
        --chunks 6291456,8388608,11534336,16777216 --leads 5
    PROVETOP_MSM_HOST_CHUNK_GROW=off PROVETOP_MSM_HOST_CHUNK=8388608 porep1 aware16-8m 90 16GiB
    porep1 aware16 90 16GiB
    porep1 aware24 90 24GiB
    plans_of aware16-8m aware16 aware24
    ;;
buffers)  # the gaps between large chunks (3b8b310 probe: 97 ms at 11 Mi, 167 at 16 Mi, against
    # 50 at 6 Mi): the copy stream runs only three chunks ahead, and the lead of five H chunks
    # (made for a z copy the host-scalar pass no longer makes) leaves fewer H chunks to hide
    # the copy-bound chunks under. Same call: the pass alone, then the engine
    probe "chunks 8/11/16 Mi, buffers 4/5/6, leads 0/5" 240 --modes host \
        --chunks 8388608,11534336,16777216 --buffers 4,5,6 --leads 0,5
    PROVETOP_MSM_HOST_LEAD=0 porep1 aware16-lead0 90 16GiB
    PROVETOP_MSM_HOST_CHUNK_GROW=off PROVETOP_MSM_HOST_CHUNK=8388608 PROVETOP_MSM_HOST_BUFFERS=5 \
        porep1 aware16-8m-b5 90 16GiB
    PROVETOP_MSM_HOST_CHUNK_GROW=off PROVETOP_MSM_HOST_CHUNK=16777216 PROVETOP_MSM_HOST_BUFFERS=6 \
        porep1 aware24-16m-b6 90 24GiB
    plans_of aware16-lead0 aware16-8m-b5 aware24-16m-b6
    ;;
handover2)  # every partition offering its H block (a checked one sums H before its pass):
    # the engine's GPU tests, aware16 twice, naive16 (its OOMs and recoveries unchanged)
    gpu_tests 150 tests/engine/test_cuda.py
    porep1 aware16-a 100 16GiB
    porep1 aware16-b 100 16GiB
    bench naive16 150 --preset porep-32g --proofs 1 --device-memory 16GiB \
        --workers-per-device 2 --allocator naive
    plans_of aware16-a aware16-b naive16
    ;;
switch)  # the interpreter's thread switch interval (PROVETOP_SWITCH_INTERVAL) at 16 GiB: is
    # what is left above the pass and the H step (fallback_upload 7-17 ms, the H step 313-323
    # against 301 with no neighbour) the GIL between the two workers' launches?
    porep1 aware16-sw0005 100 16GiB
    PROVETOP_SWITCH_INTERVAL=0.0001 porep1 aware16-sw0001 100 16GiB
    PROVETOP_SWITCH_INTERVAL=0.002 porep1 aware16-sw002 100 16GiB
    ;;
workers-small)  # one worker against two where the memory plan streams the H step (8 GiB: one
    # slot, 12 GiB: two slots); the 16 GiB pair is the workers mode's (d34abfe)
    for mem in 8 12; do
        for w in 1 2; do
            bench "aware$mem-w$w" 110 --preset porep-32g --proofs 1 --device-memory "${mem}GiB" \
                --workers-per-device "$w" --allocator aware
        done
    done
    ;;
sweep)  # the device-memory curve in one command: porep-32g, aware, 1 proof per point, each
    # point a fresh process (engine/bench/sweep.py). Time (H200, 2026-12-02, one process per
    # run, 1 proof): 24 GiB 84.6 s, 40 GiB 56.5 s, 80 GiB 41.1 s, uncapped ~28 s; 16 GiB ~72 s
    # (from its 2-proof runs); 8 and 12 GiB lose every partition and were never timed: each
    # of their 20 attempts may hold the mutex 3.5 s in the fallback's pauses, ~100 s a point.
    # A point stops at 110 s (a row says so) and the whole sweep at 530 s; the JSON and the
    # SVG are rewritten after every point, so a stopped sweep keeps the points that ran.
    echo "== sweep: provetop bench pipeline --device-memory 8GiB,...,uncapped" | tee -a "$TABLES"
    timeout "${SWEEP_LIMIT:-530}" $P bench pipeline --backend cuda --preset porep-32g \
        --allocator aware --workers-per-device 2 --proofs 1 \
        --device-memory 8GiB,12GiB,16GiB,24GiB,40GiB,80GiB,uncapped \
        --point-timeout "${POINT_LIMIT:-110}" \
        --record "$W/sweep.pvtrec" --out "$W/sweep.json" --plot "$W/sweep.svg" \
        >"$W/sweep.txt" 2>"$W/sweep.log"
    echo "rc=$?" >>"$W/sweep.log"
    cat "$W/sweep.txt" "$W/sweep.log" | tee -a "$TABLES"
    for f in "$W"/sweep-*.pvtrec; do
        [ -e "$f" ] && $P summary "$f" >"${f%.pvtrec}.summary.txt" 2>&1
    done
    cp "$W/sweep.txt" "$OUT/sweep-table.txt"
    cp "$W/sweep.json" "$W/sweep.svg" "$OUT/" 2>/dev/null
    ;;
multi)  # on nvidia-h200-x2: the 2-GPU test, then a 2-GPU run
    gpu_tests 120 tests/engine/test_cuda.py -k two_devices  # 45 s was too short
    # sampled: the first msm_h on each device took 8.4-11.2 s at c3b2654 (single GPU: 2.8 s)
    SAMPLE=1 bench multi 150 --preset porep-32g --proofs 2 --devices 0,1 --workers-per-device 2
    ;;
plans)  # memory plans: the streamed H step's GPU tests, then porep-32g aware at 12 and 8 GiB
    gpu_tests 150 tests/kernels/test_cuda_h_streamed.py tests/engine/test_cuda.py
    bench aware12 150 --preset porep-32g --proofs 1 --device-memory 12GiB \
        --workers-per-device 2 --allocator aware
    bench aware8 170 --preset porep-32g --proofs 1 --device-memory 8GiB \
        --workers-per-device 2 --allocator aware
    for r in aware12 aware8; do grep -E "plan|lost|pre-stage|OOM" "$W/$r.summary.txt" | head -n 8 \
        | tee -a "$TABLES"; done
    ;;
esac
