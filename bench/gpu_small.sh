#!/usr/bin/env bash
# One device call for the small sizes, where the serial tails of an MSM and the NTT's last wave
# weigh most: the MSM at today's settings (MSM_SIZES, two rounds), the MSM builds MSM_BUILDS
# names (PROVETOP_MSM_DEFINES) in alternating rounds, and two NTT builds against today's: four
# blocks per SM (NTT_MIN_BLOCKS=4) and the load phase four elements deep (NTT_LOAD_BATCH=4). The
# MSM runs with gmpy2 for the host window combination (a dependency of the package that the GPU
# image lacks: carry its wheel in .whl). The MSM's reduction, reference and window GPU tests
# first; a table last.
# Usage on the device machine (carry .whl and kernels/cuda/cubin):
#   PROVETOP_COMMIT=<sha> bash bench/gpu_small.sh
#   NTT_VARIANTS="" bash bench/gpu_small.sh          # MSM part only
#   MSM_SIZES="" NTT_VARIANTS="" MSM_BUILDS="base:- pf1:MSM_PREFETCH=1" \
#       bash bench/gpu_small.sh                       # MSM builds A/B only
# Everything lands in /tmp/small, packed into $OUT/small.tgz (the device tool brings back at most
# 8 files).
set -uo pipefail
export PYTHONPATH=. PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/small_out}
M=/tmp/small
mkdir -p "$OUT" "$M"
trap 'tar czf "$OUT/small.tgz" -C /tmp small' EXIT
export PROVETOP_COMMIT=$(bash bench/commit.sh)  # pass it in: the device copy's git may lag
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used,memory.total \
    --format=csv | tee "$M/gpu.txt"
SITE=$(bash bench/gmpy2_site.sh)
echo "gmpy2 site: ${SITE:-none}" | tee -a "$M/log"
WITH="PYTHONPATH=.:$SITE"
BM="python3 -m provetop.kernels.bench_msm --results-dir $M --json"

PYTHONPATH=.:$SITE timeout 240 python3 -m pytest -q -m gpu tests/kernels/test_cuda_msm.py \
    -p no:cacheprovider -k "bucket_reduction or matches_reference or window_sizes or selftest" \
    2>&1 | tee -a "$M/log" | tail -n 4

msm() {  # tag sizes env... (MSM_EXTRA: more bench msm flags, e.g. --scalars ones-heavy)
    local tag=$1 sizes=$2
    shift 2
    env "$@" timeout 150 $BM --log-sizes "$sizes" --check --tag "$tag" ${MSM_EXTRA:-} 2>&1 \
        | tee -a "$M/log" | tail -n 1
}
# MSM_SIZES: the sizes of the MSM at today's settings, with gmpy2, two rounds (empty: none)
MSM_SIZES=${MSM_SIZES-16,20,24,27}
for r in 1 2; do
    [ -z "$MSM_SIZES" ] && break
    msm "default-r$r" "$MSM_SIZES" $WITH
done

# MSM_BUILDS: "tag:defines ..." (defines comma-separated, '-' for none), timed at
# 2^20, 2^24, 2^27 (dense, device points, gmpy2) in two rounds; each call's --check verifies
# its build's result at 2^20 against the CPU reference. Empty (the default): no such part.
# BUILD_TESTS=1: every MSM GPU test on each build first, or BUILD_TESTS="tag ...": on those
# builds only (PROVETOP_TEST_TUNING=env makes the
# suite's default settings the build's: tests/tuning_env.py)
for v in ${MSM_BUILDS:-}; do
    [ "${BUILD_TESTS:-0}" = 0 ] && break
    IFS=: read -r tag defs <<<"$v"
    [ "${BUILD_TESTS}" = 1 ] || [[ " ${BUILD_TESTS} " == *" $tag "* ]] || continue
    [ "$defs" = "-" ] && defs=""
    echo "== GPU tests, build $tag" | tee -a "$M/log"
    PYTHONPATH=.:$SITE PROVETOP_TEST_TUNING=env \
        PROVETOP_MSM_DEFINES=$defs timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider \
        tests/kernels/test_cuda_msm.py 2>&1 | tee -a "$M/log" | tail -n 3
done
for r in 1 2; do
    for v in ${MSM_BUILDS:-}; do
        IFS=: read -r tag defs <<<"$v"
        [ "$defs" = "-" ] && defs=""
        msm "build-$tag-r$r" 20,24,27 $WITH PROVETOP_MSM_DEFINES=$defs
        # BUILD_ONES=1: the same build on ones-heavy scalars too (checked at 2^20), once
        if [ "${BUILD_ONES:-0}" = 1 ] && [ $r = 1 ]; then
            MSM_EXTRA="--scalars ones-heavy" msm "build-$tag-ones" 20,24 $WITH \
                PROVETOP_MSM_DEFINES=$defs
        fi
    done
