#!/usr/bin/env bash
# One device call for the engine on a real GPU (the porep-32g acceptance runs: aware, aware16,
# naive16). Run from the repository root on the GPU machine, carrying the nvcc-built cubins in
# kernels/cuda/cubin (else msm.cu takes ~3 min of NVRTC at first use; `provetop warmup` does
# that once, up front):
#   python3 -m kernels.cuda.prebuild --arch sm_90
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
#   bash bench/gpu_engine.sh trim      # the trim-stall A/B (PROVETOP_SYNC_SCOPE)
#   bash bench/gpu_engine.sh multi     # two GPUs (--devices 0,1), on nvidia-h200-x2
#   bash bench/gpu_engine.sh sort      # sort per window group: MSM A/B, then aware A/B
#   bash bench/gpu_engine.sh samples   # GPU tests, the MSM by the sort rule, aware, aware16, naive16
#   bash bench/gpu_engine.sh pinning   # registered large-page pools: GPU tests, aware
#   bash bench/gpu_engine.sh pin       # page-locking a witness pool, by method
#   bash bench/gpu_engine.sh plans     # the H step in one/two slots: GPU tests, aware at
#                                      # 12 and 8 GiB (memory plans two slots / one slot)
#   bash bench/gpu_engine.sh sweep     # porep-32g aware, 1 proof at 8..80 GiB and uncapped
#   bash bench/gpu_engine.sh stream    # streamed MSMs: buckets per query / per chunk, one
#                                      # interleaved pass / in turn: GPU tests, 2^27 host-point
#                                      # MSM A/B, aware16 three ways, naive16
#   bash bench/gpu_engine.sh aware16   # porep-32g aware at 16 GiB: one interleaved pass, then
#                                      # in turn (PROVETOP_MSM_HOST_INTERLEAVE=off); no tests
#   bash bench/gpu_engine.sh overlap   # b and c copied under the H step (PROVETOP_ABC_OVERLAP):
#                                      # its GPU tests, then aware16 off / on, aware at 24 GiB on
#   bash bench/gpu_engine.sh workers   # GPU tests (engine, streamed H step), then aware16 with
#                                      # one worker, alone and with --synthesis-ahead
#   bash bench/gpu_engine.sh workers-small  # aware at 8 and 12 GiB (one-slot and two-slot plans)
#                                      # with one worker and with two; no tests
#   bash bench/gpu_engine.sh refresh   # the engine's GPU tests with today's default builds, then
#                                      # aware16, naive16 and aware (uncapped), 1 proof each
#   bash bench/gpu_engine.sh hostz     # the one pass reading the aux scalars from host memory
#                                      # per chunk (PROVETOP_MSM_PASS_SCALARS=host) against z
#                                      # copied up whole (=device): GPU tests, aware16 both ways,
#                                      # aware12 and aware8 with host
#   bash bench/gpu_engine.sh chunks    # the streamed chunk size with z read from host memory:
#                                      # the pass probed at 6 (z on the device), 8, 11, 16 Mi,
#                                      # then aware16 at 8 and 11 Mi, aware24 at the plan's
#   bash bench/gpu_engine.sh buffers   # the gaps of large chunks: the pass probed at 8, 11,
#                                      # 16 Mi with 4, 5, 6 buffers and leads 0 and 5, then
#                                      # aware16 at lead 0, at 8 Mi with 5 buffers, and aware24
#                                      # at 16 Mi with 6
#   bash bench/gpu_engine.sh handover  # a copied into the running pass's H block: its GPU
#                                      # tests, aware16 with PROVETOP_A_HANDOVER off and on,
#                                      # aware24 on
#   bash bench/gpu_engine.sh handover2  # the engine's GPU tests, aware16 twice, naive16
#   bash bench/gpu_engine.sh switch    # aware16 at switch intervals 0.5 (default), 0.1, 2 ms
#   bash bench/gpu_engine.sh fence     # the neighbour's synthesis behind the H step
#                                      # (PROVETOP_SYNTHESIS_AFTER_H=done, then named `on`): the
#                                      # engine's GPU tests, host_costs, aware16 on / off
#                                      # alternated twice, then on with the compute streams first
#   bash bench/gpu_engine.sh queued    # aware16 with PROVETOP_SYNTHESIS_AFTER_H=queued and off,
#                                      # alternated twice
#   bash bench/gpu_engine.sh kept      # streamed chunks summed straight into the kept buckets
#                                      # (PROVETOP_MSM_HOST_BUCKETS=query) against the merge
#                                      # kernel (=query-merge): GPU tests, the 2^27 host-point
#                                      # MSM, aware16 three ways (merge, kept, kept in 6 Mi chunks)
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
sort)  # the counting sort per group of windows (PROVETOP_MSM_SORT_GROUP, bench/notes/msm.md,
    # a30e5a8): its GPU test, the 2^24 / 2^27 MSM for groups 0 (one launch), 1, 2, 3 with the
    # stage breakdown, then aware (uncapped) for groups 0, 1 and 2 in the same call
    gpu_tests 90 tests/kernels/test_cuda_msm.py -k "window_groups or window_sizes or host_streamed"
    for g in 0 1 2 3; do
        echo "== msm sort group $g" | tee -a "$TABLES"
        PROVETOP_MSM_SORT_GROUP=$g timeout 60 python3 -m kernels.bench_msm --log-sizes 24,27 \
            --repeats 5 --json --results-dir "$W" --tag "group$g" >"$W/msm-group$g.log" 2>&1
        grep -E '^\{' "$W/msm-group$g.log" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    st = " ".join(f"{k} {v:.1f}" for k, v in (r.get("breakdown_ms") or {}).items())
    print(f"2^{r[\"log_size\"]} median {r[\"median_ms\"]:.1f} ms  {st}")' | tee -a "$TABLES"
    done
    for g in 0 1 2; do
        PROVETOP_MSM_SORT_GROUP=$g bench "aware-group$g" 90 --preset porep-32g --proofs 2 \
            --workers-per-device 2 --allocator aware
    done
    ;;
