#!/usr/bin/env bash
# SIGTERM and SIGINT on a cuda engine at each stage of its start-up, at the real size and at
# the largest domain, in one call (`provetop bench signals`; see engine/bench/signals.py):
#   1. porep-32g (2^27): SIGTERM at AT (default 1,2,4,7,12,20,35 s after the start), and
#      SIGINT at 4 and 12 s;
#   2. domain 2^28: SIGTERM at 5 and 20 s.
# Usage on the device machine: bash bench/gpu_stop_checks.sh   (JSON and logs under $OUT;
# the tables last)
set -uo pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu_stop_checks}
AT=${AT:-1,2,4,7,12,20,35}
mkdir -p "$OUT"
export PROVETOP_COMMIT=${PROVETOP_COMMIT:-$(bash bench/commit.sh 2>/dev/null || git rev-parse --short HEAD)}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
sig() {  # sig NAME FLAGS...
    local name=$1
    shift
    timeout 280 python3 -m provetop bench signals --backend cuda "$@" --json "$OUT/$name.json" \
        >"$OUT/$name.txt" 2>&1
    echo "rc=$?" >>"$OUT/$name.txt"
}
sig term-porep --preset porep-32g --at "$AT"
sig int-porep --preset porep-32g --at 4,12 --signal INT
sig term-2e28 --preset porep-32g --domain-log 28 --at 5,20
echo
echo "GPU: $(cat "$OUT/gpu.txt"); commit $PROVETOP_COMMIT; $(date -u +%F)"
cat "$OUT"/term-porep.txt "$OUT"/int-porep.txt "$OUT"/term-2e28.txt
