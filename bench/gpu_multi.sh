#!/usr/bin/env bash
# One device call on a host with several GPUs: every measurement of the multi-GPU target
# (docs/performance.md, "Several GPUs in one host"). Run from the repository root on the GPU
# machine, with the sm_90 cubins carried (`python3 -m provetop.kernels.cuda.prebuild --arch
# sm_90`, into kernels/cuda/cubin), e.g. on nvidia-h100-x8:
#   bash bench/gpu_multi.sh            # everything below, in order (default: all)
#   bash bench/gpu_multi.sh sweep      # the device-count sweep, uncapped
#   bash bench/gpu_multi.sh sweep16    # the same with every card capped at 16 GiB
#   bash bench/gpu_multi.sh views      # top at 160x48 and 80x24, bench tui, /metrics, trace
# Stages:
#   sweep    provetop bench pipeline --preset porep-32g --allocator aware
#            --workers-per-device 2 --device-counts 1,2,4,8 (counts past the host's GPUs are
#            rows saying so), PROOFS (2) proofs per device, with its table, JSON and SVG
#   sweep16  the same at --device-memory 16GiB (the memory plan per device)
#   top      `provetop top` in a pseudo-terminal for TOP_S (8) seconds at 160x48 and 80x24,
#            with every real GPU from NVML (the terminal's output is kept: replay it with
#            `cat`); exit code 124 is the timeout that ends it
#   tui      `provetop bench tui --devices N` (key latency, CPU; its NVML samples are
#            synthetic, one per GPU a second: the command has no real-NVML mode)
#   metrics  bench/gpu_metrics_check.py --devices 0..N-1: a cuda engine on every GPU with
#            /metrics, scraped once a second, the median scrape time and the NVML checks
#   trace    `provetop trace` of a CuPy program that allocates on every GPU through both
#            allocators (pools per device), with `provetop summary` of its recording
# Time (estimated, not measured: no multi-GPU host has run it yet): a sweep point is start-up
# (~15 s) plus PROOFS x 10 partitions x ~1.4 s over two workers; each sweep stops at
# SWEEP_LIMIT (240 s), each point at POINT_LIMIT (150 s), and the JSON and SVG are rewritten
# after every point, so a stopped sweep keeps what ran. If a call's 600 s are too few, run the
# stages in separate calls (sweep, sweep16, views).
# Everything goes to $W, packed into $OUT/gpu-multi.tgz; the short table is printed last.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD}
OUT=${OUT:-/tmp/gpu_multi_out}
MODE=${1:-all}
W=/tmp/gpu-multi
PROOFS=${PROOFS:-2}
COUNTS=${COUNTS:-1,2,4,8}
mkdir -p "$OUT" "$W"
export PROVETOP_COMMIT=$(bash bench/commit.sh)  # pass it in: the device copy's git may lag
P="python3 -m provetop"
SUMMARY="$W/summary.txt"
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
pack() {  # on any exit: whatever ran comes back
    free -g >"$W/free.txt" 2>&1
    tar czf "$OUT/gpu-multi.tgz" --exclude='*.bin' -C /tmp gpu-multi
    cp "$SUMMARY" "$OUT/summary.txt"
    echo "==== summary"
    cat "$SUMMARY"
}
trap pack EXIT
trap 'exit 143' TERM  # a timeout around the script still packs what it has
has() { [ "$MODE" = all ] || [ "$MODE" = "$1" ] || { [ "$MODE" = views ] && [ "$1" != sweep ] &&
    [ "$1" != sweep16 ]; }; }

nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
    --format=csv | tee "$W/gpu.txt"
nvidia-smi topo -m >"$W/topo.txt" 2>&1
N=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
DEVICES=$(seq -s, 0 $((N - 1)))
say "commit $PROVETOP_COMMIT, $(date -u +%FT%TZ), $N GPUs: $(nvidia-smi \
    --query-gpu=name,driver_version --format=csv,noheader | sort | uniq -c | tr -s ' ' | xargs)"
say "host: $(nproc) CPUs, $(free -g | awk '/Mem:/ {print $2}') GiB memory"
[ -d kernels/cuda/cubin ] || timeout 300 $P warmup >"$W/warmup.log" 2>&1