samples)  # after the sort rule (a30e5a8): its GPU tests and the engine's (these also compile
    # CuPy's synthesis kernels, ~30 s on a bare machine, before any timed run), the MSM at 2^24
    # and 2^27, then the three acceptance runs for recordings/samples; limits sum to < 570 s
    gpu_tests 50 tests/kernels/test_cuda_msm.py -k "sort or window or reference or host_streamed"
    gpu_tests 80 tests/engine/test_cuda.py
    timeout 50 python3 -m kernels.bench_msm --log-sizes 24,27 --repeats 5 --json \
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
trim)
    bench trim-worker 280 --preset porep-32g --proofs 1 --device-memory 16GiB \
        --workers-per-device 2 --allocator aware
    PROVETOP_SYNC_SCOPE=device bench trim-device 280 --preset porep-32g --proofs 1 \
        --device-memory 16GiB --workers-per-device 2 --allocator aware
    ;;
pin)
    timeout 200 python3 bench/pin_probe.py --gib 1,4,17 2>&1 | tee -a "$TABLES"
    ;;
stream)  # the streamed MSMs: one bucket array per query (PROVETOP_MSM_HOST_BUCKETS=query, the
    # default) against a bucket reduction per chunk (=chunk); the four queries in one
    # interleaved pass (PROVETOP_MSM_HOST_INTERLEAVE=on, the default where the plan has room)
    # against one after the other; all in the same call: the GPU tests, the 2^27 dense MSM from
    # host points, porep-32g aware at 16 GiB (interleaved, not, chunks of 2^23) and naive16
    gpu_tests 100 tests/kernels/test_cuda_msm.py -k "host_streamed or window or selftest"
    gpu_tests 100 tests/engine/test_cuda.py
    mkdir -p "$W/msm"
    for v in query-22 chunk-22; do
        echo "== msm host points 2^27 dense, buckets ${v%-*}, chunk 2^${v#*-}" | tee -a "$TABLES"
        PROVETOP_MSM_HOST_BUCKETS=${v%-*} timeout 90 python3 -m kernels.bench_msm \
            --log-sizes 27 --points host --chunk-log "${v#*-}" --repeats 3 --json \
            --results-dir "$W/msm" --tag "host-$v" >"$W/msm-$v.log" 2>&1
        echo "rc=$?" >>"$W/msm-$v.log"
        tail -n 3 "$W/msm-$v.log" | tee -a "$TABLES"
    done
    bench aware16 100 --preset porep-32g --proofs 1 --device-memory 16GiB \
        --workers-per-device 2 --allocator aware
    PROVETOP_MSM_HOST_INTERLEAVE=off bench aware16-inturn 100 --preset porep-32g --proofs 1 \
        --device-memory 16GiB --workers-per-device 2 --allocator aware
    PROVETOP_MSM_HOST_CHUNK=8388608 bench aware16-chunk23 100 --preset porep-32g --proofs 1 \
        --device-memory 16GiB --workers-per-device 2 --allocator aware
    bench naive16 110 --preset porep-32g --proofs 1 --device-memory 16GiB \
        --workers-per-device 2 --allocator naive
    ;;
