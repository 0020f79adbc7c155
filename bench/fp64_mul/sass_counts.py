"""Static SASS counts per multiplication for the chain kernels of fp64_bench.cu (no GPU needed).

Compiles fp64_bench.cu with ``nvcc -arch=sm_90 -cubin``, disassembles it with cuobjdump (needs
nvdisasm on PATH or in NVDISASM_PATH), takes the body of each chain kernel's main loop (the
largest backward branch: one iteration = 4 multiplications, the loop is ``#pragma unroll 1``)
and counts instructions by pipe, divided by 4:

* fp64: DFMA / DADD / DMUL (64 lanes per SM per clock on H100 / H200 SXM);
* imad_slots: IMAD.WIDE and IMAD.HI at 2 slots, any other IMAD at 1 (64 slots per SM per clock;
  the cost model of bench/notes/ntt.md, 2026-11-29, 1581305);
* alu: IADD3, LOP3, SHF, SEL, ISETP, LEA, MOV, ... (64 lanes per SM per clock);
* total: every instruction (issue: 4 x 32 = 128 thread-instructions per SM per clock).

Usage: python3 bench/fp64_mul/sass_counts.py [--cuobjdump PATH] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FP64_OPS = ("DFMA", "DADD", "DMUL")
INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def dump_sass(cuobjdump: str) -> str:
    with tempfile.TemporaryDirectory() as d:
        cubin = Path(d) / "b.cubin"
        cmd = ["nvcc", "-arch=sm_90", "-std=c++17", f"-I{REPO / 'kernels' / 'cuda'}"]
        cmd += ["-cubin", str(HERE / "fp64_bench.cu"), "-o", str(cubin)]
        subprocess.run(cmd, check=True)
        out = subprocess.run(
            [cuobjdump, "--dump-sass", str(cubin)], check=True, text=True, capture_output=True
        )
        return out.stdout


def split_functions(sass: str) -> dict[str, list[tuple[int, str, str]]]:
    funcs: dict[str, list[tuple[int, str, str]]] = {}
    cur = None
    for line in sass.splitlines():
        m = re.search(r"Function : (\w+)", line)
        if m:
            cur = m.group(1)
            funcs[cur] = []
            continue
        m = INSN.search(line)
        if cur and m:
            funcs[cur].append((int(m.group(1), 16), m.group(2), line))
    return funcs


def loop_body(insns: list[tuple[int, str, str]]) -> list[tuple[int, str, str]]:
    best: list[tuple[int, str, str]] = []
    for addr, op, line in insns:
        if op.startswith("BRA"):
            t = re.search(r"BRA\s+(?:`\(\.L_x_\d+\)|\S*?)\s*0x([0-9a-f]+)", line)
            if not t:
                continue
            target = int(t.group(1), 16)
            if target < addr:
                body = [x for x in insns if target <= x[0] <= addr]
                if len(body) > len(best):
                    best = body
    return best


def classify(body: list[tuple[int, str, str]]) -> dict[str, float]:
    c: Counter[str] = Counter()
    for _, op, _ in body:
        base = op.split(".")[0]
        c["total"] += 1
        if base in FP64_OPS:
            c["fp64"] += 1
            c[base] += 1
        elif base == "IMAD":
            wide = ".WIDE" in op or ".HI" in op
            c["imad"] += 1
            c["imad_wide_hi"] += wide
            c["imad_slots"] += 2 if wide else 1
        elif base in ("BRA", "NOP", "EXIT", "BSYNC", "BSSY"):
            c["control"] += 1
        else:
            c["alu"] += 1
            c[base] += 1
    return {k: v / 4 for k, v in sorted(c.items())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "cuobjdump")
    ap.add_argument("--json", help="write the counts here")
    args = ap.parse_args()
    if "NVDISASM_PATH" not in os.environ and not shutil.which("nvdisasm"):
        print("warning: nvdisasm not on PATH; cuobjdump --dump-sass needs it")
    funcs = split_functions(dump_sass(args.cuobjdump))
    rows = {}
    for name in sorted(funcs):
        if name.startswith("chain_"):
            rows[name[6:]] = classify(loop_body(funcs[name]))
    cols = ["fp64", "DFMA", "DADD", "imad", "imad_wide_hi", "imad_slots", "alu", "total"]
    print(f"{'variant':12s}" + "".join(f"{c:>13s}" for c in cols))
    for name, r in rows.items():
        print(f"{name:12s}" + "".join(f"{r.get(c, 0):13.1f}" for c in cols))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
