#!/usr/bin/env bash
# Nsight Compute on the hot kernels: pipe utilisation, issue activity, occupancy and warp-stall
# reasons of the FP64 and integer multiplication chains (bench/fp64_mul), the MSM's bucket
# accumulation and the NTT's radix passes. One device call, from the repository root:
#   bash bench/ncu_pipes.sh
#   KERNELS_ONLY=1 bash bench/ncu_pipes.sh   # the MSM accumulation and the NTT pass alone
#   NTT_SMALL_ONLY=1 bash bench/ncu_pipes.sh # both passes of one forward NTT at 2^20 (and their
#                                            # durations, against the bench's whole transform)
# Clocks are left as the card has them (--clock-control none). Text reports go to $OUT, packed
# into one tgz; a short table of the key metrics is printed last.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD}
OUT=${OUT:-/tmp/ncu_out}
W=/tmp/ncu-pipes
mkdir -p "$OUT" "$W"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1 || true)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$W/gpu.txt"
"$NCU" --version | tee -a "$W/gpu.txt"
trap 'tar czf "$OUT/ncu-pipes.tgz" -C /tmp ncu-pipes' EXIT
METRICS="regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active$,\
regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active$,\
smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,\
launch__registers_per_thread,launch__occupancy_limit_registers,\
regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$"
profile() {  # profile NAME KERNEL_REGEX SKIP COMMAND... (COUNT launches, default 1)
    local name=$1 kernel=$2 skip=$3
    shift 3
    timeout 240 "$NCU" --clock-control none -k "regex:$kernel" --launch-skip "$skip" \
        --launch-count "${COUNT:-1}" --section SpeedOfLight --section Occupancy \
        --section LaunchStats --metrics "$METRICS,gpu__time_duration.sum" \
        "$@" >"$W/$name.txt" 2>&1
    echo "$name rc=$?"
}
FP="python3 bench/fp64_mul/run.py --out $W/fp64 --repeats 3 --random 1024"
# KERNELS_ONLY=1: only the MSM accumulation and the NTT pass (an after-profile of a change there)
if [ -n "${NTT_SMALL_ONLY:-}" ]; then
    # before the timed forward transforms: the table-building one and the warm-up, P passes
    # each (the planner's count at 2^20); skip those and 19 timed transforms, 21 P launches,
    # then profile one transform's P passes
    P=$(python3 -c "from provetop.kernels.cuda.ntt import CudaNtt
print(len(CudaNtt().plan(20, inverse=False, coset=False, input_order='natural', output_order='natural')))")
    COUNT=$P profile ntt20-passes "ntt_pass_di" $((21 * P)) python3 -m provetop bench ntt --log-sizes 20 \
        --repeats 30 --warmup 1 --warmup-ms 0 --no-h-step
    grep -E "ntt_pass_di|gpu__time_duration|Duration|Registers Per|Achieved Occupancy|Waves Per SM|Grid Size|Block Size|Dynamic Shared" \
        "$W/ntt20-passes.txt" | sed 's/^ */  /'
elif [ -z "${KERNELS_ONLY:-}" ]; then
    for v in fr_r2 fr_f64 fp_generic fp_f64; do  # skip the exactness launch (a small grid)
        profile "chain-$v" "^chain_$v\$" 1 $FP --variants "$v"
    done
fi
[ -n "${NTT_SMALL_ONLY:-}" ] || profile msm-accumulate0 "msm_accumulate0" 1 python3 -m provetop bench msm --log-sizes 24 \
    --repeats 1 --warmup 1
[ -n "${NTT_SMALL_ONLY:-}" ] || profile ntt-pass "ntt_pass_di" 20 python3 -m provetop bench ntt --log-sizes 24 --repeats 1 \
    --warmup 1 --warmup-ms 0 --no-h-step
# the table: pipes over 5 %, issue, warps, registers, the three largest stall reasons
for f in "$W"/*.txt; do
    [ "$(basename "$f")" = gpu.txt ] && continue
    echo "== $(basename "$f" .txt)"
    grep -E "pipe_.*pct_of_peak|issue_active|warps_active|registers_per_thread|limit_registers" "$f" \
        | awk '{v=$NF; gsub(",","",v); if ($0 ~ /pipe_/ && v+0 < 5) next; print "  " $1 " " $NF}'
    grep -E "issue_stalled" "$f" | awk '{v=$NF; gsub(",","",v); print v " " $1}' \
        | sort -rn | head -n 3 | sed 's/^/  stall /'
done
