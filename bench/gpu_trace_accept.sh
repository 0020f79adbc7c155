#!/usr/bin/env bash
# `provetop trace` on the GPU machine, in one device call: the library built there, the GPU
# tests of the command (CuPy, PyTorch, two processes with and without --heal, a killed program,
# sppark's MSM where PROVETOP_SPPARK_MSM names a binary), the sample recordings of the
# two-process phantom, provetop's own engine traced from outside (its pools compared with the
# engine's own samples, naive 16 GiB included), and what tracing costs (median of N runs).
#   bash bench/gpu_trace_accept.sh [tests] [samples] [engine] [overhead]   (default: all)
# Logs and recordings go to $OUT; the short table is printed last.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-$PWD}
OUT=${OUT:-/tmp/gpu_trace_accept_out}
W=$OUT/trace
mkdir -p "$W"
export PROVETOP_COMMIT=$(bash bench/commit.sh)
PHASES=${*:-tests samples engine overhead}
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
# everything in one archive (the device returns few files), also when a timeout cuts the run
pack() { tar czf "$OUT/gpu-trace-accept.tgz" -C "$OUT" trace 2>/dev/null; }
trap pack EXIT
trap 'exit 143' TERM
has() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }

say "commit $PROVETOP_COMMIT, $(date -u +%FT%TZ), phases: $PHASES"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/gpu: /' |
    tee -a "$SUMMARY"
LIB=$(timeout 300 python3 -m provetop.kernels.cuda.inject_build -v 2>"$W/build.log") || {
    cat "$W/build.log"; say "library build failed"; exit 1; }
cat "$W/build.log" | tee -a "$SUMMARY"

if has tests; then
    export PROVETOP_TRACE_EVIDENCE=$W/evidence.jsonl
    : >"$PROVETOP_TRACE_EVIDENCE"
    timeout 420 python3 -m pytest -q -rfs -p no:cacheprovider tests/kernels/test_cuda_trace.py \
        tests/kernels/test_cuda_inject.py tests/kernels/test_inject_build.py tests/trace \
        tests/sources/test_trace_records.py >"$W/tests.log" 2>&1
    say "tests rc=$?: $(tail -n 1 "$W/tests.log")"
    grep -E "^(FAILED|ERROR|SKIPPED)" "$W/tests.log" | head -20 | tee -a "$SUMMARY"
fi

if has samples; then
    # two programs nobody here wrote, on one card: PyTorch (backend:cudaMallocAsync) holds an
    # 8 GiB stream-ordered reserve, CuPy fills the card to 2 GiB free and asks for 6 GiB with a
    # plain cudaMalloc; traced together, without and with --heal
    mkdir -p "$W/samples"
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | grep -oiE 'h[0-9]+' |
          head -n 1 | tr 'A-Z' 'a-z')
    python3 -c 'from tests.kernels.test_cuda_trace import NEEDER, TORCH_HOLDER
open("/tmp/pt-holder.py", "w").write(TORCH_HOLDER)
open("/tmp/pt-needer.py", "w").write(NEEDER)'
    for heal in "" --heal; do
        name=${gpu:-gpu}-trace-torch-cupy${heal:+-heal}
        rm -f "$W/samples/$name.pvtrec" /tmp/pt-ready /tmp/pt-stop
        PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync timeout 240 python3 -m provetop trace \
            --no-listen $heal --interval-ms 50 --record "$W/samples/$name.pvtrec" \
            -- sh -c 'export READY=/tmp/pt-ready STOP=/tmp/pt-stop; python3 /tmp/pt-holder.py &
                      python3 /tmp/pt-needer.py; rc=$?; touch $STOP; wait; exit $rc' \
            2>"$W/samples/$name.stderr"
        say "$name: rc=$? $(tail -n 1 "$W/samples/$name.stderr")"
        python3 -m provetop summary "$W/samples/$name.pvtrec" >"$W/samples/$name.summary.txt" 2>&1
    done
fi

if has engine; then
    # provetop's own engine, traced from outside: its recording and the trace's, compared
    for mode in ${ENGINE_MODES:-aware24 naive16}; do
        case $mode in
            aware24) flags="--preset porep-32g --domain-log 24 --proofs 1" ;;
            naive16) flags="--preset porep-32g --proofs 1 --allocator naive --device-memory 16GiB" ;;
        esac
        rm -f "$W/engine-$mode.pvtrec" "$W/trace-$mode.pvtrec"
        timeout 420 python3 -m provetop trace --no-listen --record "$W/trace-$mode.pvtrec" \
            --interval-ms "${INTERVAL_MS:-100}" -- \
            python3 -m provetop engine --backend cuda $flags --workers-per-device 2 \
            --record "$W/engine-$mode.pvtrec" --exit-when-done \
            >"$W/engine-$mode.stdout" 2>"$W/engine-$mode.stderr"
        say "engine $mode traced: rc=$? $(grep -h '^done:' "$W/engine-$mode.stdout")"
        say "  $(tail -n 1 "$W/engine-$mode.stderr")"
        python3 bench/trace_vs_engine.py "$W/engine-$mode.pvtrec" "$W/trace-$mode.pvtrec" \
            --interval-ms "${INTERVAL_MS:-100}" --json "$W/compare-$mode.json" 2>&1 | tee -a "$SUMMARY"
    done
fi

if has overhead; then
    timeout 560 python3 bench/trace_overhead.py --runs "${RUNS:-5}" ${ONLY:+--only "$ONLY"} \
        --json "$W/overhead.json" >"$W/overhead.log" 2>&1
    say "overhead rc=$?"
    tail -n 8 "$W/overhead.log" | tee -a "$SUMMARY"
fi
say "--- done $(date -u +%FT%TZ)"
