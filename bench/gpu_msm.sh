#!/usr/bin/env bash
# One device call for the MSM work: GPU tests, then the benchmarks; short table last.
# Run from the repository root on the GPU machine, with the nvcc-built cubins carried in
# kernels/cuda/cubin (python3 -m provetop.kernels.cuda.prebuild --arch sm_90).
#   bash bench/gpu_msm.sh quick   # tests + 2^16..2^24 bench with the window sweep
#   bash bench/gpu_msm.sh full    # the GPU MSM tests but the slow ones (to the first failure),
#                                         # then 2^16..2^27 with the SRS, host-streamed, ones-heavy
#   bash bench/gpu_msm.sh benchonly  # full without the tests
#   bash bench/gpu_msm.sh final   # all GPU tests, then the full bench with the window sweep
#                                         # up to 2^20
#   bash bench/gpu_msm.sh sort   # all GPU MSM tests, then 2^20, 2^22, 2^24, 2^27 with the
#                                         # counting, radix and auto sorts (PROVETOP_MSM_SORT),
#                                         # a ones-heavy 2^27 with each; a table of medians, sort
#                                         # stages and pool / model last; at most 8 minutes
#   bash bench/gpu_msm.sh mul    # the Fp multiplication variants: the chain micro-benchmark
#                                         # (bench/fp64_mul), the GPU MSM tests (default build:
#                                         # the tests take no defines), then 2^20, 2^24, 2^27 with each
#                                         # PROVETOP_MSM_DEFINES set in turn; table last.
#                                         # MSM_VARIANTS="base G1_COLD_DBL" MUL_PARTS="" for
#                                         # another A/B of MSM defines alone
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/msm_out}
mkdir -p "$OUT"
MODE=${1:-quick}
export PROVETOP_COMMIT=$(bash bench/commit.sh)  # pass it in: the device copy's git may lag
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used,memory.total \
    --format=csv | tee "$OUT/gpu.txt"
ls -R kernels/cuda/cubin 2>/dev/null
B="python3 -m provetop.kernels.bench_msm --results-dir $OUT --json"
if [ "$MODE" = "sort" ]; then
    timeout 180 python3 -m pytest -q -m gpu tests/kernels/test_cuda_msm.py -p no:cacheprovider \
        2>&1 | tee -a "$OUT/msm.log" | tail -n 30
    for s in counting radix auto; do
        PROVETOP_MSM_SORT=$s timeout 100 $B --log-sizes 20,22,24,27 --check --tag "sort-$s" 2>&1 \
            | tee -a "$OUT/msm.log" | tail -n 6
    done
    for s in counting radix auto; do  # the ones bin: one shared counter per tile in the radix sort
        PROVETOP_MSM_SORT=$s timeout 50 $B --log-sizes 27 --repeats 3 --scalars ones-heavy \
            --tag "sort-$s" 2>&1 | tee -a "$OUT/msm.log" | tail -n 3
    done
    python3 - "$OUT" <<'PY'
import glob, json, sys
SORT = ("count+scan", "scatter", "partition", "bucket-sort")
SORTS = ("counting", "radix", "auto")
print("sort A/B, medians in ms (sort = count+scan + scatter, or count+scan + partition + bucket-sort);")
print("pool = CuPy pool's total after the calls / the model (scratch_bytes)")
print(f"{'scalars':>10} {'n':>5} " + " ".join(f"{s:>9}" for s in SORTS)
      + "  " + " ".join(f"{'sort ' + s[:3]:>9}" for s in SORTS) + "  " + " ".join(f"{'pool ' + s[:3]:>9}" for s in SORTS))
for kind in ("dense", "ones-heavy"):
    rows = {}
    for s in SORTS:
        files = sorted(glob.glob(f"{sys.argv[1]}/msm-{kind}-device-sort-{s}-*.json"))
        for r in json.load(open(files[-1]))["rows"] if files else []:
            rows.setdefault(r["log_size"], {})[s] = r
    for k in sorted(rows):
        got = rows[k]
        ms = " ".join(f"{got[s]['median_ms']:>9.1f}" if s in got else f"{'-':>9}" for s in SORTS)
        st = " ".join(f"{sum(got[s]['breakdown_ms'].get(x, 0.0) for x in SORT):>9.1f}"
                      if s in got else f"{'-':>9}" for s in SORTS)
        pool = " ".join(f"{got[s]['scratch_pool_total_bytes'] / got[s]['scratch_bytes_model']:>9.3f}"
                        if s in got else f"{'-':>9}" for s in SORTS)
        ck = " check " + "/".join(str(got[s].get("check")) for s in SORTS if s in got) if any("check" in got[s] for s in got) else ""
        print(f"{kind:>10} 2^{k:<3} {ms}  {st}  {pool}{ck}")
