#!/usr/bin/env bash
# One device call for the lazy field forms (mont.cuh fpz_t, fr_mul.cuh fr_mul_lazy): the MSM
# accumulation built canonical, lazy, and lazy with its first partial sum stored early (two
# rounds at 2^20, 2^24, 2^27, each checked at 2^20 against the CPU reference), then the NTT
# canonical and lazy in ABBA order (2^16-2^27 forward, inverse, coset, H step, each build's
# self-test rows first), then as much of the GPU suites on the lazy builds as the call's time
# leaves (PROVETOP_TEST_TUNING=env). Usage on the device machine (carry .whl and
# kernels/cuda/cubin): PROVETOP_COMMIT=<sha> bash bench/gpu_lazy.sh
set -uo pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
LIMIT=${LIMIT:-570}  # seconds: the device tool's per-call limit, less the packing
REDUCES="" BUILD_TESTS=0 \
    MSM_BUILDS="base:msm.cu:- lazy:msm.cu:MSM_LAZY=1 lazyearly:msm.cu:MSM_LAZY=1,MSM_SLOT0_EARLY=1" \
    NTT_VARIANTS="b1:-:16,18,20,22,24,27 z1:NTT_LAZY=1:16,18,20,22,24,27 z2:NTT_LAZY=1:16,18,20,22,24,27 b2:-:16,18,20,22,24,27" \
    bash bench/gpu_small.sh
SITE=$(bash bench/gmpy2_site.sh)
left() { echo $((LIMIT - SECONDS)); }
for suite in "MSM_DEFINES=MSM_LAZY=1 tests/kernels/test_cuda_msm.py" \
    "NTT_DEFINES=NTT_LAZY=1 tests/kernels/test_cuda_ntt.py tests/kernels/test_cuda_h_streamed.py"; do
    set -- $suite
    def=$1
    shift
    [ "$(left)" -gt 30 ] || { echo "== no time left for $*"; continue; }
    echo "== GPU tests with PROVETOP_$def ($(left) s left)"
    env PYTHONPATH=.:$SITE PROVETOP_TEST_TUNING=env "PROVETOP_$def" timeout "$(left)" \
        python3 -m pytest -q -m gpu -p no:cacheprovider "$@" 2>&1 | tail -n 3
done