aware16)  # the 16 GiB point alone, the one pass against the queries in turn, same call
    bench aware16 100 --preset porep-32g --proofs 1 --device-memory 16GiB \
        --workers-per-device 2 --allocator aware
    PROVETOP_MSM_HOST_INTERLEAVE=off bench aware16-inturn 100 --preset porep-32g --proofs 1 \
        --device-memory 16GiB --workers-per-device 2 --allocator aware
    ;;
overlap)  # the fallback's b and c copies under the H step's transforms of a, A/B at 16 GiB
    gpu_tests 150 tests/engine/test_cuda.py -k "h_step or fallback_path or one_pass"
    gpu_tests 100 tests/kernels/test_cuda_ntt.py -k "h_step"
    PROVETOP_ABC_OVERLAP=off bench aware16-off 100 --preset porep-32g --proofs 1 \
        --device-memory 16GiB --workers-per-device 2 --allocator aware
    PROVETOP_ABC_OVERLAP=on bench aware16-on 100 --preset porep-32g --proofs 1 \
        --device-memory 16GiB --workers-per-device 2 --allocator aware
    PROVETOP_ABC_OVERLAP=on bench aware24-on 100 --preset porep-32g --proofs 1 \
        --device-memory 24GiB --workers-per-device 2 --allocator aware
    ;;
workers)  # one worker with deep pipelining against two sharing the mutex, at 16 GiB (the
    # two-worker run is the sweep's and the overlap call's 16 GiB point)
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
kept)  # a streamed MSM's later chunks summed straight into the kept buckets (query, the default)
    # against a second array and the merge kernel (query-merge), all in one call: the streamed
    # MSMs' GPU tests, the 2^27 dense MSM from host points (chunks of 2^22, and 6 Mi = 6291456,
    # the largest chunk whose one pass fits the 16 GiB plan), then porep-32g aware at 16 GiB
    gpu_tests 90 tests/kernels/test_cuda_msm.py -k "host_streamed"
    gpu_tests 120 tests/engine/test_cuda.py -k "one_pass or streamed or fallback"
    mkdir -p "$W/msm"
    for v in query-merge:4194304 query:4194304 query:6291456; do
        tag="${v%:*}-${v#*:}"
        echo "== msm host points 2^27 dense, buckets ${v%:*}, chunk ${v#*:}" | tee -a "$TABLES"
        PROVETOP_MSM_HOST_BUCKETS=${v%:*} timeout 60 python3 -m kernels.bench_msm \
            --log-sizes 27 --points host --chunk "${v#*:}" --repeats 3 --json \
            --results-dir "$W/msm" --tag "host-$tag" >"$W/msm-$tag.log" 2>&1
        echo "rc=$?" >>"$W/msm-$tag.log"
        tail -n 3 "$W/msm-$tag.log" | tee -a "$TABLES"
    done
    PROVETOP_MSM_HOST_BUCKETS=query-merge bench aware16-merge 90 --preset porep-32g \
        --proofs 1 --device-memory 16GiB --workers-per-device 2 --allocator aware
    PROVETOP_MSM_HOST_BUCKETS=query bench aware16-kept 90 --preset porep-32g \
        --proofs 1 --device-memory 16GiB --workers-per-device 2 --allocator aware
    PROVETOP_MSM_HOST_BUCKETS=query PROVETOP_MSM_HOST_CHUNK=6291456 bench aware16-kept6m 90 \
        --preset porep-32g --proofs 1 --device-memory 16GiB --workers-per-device 2 \
        --allocator aware
    for r in aware16-merge aware16-kept aware16-kept6m; do
        grep -E "plan|gpu_total|msm_h|pass|lost|OOM" "$W/$r.summary.txt" | head -n 12 \
            | sed "s/^/$r: /" | tee -a "$TABLES"
    done
    ;;
