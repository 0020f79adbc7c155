#!/usr/bin/env bash
# One device call for the GPU NTT work (issue 4): compile report, GPU tests, self-test rows,
# the benchmark (JSON into $OUT), a tiling variant; a short table last.
# Usage on the device machine: PROVETOP_COMMIT=<sha> bash bench/gpu_ntt_session.sh [sizes]
set -u
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/ntt_out}
mkdir -p "$OUT"
SIZES=${1:-16,20,24,26,27}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
python3 - <<'PY' 2>&1 | tee "$OUT/compile.txt"
import time
t = time.time()
from kernels.cuda_ntt import _state
st = _state()
print(f"ntt.cu compiled+loaded in {time.time() - t:.1f} s")
for name in ("ntt_pass_dif", "ntt_pass_dit", "fr_mul_chain", "fr_elementwise"):
    f = st.fn(name)
    print(name, "regs", f.num_regs, "local bytes", f.local_size_bytes, "binary", f.binary_version)
PY
timeout 300 python3 -m pytest -q -m gpu -rs tests/test_cuda_ntt.py --junitxml="$OUT/junit.xml" 2>&1 | tee "$OUT/pytest.txt"
python3 - <<'PY' 2>&1 | tee -a "$OUT/pytest.txt"
import time
from kernels.cuda_ntt import selftest_checks
for c in selftest_checks():
    t = time.time()
    try:
        c.run(); status = "pass"
    except Exception as e:  # report, don't stop
        status = f"FAIL {e!r}"
    print(f"selftest {c.name} (size {c.size}): {status} {time.time() - t:.2f} s")
PY
timeout 240 python3 -m provetop bench ntt --log-sizes "$SIZES" --json --results-dir "$OUT" 2>&1 | tee "$OUT/bench.txt"
timeout 60 python3 -m provetop bench ntt --log-sizes 24,27 --max-levels 8 --no-h-step --repeats 9 2>&1 | tail -8 | tee "$OUT/variant.txt"
PROVETOP_NTT_MIN_BLOCKS=1 timeout 60 python3 -m provetop bench ntt --log-sizes 24,27 --no-h-step --repeats 9 2>&1 | tail -8 | tee "$OUT/variant_mb1.txt"
echo "==== summary"
tail -3 "$OUT/pytest.txt" | head -2
grep -E "^selftest" "$OUT/pytest.txt"
grep -E "^\||^copy|^target" "$OUT/bench.txt"
echo "variant max-levels 8:"; grep -E "^\| 2" "$OUT/variant.txt"
echo "variant min-blocks 1 (no register cap):"; grep -E "^\| 2" "$OUT/variant_mb1.txt"
