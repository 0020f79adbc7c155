#!/usr/bin/env bash
# Nsight Compute on the MSM's sort at 2^24: the radix setting's key pass and its two partition
# levels (msm_radix_hist, msm_radix_part_a, msm_radix_part_b: the first group's launches) beside
# the counting sort's scatter (msm_scatter), with the memory sections, to say what bounds each.
# One device call, from the repository root:
#   bash bench/ncu_sort.sh
# Reports go to /tmp/ncu-sort, packed into $OUT/ncu-sort.tgz; the key lines are printed last.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD}
OUT=${OUT:-/tmp/ncu_sort_out}
W=/tmp/ncu-sort
rm -rf "$W"
mkdir -p "$OUT" "$W"
trap 'tar czf "$OUT/ncu-sort.tgz" -C /tmp ncu-sort' EXIT
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -n 1 || true)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/gpu.txt"
for v in "radix:msm_radix_(hist|part_a|part_b):3" "counting:msm_scatter:1"; do
    IFS=: read -r sort kernel count <<<"$v"
    PROVETOP_MSM_SORT=$sort timeout 200 "$NCU" --clock-control none -k "regex:^$kernel\$" \
        --launch-count "$count" --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section Occupancy --section LaunchStats \
        --metrics "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,lts__t_sectors_op_write.sum,lts__t_sectors_op_atom.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_atom.sum,dram__bytes_write.sum,dram__bytes_read.sum,gpu__time_duration.sum" \
        python3 -m provetop bench msm --log-sizes 24 --repeats 1 --warmup 0 >"$W/$sort.txt" 2>&1
    echo "== $sort ($kernel) rc=$?"
    grep -E "^  msm_|gpu__time_duration|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|dram__bytes|lts__t_sectors|bank_conflicts|stalled|Warp Cycles Per Issued|Achieved Occupancy|Grid Size|Block Size" \
        "$W/$sort.txt" | sed 's/  */ /g' | head -n 80
done
