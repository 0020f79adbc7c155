#!/usr/bin/env bash
# The GPU checks of the release work (run on an H100 and on an H200), in two calls of a few
# minutes each:
#   bash bench/gpu_release.sh tests
#     1. every GPU test (`pytest -m gpu tests`, Textual from .thirdparty/wheels when carried),
#        the hand-over test and the loaded-libraries test among them;
#     2. the hand-over test twice more (it waits for the claim instead of racing it);
#     3. bench/gpu_first_partition.sh: a `small` run's first partition within 2x the second,
#        with CuPy's kernel cache empty.
#   bash bench/gpu_release.sh install      (carry .slim and .thirdparty)
#     4. bench/gpu_slim_install.py: `pip install provetop[cuda13]` into an empty environment,
#        with no index, then selftest, warm-up, a proof and a trace from it;
#     5. bench/gpu_top_check.py: `provetop top` with a cuda engine, --once, --json, 160x48.
# .thirdparty/wheels (ignored by git): `pip download --only-binary=:all: --python-version 3.12
# --implementation cp --abi cp312 --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64
# -d .thirdparty/wheels textual==8.2.8 pytest-textual-snapshot pytest-timeout hypothesis py_ecc
# gmpy2 py-arkworks-bls12381 prometheus-client` (the test extra's pins the GPU image lacks).
# Files under $OUT (one archive); a table last.
set -uo pipefail
STAGE=${1:-tests}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu_release}
W=/tmp/gpu-release-$STAGE
mkdir -p "$OUT" "$W"
export PROVETOP_COMMIT=${PROVETOP_COMMIT:-$(bash bench/commit.sh 2>/dev/null || git rev-parse --short HEAD)}
GPU=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
trap 'tar czf "$OUT/gpu-release-$STAGE.tgz" -C /tmp "gpu-release-$STAGE"' EXIT
if ls .thirdparty/wheels/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
        .thirdparty/wheels/*.whl && export PYTHONPATH=$PWD:/tmp/site
fi
declare -a ROWS
row() { ROWS+=("$(printf '%-44s %-5s %s' "$1" "$2" "$3")"); }
verdict() { [ "$1" = 0 ] && echo ok || echo FAIL; }

if [ "$STAGE" = tests ]; then
    t=$(date +%s)
    timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rs tests >"$W/gpu-tests.log" 2>&1
    row "every GPU test" "$(verdict $?)" "$(( $(date +%s) - t )) s; $(tail -n 1 "$W/gpu-tests.log" | cut -c1-70)"
    for i in 2 3; do
        t=$(date +%s)
        timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider \
            "tests/engine/test_cuda.py::test_gpu_engine_hands_h_blocks_to_the_next_partitions_a_and_verifies" \
            >"$W/handover-$i.log" 2>&1
        row "hand-over test, run $i" "$(verdict $?)" "$(( $(date +%s) - t )) s"
    done
    OUT="$W/first" timeout 150 bash bench/gpu_first_partition.sh >"$W/first.log" 2>&1
    row "first partition within 2x the second" "$(verdict $?)" \
        "$(grep -E '^worker|^verdict' "$W/first.log" | tr '\n' ';' | cut -c1-150)"
else
    timeout 330 python3 bench/gpu_slim_install.py --out "$W/slim" >"$W/slim.log" 2>&1
    row "slim install (bench/gpu_slim_install.py)" "$(verdict $?)" "$W/slim/table.txt"
    timeout 200 python3 bench/gpu_top_check.py >"$W/top.log" 2>&1
    row "provetop top (bench/gpu_top_check.py)" "$(verdict $?)" "$(tail -n 1 "$W/top.log" | cut -c1-80)"
fi
echo
echo "GPU: $GPU; commit $PROVETOP_COMMIT; $(date -u +%F)" | tee "$W/table.txt"
printf '%s\n' "${ROWS[@]}" | tee -a "$W/table.txt"
[ "$STAGE" = tests ] && grep -E "^(FAILED|ERROR|SKIPPED)" "$W/gpu-tests.log" | head -n 20
[ "$STAGE" = install ] && cat "$W/slim/table.txt" && tail -n 40 "$W/top.log"
exit 0
