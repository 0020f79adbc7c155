#!/usr/bin/env bash
# One device call for the injection library of `provetop trace`: build it on the GPU machine
# (python -m provetop.kernels.cuda.inject_build), run its tests (the record decoder, the build and the
# stand-in driver run, then the GPU tests: CuPy programs traced, the phantom in one and in two
# processes, a killed program), and measure what tracing costs a program:
#   - CuPy: a loop of cudaMallocAsync/cudaFreeAsync pairs, a loop of cudaMalloc/cudaFree
#     pairs (cupy.cuda.runtime), and a small workload (random matrices, products, sums through
#     MemoryAsyncPool: allocation at the rate a real CuPy program has it);
#   - C++ (nvcc, static cudart): the same two pairs with nothing else in the loop, so the
#     library's own cost per call shows undiluted.
# Each figure is the median of 5 runs per condition, traced and untraced runs interleaved,
# every run a fresh process (injection is per process), in this one call.
# Run from the repository root on the GPU machine:  bash bench/gpu_trace.sh
# Logs go to $OUT (packed into one tgz; the summary beside it); the short table is printed last.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD}
OUT=${OUT:-/tmp/gpu_trace_out}
W=/tmp/gpu-trace
RUNS=5
mkdir -p "$OUT" "$W"
export PROVETOP_COMMIT=$(bash bench/commit.sh)
SUMMARY="$W/summary.txt"
: >"$SUMMARY"
pack() {
    tar czf "$OUT/gpu-trace.tgz" --exclude='*.bin' -C /tmp gpu-trace
    cp "$SUMMARY" "$OUT/summary.txt"
}
trap pack EXIT
trap 'exit 143' TERM  # a timeout around the script still packs what it has
say() { echo "$*" | tee -a "$SUMMARY"; }

say "commit $PROVETOP_COMMIT, $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader |
    tee "$W/gpu.txt" | sed 's/^/gpu: /' | tee -a "$SUMMARY"
python3 -m pip show nvidia-cuda-cupti 2>/dev/null | grep -E '^(Name|Version|Location)' |
    tee "$W/cupti.txt"
python3 -c "import cupy as c; print('cupy', c.__version__, c.cuda.runtime.runtimeGetVersion())" |
    tee -a "$SUMMARY"
nvcc --version | tail -1 | tee -a "$SUMMARY"

# 1. the library
export PROVETOP_INJECT_DIR=$W/lib
LIB=$(timeout 300 python3 -m provetop.kernels.cuda.inject_build -v 2>"$W/build.log")
BUILD_RC=$?
cat "$W/build.log" | tee -a "$SUMMARY"
if [ "$BUILD_RC" -ne 0 ] || [ ! -f "$LIB" ]; then
    say "build failed (rc $BUILD_RC): no tests, no measurements"
    exit 1
fi
nm -D --defined-only "$LIB" | tee "$W/nm.txt"
ldd "$LIB" | tee "$W/ldd.txt" | grep -i cupti | tee -a "$SUMMARY"

# 2. the tests (the GPU ones write what they saw to the evidence file)
export PROVETOP_TRACE_EVIDENCE=$W/evidence.jsonl
: >"$PROVETOP_TRACE_EVIDENCE"
timeout 240 python3 -m pytest -q -rs -p no:cacheprovider tests/sources/test_trace_records.py \
    tests/kernels/test_inject_build.py tests/kernels/test_cuda_inject.py >"$W/tests.log" 2>&1
TESTS_RC=$?
tail -n 25 "$W/tests.log"
say "tests rc=$TESTS_RC: $(tail -n 1 "$W/tests.log")"

# 3. the cost of tracing
cat >"$W/loop.py" <<'EOF'
import json, sys, time
import cupy as cp
rt = cp.cuda.runtime
n_async, n_sync, n_work = (int(a) for a in sys.argv[1:4])
MIB = 1 << 20
s = cp.cuda.Stream(non_blocking=True)
def pairs_async(n):
    for _ in range(n):
        p = rt.mallocAsync(MIB, s.ptr)
        rt.freeAsync(p, s.ptr)
    s.synchronize()
def pairs_sync(n):
    for _ in range(n):
        rt.free(rt.malloc(MIB))
def work(n):
    total = 0.0
    for i in range(n):
        a = cp.random.rand(1024, 1024, dtype=cp.float32)
        b = a @ a + i
        total += float(b.sum())
    return total