hostz)  # the aux scalars of the one pass: copied up whole before it (device) or sent up with
    # each chunk from the witness's pinned pool (host), which frees 4.2 GB for larger chunks
    # (16 GiB) and lets 12 and 8 GiB run the one pass at a larger window; same call
    gpu_tests 100 tests/kernels/test_cuda_msm.py -k "host_scalars or host_streamed_queries"
    gpu_tests 100 tests/engine/test_cuda.py -k "one_pass or streamed or fallback"
    PROVETOP_MSM_PASS_SCALARS=device porep1 aware16-device 100 16GiB
    PROVETOP_MSM_PASS_SCALARS=host porep1 aware16-host 100 16GiB
    PROVETOP_MSM_PASS_SCALARS=host porep1 aware12-host 100 12GiB
    PROVETOP_MSM_PASS_SCALARS=host porep1 aware8-host 110 8GiB
    plans_of aware16-device aware16-host aware12-host aware8-host
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
handover)  # the next partition's a copied into H's block as the pass finishes with its rows
    # (PROVETOP_A_HANDOVER, engine/memory/handover.py): its GPU tests, then aware16 off / on, aware24 on
    gpu_tests 240 tests/engine/test_cuda.py -k "rows_released or hands_h_blocks or h_step_waits or one_pass"
    PROVETOP_A_HANDOVER=off porep1 aware16-off 100 16GiB
    porep1 aware16-on 100 16GiB
    porep1 aware24-on 100 24GiB
    plans_of aware16-off aware16-on aware24-on
    for r in aware16-off aware16-on aware24-on; do
        python3 -c "
import sys
from recordings.reader import open_recording
ev = open_recording(sys.argv[1]).events
got = [e for e in ev if e['k'] == 'alloc' and e.get('site') == 'handover']
print(sys.argv[2] + ': handovers', len(got), '|', got[-1]['reason'] if got else '-')
" "$W/$r.pvtrec" "$r" 2>&1 | tail -n 2 | tee -a "$TABLES"
    done
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
queued)  # a synthesis that starts while the next region is due waits on the host until that
    # region's H step is queued (PROVETOP_SYNTHESIS_AFTER_H=queued), alternated with off
    for r in a b; do
        PROVETOP_SYNTHESIS_AFTER_H=queued porep1 aware16-queued-$r 100 16GiB
        PROVETOP_SYNTHESIS_AFTER_H=off porep1 aware16-off-$r 100 16GiB
    done
    for r in aware16-queued-a aware16-off-a aware16-queued-b aware16-off-b; do
        python3 bench/partition_table.py "$W/$r.pvtrec" "$r" 2>&1 | tail -n 14 | tee -a "$TABLES"
    done
    ;;
fence)  # a synthesis waits on the GPU for the running region's H step (engine/memory/h_step_fence.py)
    # and runs beside the MSM pass instead: on / off alternated, so drift shows in both
    gpu_tests 240 tests/engine/test_cuda.py
    echo "== host time of the fallback upload's calls (bench/host_costs.py)" | tee -a "$TABLES"
    timeout 120 python3 bench/host_costs.py 2>&1 | tail -n 12 | tee -a "$TABLES"
    export PROVETOP_SYNTHESIS_AFTER_H=done  # the setting was on/off when this mode was measured
    porep1 aware16-on-a 100 16GiB
    PROVETOP_SYNTHESIS_AFTER_H=off porep1 aware16-off-a 100 16GiB
    porep1 aware16-on-b 100 16GiB
    PROVETOP_SYNTHESIS_AFTER_H=off porep1 aware16-off-b 100 16GiB
    PROVETOP_PRIORITY_TO=compute porep1 aware16-on-compute 100 16GiB
    plans_of aware16-on-a aware16-off-a
    for r in aware16-on-a aware16-off-a aware16-on-b aware16-off-b aware16-on-compute; do
        python3 bench/partition_table.py "$W/$r.pvtrec" "$r" 2>&1 | tail -n 14 | tee -a "$TABLES"
    done
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
prio)  # the stream-priority A/B (measured at c3b2654, 2026-11-29)
    bench prio-synth 62 --preset porep-32g --proofs 1 --workers-per-device 2 --allocator aware
    PROVETOP_PRIORITY_TO=compute bench prio-compute 62 --preset porep-32g --proofs 1 \
        --workers-per-device 2 --allocator aware
    ;;
esac