sweep() {  # name, extra bench pipeline flags...
    local name=$1
    shift
    say "== $name: provetop bench pipeline --device-counts $COUNTS $*"
    timeout "${SWEEP_LIMIT:-240}" $P bench pipeline --backend cuda --preset porep-32g \
        --allocator aware --workers-per-device 2 --proofs "$PROOFS" --device-counts "$COUNTS" \
        --point-timeout "${POINT_LIMIT:-150}" "$@" \
        --record "$W/$name.pvtrec" --out "$W/$name.json" --plot "$W/$name.svg" \
        >"$W/$name.log" 2>&1
    local rc=$?
    grep -v "^sweep " "$W/$name.log" | tail -n 14 | tee -a "$SUMMARY"
    say "$name rc=$rc"
    for rec in "$W/$name"-*gpu.pvtrec; do
        [ -f "$rec" ] && $P summary "$rec" >"${rec%.pvtrec}.summary.txt" 2>&1
    done
}
has sweep && sweep sweep
has sweep16 && sweep sweep16 --device-memory 16GiB

if has top; then
    for size in 160x48 80x24; do
        cols=${size%x*} rows=${size#*x}
        timeout -s INT "${TOP_S:-8}" script -qfec "stty cols $cols rows $rows; $P top" \
            "$W/top-$size.typescript" >/dev/null 2>&1
        say "top $size: rc=$? ($(wc -c <"$W/top-$size.typescript") bytes of terminal output)"
    done
fi

if has tui; then
    timeout 120 $P bench tui --devices "$N" --json >"$W/bench-tui.json" 2>"$W/bench-tui.log"
    say "bench tui --devices $N (synthetic NVML samples): rc=$?"
    python3 - "$W/bench-tui.json" <<'EOF' | tee -a "$SUMMARY"
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except (OSError, ValueError) as exc:
    print(f"  no result ({exc})")
    raise SystemExit
live = d.get("live") or {}
print(f"  key latency median {live.get('key_ms_median')} ms, p95 {live.get('key_ms_p95')} ms, "
      f"CPU {live.get('cpu_cores')} cores")
EOF
fi

if has metrics; then
    timeout 300 python3 bench/gpu_metrics_check.py --devices "$DEVICES" --out "$W/metrics" \
        >"$W/metrics.log" 2>&1
    say "/metrics with $N GPUs: rc=$?"
    grep -E "median scrape|FAILED" "$W/metrics.log" | sed 's/^/  /' | tee -a "$SUMMARY"
fi

if has trace; then
    export PROVETOP_INJECT_DIR=$W/lib
    timeout 300 python3 -m provetop.kernels.cuda.inject_build >"$W/inject.log" 2>&1
    say "injection library: rc=$?"
    cat >"$W/multi_cupy.py" <<'EOF'
"""Allocate on every visible GPU through both allocators (pools per device), a few rounds."""
import cupy

n = cupy.cuda.runtime.getDeviceCount()
for _round in range(5):
    held = []
    for d in range(n):
        with cupy.cuda.Device(d):
            pool = cupy.cuda.MemoryAsyncPool()
            a = pool.malloc(256 << 20)  # stream-ordered (cudaMallocAsync)
            b = cupy.cuda.runtime.malloc(128 << 20)  # plain cudaMalloc
            x = cupy.ones((1 << 24,), dtype=cupy.float32)
            float(x.sum())
            held.append((d, a, b, x))
    for d, _a, b, _x in held:
        with cupy.cuda.Device(d):
            cupy.cuda.runtime.free(b)
    held.clear()
    cupy.cuda.runtime.deviceSynchronize()
print(f"done on {n} GPUs")
EOF
    timeout 200 $P trace --no-listen --record "$W/trace-multi.pvtrec" -- \
        python3 "$W/multi_cupy.py" >"$W/trace-multi.stdout" 2>"$W/trace-multi.stderr"
    say "trace of a CuPy program on $N GPUs: rc=$? $(tail -n 1 "$W/trace-multi.stdout")"
    $P summary "$W/trace-multi.pvtrec" >"$W/trace-multi.summary.txt" 2>&1
    tail -n 12 "$W/trace-multi.summary.txt" | sed 's/^/  /' | tee -a "$SUMMARY"
fi