done

# NTT: today's build (mb3), four blocks per SM (mb4), the load phase four elements deep (lb4);
# each build's self-test rows first (orders, coset, inverse at 2^9, H step at 2^8, the H
# identity at 2^14: single-block and multi-pass plans, gathers, factor tables, the quotient)
# NTT_VARIANTS="label:DEFINES:SIZES ..." ('-' for no defines; empty: no NTT part)
NTT_VARIANTS=${NTT_VARIANTS-"mb3:-:16,18,20,22,24,27 mb4:NTT_MIN_BLOCKS=4:16,18,20,22 lb4:NTT_LOAD_BATCH=4:16,18,20,22,24,27"}
for v in $NTT_VARIANTS; do
    label=${v%%:*}; rest=${v#*:}; defs=${rest%%:*}; sizes=${rest#*:}
    [ "$defs" = "-" ] && defs=""
    export PROVETOP_NTT_DEFINES="$defs"
    mkdir -p "$M/ntt-$label"
    timeout 120 python3 - "$label" <<'PY' 2>&1 | tee -a "$M/log"
import sys
from provetop.kernels.selftest.rows_cuda import ntt_checks
from provetop.kernels.tuning import KernelTuning
for c in ntt_checks(KernelTuning.from_env()):
    try:
        c.run(); status = "pass"
    except Exception as e:  # report, don't stop
        status = f"FAIL {e!r}"
    print(f"[{sys.argv[1]} selftest] {c.name}: {status}")
PY
    timeout 150 python3 -m provetop bench ntt --log-sizes "$sizes" --repeats 15 --json \
        --results-dir "$M/ntt-$label" 2>&1 | tee -a "$M/log" | tail -n 8
done
unset PROVETOP_NTT_DEFINES

grep -E "selftest\]|passed|failed" "$M/log" | tail -n 12
python3 - "$M" "$MSM_SIZES" "${MSM_BUILDS:-}" <<'PY'
import glob, json, sys
m = sys.argv[1]
def msm_rows(prefix: str, names: list[str], stage: str, sizes: tuple[int, ...], width: int) -> None:
    """One row per name: each size's median of both rounds, with ``stage``'s time in brackets."""
    for name in names:
        cells = {}
        for r in (1, 2):
            for f in sorted(glob.glob(f"{m}/msm-dense-device-{prefix}{name}-r{r}-*.json"))[-1:]:
                for row in json.load(open(f))["rows"]:
                    t = row["breakdown_ms"].get(stage, float("nan"))
                    ok = "" if row.get("check", True) else " FAIL"
                    cells.setdefault(row["log_size"], []).append(f"{row['median_ms']:.2f}({t:.2f}){ok}")
        print(f"{name:>14} " + " ".join(f"{' '.join(cells.get(k, ['-'])):>{width}}" for k in sizes))


sizes = tuple(int(k) for k in sys.argv[2].split(",") if k)
if sizes:
    print("MSM dense, device points: median ms (bucket-reduce stage ms), two rounds")
    msm_rows("", ["default"], "bucket-reduce", sizes, 22)
builds = [v.split(":")[0] for v in sys.argv[3].split()]
if builds:
    for stage in ("accumulate", "count+scan", "scatter"):
        print(f"MSM builds, dense, device points: median ms ({stage} stage ms), two rounds")
        msm_rows("build-", builds, stage, (20, 24, 27), 30)
    ones = sorted(glob.glob(f"{m}/msm-ones-heavy-device-build-*-ones-*.json"))
    for f in ones:
        rows = json.load(open(f))["rows"]
        cells = " ".join(
            f"2^{r['log_size']} {r['median_ms']:.2f}{'' if r.get('check', True) else ' FAIL'}"
            for r in rows
        )
        print(f"ones-heavy {f.split('build-')[1].split('-ones')[0]:>10}: {cells}")
print("NTT forward / inverse / coset forward (natural order) / H step, median ms")
for label in sorted({d.split("/")[-1][4:] for d in glob.glob(f"{m}/ntt-*")}):
    files = sorted(glob.glob(f"{m}/ntt-{label}/ntt-*.json"))
    if not files:
        print(label, "missing")
        continue
    for s in json.load(open(files[-1]))["sizes"]:
        row = " / ".join(f"{s[c]['ms']:.4f}" for c in ("forward", "inverse", "coset_forward", "h_step") if c in s)
        print(f"{label} 2^{s['log_size']}: {row}")
PY
