#!/usr/bin/env bash
# Nsight Compute on the MSM's sort at 2^24: the radix setting's key pass and its two partition
# levels (msm_radix_hist, msm_radix_part_a, msm_radix_part_b: the first group's launches) beside
# the counting sort's scatter (msm_scatter), with the memory sections, to say what bounds each.
# One device call, from the repository root:
#   bash bench/ncu_sort.sh
#   SCALARS=ones-heavy LOG=27 bash bench/ncu_sort.sh   # other scalars or size (bench msm's)
#   TIMES=1 SCALARS=ones-heavy LOG=27 bash bench/ncu_sort.sh
#       # every launch of the radix kernels (hist, part_a, part_b, bucket) and of the
#       # scatter, duration only (one replay each): where a whole sort's time goes
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
SCALARS=${SCALARS:-dense}
LOG=${LOG:-24}
if [ "${TIMES:-0}" = 1 ]; then
    for v in "radix:msm_radix_(hist|part_a|part_b|bucket)" "counting:msm_(count|scatter)"; do
        IFS=: read -r sort kernel <<<"$v"
        PROVETOP_MSM_SORT=$sort timeout 250 "$NCU" --clock-control none -k "regex:^$kernel\$" \
            --metrics gpu__time_duration.sum python3 -m provetop bench msm --log-sizes "$LOG" \
            --scalars "$SCALARS" --repeats 1 --warmup 0 >"$W/times-$sort.txt" 2>&1
        echo "== $sort ($kernel, $SCALARS 2^$LOG) rc=$?"
        # the first MSM's launches only: each kernel's launches in order, in microseconds
        # bench msm --repeats 1 times max(3, 1 - 2) = 3 calls at 2^27 (1 below), then one more
        # for the breakdown; no warm-up
        python3 - "$W/times-$sort.txt" "$(( LOG >= 27 ? 4 : 2 ))" <<'PY'
import re, sys
name, rows = None, []
for line in open(sys.argv[1]):
    m = re.match(r"\s+(msm_\w+) \((\d+), 1, 1\)x\((\d+), 1, 1\)", line)
    if m:
        name = f"{m.group(1)} {m.group(2)}x{m.group(3)}"
    m = re.search(r"gpu__time_duration.sum\s+(\w+)\s+([\d.,]+)", line)
    if m and name:
        v = float(m.group(2).replace(",", ""))
        unit = m.group(1)  # us / usecond, ms / msecond, ns / nsecond
        rows.append((name, v * {"m": 1000.0, "n": 0.001}.get(unit[0], 1.0)))
        name = None
calls = int(sys.argv[2])  # the MSMs the bench ran (timed ones + the breakdown's)
one = len(rows) // calls if len(rows) % calls == 0 else len(rows)
print(f"  {len(rows)} launches in {calls} MSMs; the first MSM's:")
tot = {}
for n, us in rows[:one]:
    print(f"  {n:<40} {us:>10.1f} us")
    k = n.split()[0]
    tot[k] = tot.get(k, 0.0) + us
print("  per kernel, one MSM: " + ", ".join(f"{k} {v / 1000:.2f} ms" for k, v in tot.items()))
PY
    done
    exit 0
fi
for v in "radix:msm_radix_(hist|part_a|part_b):3" "counting:msm_scatter:1"; do
    IFS=: read -r sort kernel count <<<"$v"
    PROVETOP_MSM_SORT=$sort timeout 200 "$NCU" --clock-control none -k "regex:^$kernel\$" \
        --launch-count "$count" --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section Occupancy --section LaunchStats \
        --metrics "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,lts__t_sectors_op_write.sum,lts__t_sectors_op_atom.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_atom.sum,dram__bytes_write.sum,dram__bytes_read.sum,gpu__time_duration.sum" \
        python3 -m provetop bench msm --log-sizes "$LOG" --scalars "$SCALARS" --repeats 1 \
        --warmup 0 >"$W/$sort.txt" 2>&1
    echo "== $sort ($kernel) rc=$?"
    grep -E "^  msm_|gpu__time_duration|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|dram__bytes|lts__t_sectors|bank_conflicts|stalled|Warp Cycles Per Issued|Achieved Occupancy|Grid Size|Block Size" \
        "$W/$sort.txt" | sed 's/  */ /g' | head -n 80
done