out = {}
cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
for name, fn, n in (("py_async", pairs_async, n_async), ("py_sync", pairs_sync, n_sync),
                    ("py_work", work, n_work)):
    fn(max(1, n // 20))  # warm-up: first calls, kernel compiles, pool growth
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter_ns()
    fn(n)
    cp.cuda.Device().synchronize()
    out[name] = (time.perf_counter_ns() - t0) / (n if name != "py_work" else 1)
print(json.dumps(out))
EOF
cat >"$W/loop.cu" <<'EOF'
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
int main(int argc, char** argv) {
    const long n_async = atol(argv[1]), n_sync = atol(argv[2]);
    const size_t mib = 1 << 20;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void* p;
    using clk = std::chrono::steady_clock;
    for (int i = 0; i < 1000; i++) { CK(cudaMallocAsync(&p, mib, s)); CK(cudaFreeAsync(p, s)); }
    CK(cudaStreamSynchronize(s));
    auto t0 = clk::now();
    for (long i = 0; i < n_async; i++) { CK(cudaMallocAsync(&p, mib, s)); CK(cudaFreeAsync(p, s)); }
    CK(cudaStreamSynchronize(s));
    auto t1 = clk::now();
    for (int i = 0; i < 100; i++) { CK(cudaMalloc(&p, mib)); CK(cudaFree(p)); }
    auto t2 = clk::now();
    for (long i = 0; i < n_sync; i++) { CK(cudaMalloc(&p, mib)); CK(cudaFree(p)); }
    auto t3 = clk::now();
    const double a = std::chrono::duration<double, std::nano>(t1 - t0).count() / n_async;
    const double b = std::chrono::duration<double, std::nano>(t3 - t2).count() / n_sync;
    printf("{\"cc_async\": %.1f, \"cc_sync\": %.1f}\n", a, b);
    return 0;
}
EOF
nvcc -O2 -arch=sm_90 -o "$W/loop" "$W/loop.cu" >"$W/loop-build.log" 2>&1 ||
    say "loop.cu: $(cat "$W/loop-build.log")"
# sizes: ~0.2 s of each loop untraced (a pair: ~1.5 us from Python, ~0.7 us from C++; a
# cudaMalloc/cudaFree pair of 1 MiB ~60 us), so five runs of both conditions fit in ~1.5 min
PY_ARGS="${PY_ARGS:-100000 3000 200}"
CC_ARGS="${CC_ARGS:-300000 3000}"
: >"$W/overhead.jsonl"
for i in $(seq 1 $RUNS); do
    for mode in plain traced; do
        if [ "$mode" = traced ]; then
            ENVS="CUDA_INJECTION64_PATH=$LIB PROVETOP_TRACE_OUT=$W/ovh-$i-%p.bin"
        else
            ENVS=""
        fi
        py=$(env $ENVS timeout 120 python3 "$W/loop.py" $PY_ARGS 2>>"$W/overhead.err")
        cc=$([ -x "$W/loop" ] && env $ENVS timeout 120 "$W/loop" $CC_ARGS 2>>"$W/overhead.err")
        echo "{\"run\": $i, \"mode\": \"$mode\", \"py\": ${py:-null}, \"cc\": ${cc:-null}}" |
            tee -a "$W/overhead.jsonl"
    done
done

python3 - "$W" <<'EOF' | tee -a "$SUMMARY"
import glob, json, os, statistics, sys
from provetop.sources.trace import records as R
w = sys.argv[1]
rows = [json.loads(l) for l in open(f"{w}/overhead.jsonl") if l.strip()]
def med(mode, part, key):
    vals = [r[part][key] for r in rows if r["mode"] == mode and r.get(part) and key in r[part]]
    return statistics.median(vals) if vals else None
print()
print(f"{'loop (median of 5)':<44} {'untraced':>12} {'traced':>12} {'cost':>12} {'ratio':>7}")
for label, part, key, unit in (
    ("CuPy cudaMallocAsync+FreeAsync pair", "py", "py_async", "ns"),
    ("CuPy cudaMalloc+cudaFree pair (1 MiB)", "py", "py_sync", "ns"),
    ("CuPy workload (200 x 1024^2 rand, matmul, sum)", "py", "py_work", "ms"),
    ("C++ cudaMallocAsync+FreeAsync pair", "cc", "cc_async", "ns"),
    ("C++ cudaMalloc+cudaFree pair (1 MiB)", "cc", "cc_sync", "ns"),
):
    a, b = med("plain", part, key), med("traced", part, key)
    if a is None or b is None:
        print(f"{label:<44} {'-':>12} {'-':>12}")
        continue
    scale = 1e6 if unit == "ms" else 1
    print(f"{label:<44} {a/scale:>9.1f} {unit} {b/scale:>9.1f} {unit} {(b-a)/scale:>+9.1f} {unit} "
          f"{b/a:>7.3f}")
for path in sorted(glob.glob(f"{w}/ovh-1-*.bin")):
    s = R.read_file(path)
    ex = [r for r in s.records if r.kind == R.KIND_EXIT]
    print(f"stream {os.path.basename(path)}: {os.path.getsize(path)/1e6:.1f} MB, "
          f"{len(s.records)} records, dropped {ex[-1].v[6] if ex else '?'}, complete {s.complete}")
for line in open(f"{w}/evidence.jsonl"):
    print("evidence:", line.strip())
EOF
rm -f "$W"/ovh-*.bin
