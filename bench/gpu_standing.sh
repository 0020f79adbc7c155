#!/usr/bin/env bash
# One device call for the standing kernel figures that docs/performance.md and the README quote:
# `provetop bench ntt` (2^16 .. 2^27, forward / inverse / coset and the H step) and `provetop
# bench msm` (2^16 .. 2^27, dense scalars, device points, checked up to 2^22; ones-heavy 2^27),
# with the package's own dependencies: gmpy2 (the MSM's host window combination), which the
# GPU image lacks, is installed from its wheel in .whl when carried there (bench/gmpy2_site.sh).
# Usage on the device machine (carry kernels/cuda/cubin and .whl):
#   PROVETOP_COMMIT=<sha> bash bench/gpu_standing.sh
#   NTT=0 bash bench/gpu_standing.sh   # the MSM alone
# JSON lands in $OUT; the benches' own tables are printed.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/standing_out}
mkdir -p "$OUT"
export PROVETOP_COMMIT=$(bash bench/commit.sh)  # pass it in: the device copy's git may lag
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used,memory.total \
    --format=csv | tee "$OUT/gpu.txt"
SITE=$(bash bench/gmpy2_site.sh)
export PYTHONPATH=.:$SITE
python3 -c "import gmpy2; print('gmpy2', gmpy2.version())" 2>&1 | tail -n 1 | tee -a "$OUT/gpu.txt"
[ "${NTT:-1}" = 1 ] && timeout 200 python3 -m provetop bench ntt --log-sizes 16,18,20,22,24,26,27 --repeats 15 --json \
    --results-dir "$OUT" 2>&1 | grep -E "^2\^|target|wrote"
timeout 200 python3 -m provetop bench msm --log-sizes 16,20,22,24,26,27 --check --json \
    --results-dir "$OUT" --tag standing 2>&1 | tail -n 9
timeout 60 python3 -m provetop bench msm --log-sizes 27 --repeats 3 --scalars ones-heavy --json \
    --results-dir "$OUT" --tag standing 2>&1 | tail -n 3
