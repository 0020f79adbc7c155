#!/usr/bin/env bash
# One device call: the same figures at two commits, alternating, so a change of structure can
# be shown to move nothing. The base commit is unpacked from git beside the working tree and its
# cubins built there; the working tree uses the cubins carried in kernels/cuda/cubin.
#   bash bench/gpu_two_commits.sh BASE [ROUNDS]
# Per round and tree: bench msm (2^20, 2^24), bench ntt (2^20, 2^24), and the engine at
# porep-32g scaled to 2^24 (1 proof, aware, the whole partition driver on the GPU; ENGINE=0:
# the kernels alone).
# Logs go to $OUT/two-commits.tgz; the table of medians is printed last.
set -uo pipefail
BASE=${1:?base commit}
ROUNDS=${2:-2}
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/two_commits_out}
W=/tmp/two-commits
mkdir -p "$OUT" "$W" /tmp/base
trap 'tar czf "$OUT/two-commits.tgz" -C /tmp two-commits' EXIT
HEAD_COMMIT=${PROVETOP_COMMIT:-$(bash bench/commit.sh)}
git archive "$BASE" | tar -x -C /tmp/base || { echo "no $BASE in this git" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/gpu.txt"
# Base cubins built elsewhere (`python -m kernels.cuda.prebuild --arch sm_90` in the base tree)
# may be carried in .base-cubin: prebuild then finds them and compiles nothing.
[ -d .base-cubin ] && mkdir -p /tmp/base/kernels/cuda && cp -r .base-cubin /tmp/base/kernels/cuda/cubin
# a base from before the rooms moved under provetop. names its prebuild kernels.cuda.prebuild
PREBUILD=provetop.kernels.cuda.prebuild
[ -e /tmp/base/provetop/kernels ] || PREBUILD=kernels.cuda.prebuild
(cd /tmp/base && PYTHONPATH=/tmp/base timeout 400 python3 -m $PREBUILD --arch sm_90 --jobs 16 | tail -1)
run() {  # run TREE LABEL COMMAND...: into $W/TREE-LABEL-rR.log
    local tree=$1 label=$2 dir=$PWD commit=$HEAD_COMMIT
    shift 2
    [ "$tree" = base ] && dir=/tmp/base && commit=$BASE
    (cd "$dir" && PYTHONPATH=$dir PROVETOP_COMMIT=$commit timeout 150 python3 -m provetop "$@") \
        >"$W/$tree-$label-r$r.log" 2>&1 || echo "$tree $label round $r: rc=$?" | tee -a "$W/errors"
}
for r in $(seq 1 "$ROUNDS"); do
    for tree in base head; do
        mkdir -p "$W/$tree-r$r"
        run "$tree" msm bench msm --log-sizes 20,24 --repeats 5 --json --results-dir "$W/$tree-r$r"
        run "$tree" ntt bench ntt --log-sizes 20,24 --repeats 5 --json --results-dir "$W/$tree-r$r"
        [ "${ENGINE:-1}" = 1 ] && run "$tree" engine bench pipeline --preset porep-32g --domain-log 24 --proofs 1 \
            --json --out "$W/$tree-r$r/pipeline.json"
    done
done
python3 - "$W" "$ROUNDS" <<'PY'
import glob, json, sys
w, rounds = sys.argv[1], int(sys.argv[2])
def figures(tree, r):
    out = {}
    for f in glob.glob(f"{w}/{tree}-r{r}/*.json"):
        d = json.load(open(f))
        for row in d.get("rows", []):  # bench msm
            out[f"msm 2^{row['log_size']}"] = row["median_ms"]
        for row in d.get("sizes", []):  # bench ntt
            for op in ("forward", "h_step"):
                if isinstance(row.get(op), dict):
                    out[f"ntt {op} 2^{row['log_size']}"] = row[op]["ms"]
        if "gpu_total_ms_median" in d:  # bench pipeline
            out["engine gpu_total 2^24"] = d["gpu_total_ms_median"]
            out["engine s/proof 2^24"] = 1000 * (d.get("s_per_proof") or 0)
    return out
rows = {}
for r in range(1, rounds + 1):
    for tree in ("base", "head"):
        for k, v in figures(tree, r).items():
            rows.setdefault(k, {}).setdefault(tree, []).append(v)
print(f"{'figure (ms)':26} {'base':>24} {'head':>24}")
for k in sorted(rows):
    b = ", ".join(f"{x:.3f}" for x in rows[k].get("base", []))
    h = ", ".join(f"{x:.3f}" for x in rows[k].get("head", []))
    print(f"{k:26} {b:>24} {h:>24}")
PY
cat "$W/errors" 2>/dev/null