PY
elif [ "$MODE" = "mul" ]; then
    # everything under $M, packed into $OUT/msm-mul.tgz at the end (the device tool brings back
    # at most 8 files); the order puts the first round of each A/B before the slower parts.
    # MSM_VARIANTS: the PROVETOP_MSM_DEFINES sets to compare ("base" = none; the GPU tests run
    # with the last one); MUL_PARTS: "chain" (bench/fp64_mul) or none. (The Fr Karatsuba A/B in
    # the NTT ran here at ce2c0b1, where fr_mul_kr still was.)
    M=/tmp/msm-mul
    mkdir -p "$M"
    trap 'tar czf "$OUT/msm-mul.tgz" -C /tmp msm-mul' EXIT
    BM="python3 -m provetop.kernels.bench_msm --results-dir $M --json"
    VARIANTS=${MSM_VARIANTS:-base MONT_MUL_KARATSUBA MONT_SQR_SOS MONT_MUL_KARATSUBA,MONT_SQR_SOS}
    PARTS=${MUL_PARTS-chain}
    msm_round() {  # the MSM variants in turn, 2^20, 2^24, 2^27
        for v in $VARIANTS; do
            d=$v; [ "$v" = base ] && d=""
            PROVETOP_MSM_DEFINES=$d timeout 80 $BM --log-sizes 20,24,27 --check \
                --tag "mul-${v//,/+}-r$1" 2>&1 | tee -a "$M/msm.log" | tail -n 1
        done
    }
    if [[ " $PARTS " == *" chain "* ]]; then
        timeout 150 python3 bench/fp64_mul/run.py --out "$M" \
            --variants fp_generic,fp_kara,fr_r2,fr_generic,fr_kara 2>&1 | tee -a "$M/msm.log" | tail -n 8
    fi
    last=${VARIANTS##* }; [ "$last" = base ] && last=""
    PROVETOP_MSM_DEFINES=$last timeout 150 python3 -m pytest -q -m gpu \
        tests/kernels/test_cuda_msm.py -p no:cacheprovider \
        -k "matches_reference or repeated or window_sizes or one_pass or selftest or srs_edges" \
        2>&1 | tee -a "$M/msm.log" | tail -n 4
    msm_round 1
    msm_round 2
    python3 - "$M" ${VARIANTS//,/+} <<'PY'
import glob, json, sys, statistics
out = sys.argv[1]
print("MSM dense, device points: medians (ms) per variant, two rounds; accumulate stage")
variants = sys.argv[2:]
for v in variants:
    cells = {}
    for r in (1, 2):
        for f in sorted(glob.glob(f"{out}/msm-dense-device-mul-{v}-r{r}-*.json"))[-1:]:
            for row in json.load(open(f))["rows"]:
                cells.setdefault(row["log_size"], []).append(
                    (row["median_ms"], row.get("breakdown_ms", {}).get("accumulate", 0.0), row.get("check")))
    line = " | ".join(
        f"2^{k}: " + " / ".join(f"{m:.2f} (acc {a:.1f}{'' if c in (None, True) else ' CHECK ' + str(c)})" for m, a, c in cells[k])
        for k in sorted(cells))
    print(f"{v:>34}: {line}")
PY
elif [ "$MODE" = "final" ]; then
    timeout 150 python3 -m pytest -q -m gpu tests/kernels/test_cuda_msm.py -p no:cacheprovider \
        2>&1 | tee -a "$OUT/msm.log" | tail -n 30
    timeout 200 $B --log-sizes 16,20,24,26,27 --srs --check --sweep=-1,0,1 --sweep-max-log 20 \
        --tag final 2>&1 | tee -a "$OUT/msm.log" | tail -n 9
    timeout 100 $B --log-sizes 27 --points host 2>&1 | tee -a "$OUT/msm.log" | tail -n 4
    timeout 100 $B --log-sizes 20,24,27 --scalars ones-heavy 2>&1 | tee -a "$OUT/msm.log" | tail -n 6
elif [ "$MODE" = "quick" ]; then
    timeout 150 python3 -m pytest -q -m gpu tests/kernels/test_cuda_msm.py -p no:cacheprovider \
        2>&1 | tee -a "$OUT/msm.log" | tail -n 30
    timeout 120 $B --log-sizes 16,20,24 --sweep=-2,-1,0,1,2 --check --srs 2>&1 | tee -a "$OUT/msm.log" | tail -n 12
else
    # full (any other mode name runs it too); benchonly: without the tests
    if [ "$MODE" != "benchonly" ]; then
        timeout 150 python3 -m pytest -q -x -m "gpu and not slow" tests/kernels/test_cuda_msm.py -p no:cacheprovider \
            2>&1 | tee -a "$OUT/msm.log" | tail -n 30
    fi
    timeout 200 $B --log-sizes 16,20,24,26,27 --srs --check --tag full 2>&1 | tee -a "$OUT/msm.log" | tail -n 9
    timeout 100 $B --log-sizes 27 --points host 2>&1 | tee -a "$OUT/msm.log" | tail -n 4
    timeout 100 $B --log-sizes 20,24,27 --scalars ones-heavy 2>&1 | tee -a "$OUT/msm.log" | tail -n 6
fi
