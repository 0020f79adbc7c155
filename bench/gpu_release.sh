#!/usr/bin/env bash
# The GPU checks of the release work in one call (run it on an H100 and on an H200):
#   1. the hand-over test, three times (it waits for the claim now instead of racing it);
#   2. a GPU run loads no CUDA library the slim extras leave out (cuBLAS, cuFFT, cuRAND,
#      cuSOLVER, cuSPARSE);
#   3. the warm-up's GPU path: the backend and selftest GPU tests;
#   4. bench/gpu_first_partition.sh: a `small` run's first partition within 2x the second,
#      with CuPy's kernel cache empty.
# Usage on the device machine: bash bench/gpu_release.sh   (files under $OUT; a table last)
set -uo pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu_release}
mkdir -p "$OUT"
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
declare -a ROWS
row() { ROWS+=("$(printf '%-44s %-8s %s' "$1" "$2" "$3")"); }

for i in 1 2 3; do
    t=$(date +%s)
    if python3 -m pytest -q -m gpu -p no:cacheprovider \
        "tests/engine/test_cuda.py::test_gpu_engine_hands_h_blocks_to_the_next_partitions_a_and_verifies" \
        >"$OUT/handover-$i.txt" 2>&1; then r=pass; else r=FAIL; fi
    row "hand-over test, run $i" "$r" "$(( $(date +%s) - t )) s"
done
t=$(date +%s)
if python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_cuda_libraries.py \
    >"$OUT/libraries.txt" 2>&1; then r=pass; else r=FAIL; fi
row "no cuBLAS/cuFFT/cuRAND/cuSOLVER/cuSPARSE loaded" "$r" "$(( $(date +%s) - t )) s"
t=$(date +%s)
if python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_selftest.py \
    tests/kernels/test_cuda_msm.py >"$OUT/kernels.txt" 2>&1; then r=pass; else r=FAIL; fi
row "selftest and MSM GPU tests" "$r" "$(tail -1 "$OUT/kernels.txt" | cut -c1-60)"
t=$(date +%s)
if OUT="$OUT/first" bash bench/gpu_first_partition.sh >"$OUT/first.txt" 2>&1; then r=pass; else r=FAIL; fi
row "first partition within 2x the second" "$r" "$(grep -E '^worker|^verdict' "$OUT/first.txt" | tr '\n' ';' | cut -c1-120)"

echo
echo "GPU: $GPU; commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $(date -u +%F)"
printf '%s\n' "${ROWS[@]}"
