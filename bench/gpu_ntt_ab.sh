#!/usr/bin/env bash
# One device call for the NTT's launch settings: where passes above the lowest levels read their
# twiddles (PROVETOP_NTT_TWIDDLES shared / global) and how the cached launches reach the GPU
# (PROVETOP_NTT_LAUNCH driver / pdl / cupy), every combination timed in the same call, in rounds that
# alternate the variants (so drift over the call falls on all of them). First the GPU tests of
# the NTT (both settings' pairs), the CUDA self-test; then the bench; then each variant's host
# time per call (the GPU kept busy meanwhile); then Nsight Compute on one 2^20 transform's
# passes of the variants NCU_TAGS names (default: base, both and pdl).
# Usage on the device machine (carry kernels/cuda/cubin and .whl):
#   PROVETOP_COMMIT=<sha> bash bench/gpu_ntt_ab.sh
#   VARIANTS="base:global:cupy new:shared:driver" SIZES=20 ROUNDS=3 TESTS=0 NCU=0 bash bench/gpu_ntt_ab.sh
#   ROUNDS=0 TESTS=0 HOST=0 bash bench/gpu_ntt_ab.sh   # Nsight Compute alone
#   VARIANTS="d:global:driver d7:global:driver:7" SIZES=16,18,20 bash bench/gpu_ntt_ab.sh
#                                                      # 2^7-element tiles against 2^10
#   VARIANTS="d:global:driver lo0:global:driver:0:0" SIZES=16,20,22,24 bash bench/gpu_ntt_ab.sh
#                                                      # the lowest pass as the others (the
#                                                      # default gives it a whole 2^9 tile)
# Everything lands in /tmp/nttab (emptied first), packed into $OUT/nttab.tgz; a table is printed last.
set -uo pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/nttab_out}
M=/tmp/nttab
rm -rf "$M"  # a warm machine keeps the last call's files: each call packs its own
mkdir -p "$OUT" "$M"
trap 'tar czf "$OUT/nttab.tgz" -C /tmp nttab' EXIT
export PROVETOP_COMMIT=$(bash bench/commit.sh)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used,memory.total \
    --format=csv | tee "$M/gpu.txt"
VARIANTS=${VARIANTS-"base:global:cupy launch:global:driver tw:shared:cupy both:shared:driver pdl:shared:pdl"}
SIZES=${SIZES-16,18,20,22,24,27}
ROUNDS=${ROUNDS-2}

if [ "${TESTS-1}" = 1 ]; then
    # TEST_K: a pytest -k expression, to run only the tests of what changed
    timeout 270 python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_cuda_ntt.py \
        tests/kernels/test_cuda_h_streamed.py ${TEST_K:+-k "$TEST_K"} 2>&1 | tee -a "$M/log" \
        | tail -n 4
    timeout 120 python3 -m provetop selftest --backend cuda 2>&1 | tee -a "$M/log" | tail -n 6
fi

for r in $(seq 1 "$ROUNDS"); do
    for v in $VARIANTS; do
        # tag:twiddles:launch[:levels[:lowest]], levels = bench ntt --max-levels (tiles of
        # 2^levels), lowest = --lowest-levels (the levels of the pass over the lowest ones)
        IFS=: read -r tag tw launch lv lo <<<"$v"
        mkdir -p "$M/ntt-$tag-r$r"
        PROVETOP_NTT_TWIDDLES=$tw PROVETOP_NTT_LAUNCH=$launch timeout 200 python3 -m provetop \
            bench ntt --log-sizes "$SIZES" --repeats 15 --json --results-dir "$M/ntt-$tag-r$r" \
            ${lv:+--max-levels $lv} ${lo:+--lowest-levels $lo} 2>&1 | tee -a "$M/log" \
            | grep -E "^2\^|wrote"
    done
done

# host cost per call: a 2^20 forward with out given, 200 calls queued behind a kernel that keeps
# the GPU busy for ~0.25 s, so that each call's time to return is the host's alone (a queue of
# small transforms measures the GPU instead)
for v in $VARIANTS; do
    [ "${HOST-1}" = 1 ] || break
    IFS=: read -r tag tw launch lv lo <<<"$v"
    PROVETOP_NTT_TWIDDLES=$tw PROVETOP_NTT_LAUNCH=$launch timeout 60 python3 - "$tag" <<'PY' 2>&1 | tee -a "$M/log"
import sys, time
import numpy as np
import cupy as cp
from kernels.cuda import fr
from kernels.cuda.ntt import CudaNtt
from kernels.cuda.spin import spin_kernel
from kernels.tuning import KernelTuning
eng = CudaNtt(tuning=KernelTuning.from_env())
x = fr.random_fr((1 << 20,))
out = cp.empty_like(x)
spin = spin_kernel(cp)
for _ in range(20):
    eng.ntt(x, out=out)
cp.cuda.Device().synchronize()
per_call = []
for _ in range(5):
    spin((1,), (1,), (np.int64(500_000_000),))
    t0 = time.perf_counter()
    for _ in range(200):
        eng.ntt(x, out=out)
    per_call.append((time.perf_counter() - t0) / 200 * 1e6)
    cp.cuda.Device().synchronize()
per_call.sort()
print(f"[host] {sys.argv[1]}: {per_call[2]:.2f} us per 2^20 forward call to return, GPU busy (median of 5 x 200)")
PY
done

if [ "${NCU-1}" = 1 ]; then
    NCU_BIN=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1 || true)
    for v in $VARIANTS; do
        IFS=: read -r tag tw launch lv lo <<<"$v"
        case " ${NCU_TAGS-base both pdl} " in *" $tag "*) ;; *) continue ;; esac
        # skip the table-building transform, the warm-up and 19 timed ones (P passes each, as
        # the planner says for this variant), then profile one transform's P passes
        P=$(python3 -c "from kernels.cuda.ntt import CudaNtt
print(len(CudaNtt(max_levels=${lv:-0} or None, lowest_levels=${lo:-None}).plan(20, inverse=False, coset=False, input_order='natural', output_order='natural')))")
        PROVETOP_NTT_TWIDDLES=$tw PROVETOP_NTT_LAUNCH=$launch timeout 240 "$NCU_BIN" \
            --clock-control none -k "regex:ntt_pass_di" --launch-skip $((21 * P)) --launch-count "$P" \
            --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
            --metrics "regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active$,smsp__issue_active.avg.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,gpu__time_duration.sum" \
            python3 -m provetop bench ntt --log-sizes 20 --repeats 30 --warmup 1 --warmup-ms 0 --no-h-step \
            ${lv:+--max-levels $lv} ${lo:+--lowest-levels $lo} >"$M/ncu-ntt20-$tag.txt" 2>&1
        echo "== ncu $tag rc=$?"
        grep -E "ntt_pass_di|gpu__time_duration.sum|Registers Per|Achieved Occupancy|Dynamic Shared|pipe_fmaheavy|issue_active|stalled_long_scoreboard|stalled_math" \
            "$M/ncu-ntt20-$tag.txt" | sed 's/^ */  /'
    done
fi

grep -E "passed|failed|error" "$M/log" | tail -n 6
python3 - "$M" "$VARIANTS" "$ROUNDS" <<'PY'
import glob, json, statistics, sys
m, variants, rounds = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
ops = ("forward", "inverse", "coset_forward", "h_step")
print("median over rounds (ms): forward / inverse / coset forward / H step")
for v in variants:
    tag = v.split(":")[0]
    by_k: dict[int, dict[str, list[float]]] = {}
    for r in range(1, rounds + 1):
        for f in glob.glob(f"{m}/ntt-{tag}-r{r}/ntt-*.json"):
            for row in json.load(open(f))["sizes"]:
                d = by_k.setdefault(row["log_size"], {o: [] for o in ops})
                for o in ops:
                    if o in row:
                        d[o].append(row[o]["ms"])
    for k in sorted(by_k):
        cells = [f"{statistics.median(by_k[k][o]):.4g}" if by_k[k][o] else "-" for o in ops]
        spread = "/".join(f"{x:.4g}" for x in by_k[k]["forward"])
        print(f"  {tag:7s} 2^{k:<3d} {' / '.join(cells)}   (forward per round: {spread})")
PY
