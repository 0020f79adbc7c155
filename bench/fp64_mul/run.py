"""FP64 (DFMA) against integer (IMAD) Montgomery multiplication on the GPU: exactness, then rate.

Run from the repository root:  PYTHONPATH=. python3 bench/fp64_mul/run.py --out DIR

1. Compiles fp64_bench.cu with NVRTC (cupy.RawModule) for the device's architecture.
2. Exactness of every variant's map kernel against Python integers: fresh random inputs plus
   stress patterns (0, 1, m-1, all-ones 52-bit limbs, all-ones 64-bit words, top bits set,
   values just below m), outputs poisoned with a sentinel before the launch and every element
   checked to be written; the FP64 variants' conversions to and from mont.cuh's form (mapc_*);
   and a sample of every chain kernel's outputs (z^(C(C+1)/2 + C iters), Montgomery form:
   z^(10 + 4 iters) for C = 4 chains, z^(36 + 8 iters) for C = 8).
3. Rate: C independent chains per thread (CHAINS: 4 as fr_mul_chain4, 8 for the *_c8
   variants), n = SMs x 2048 threads, iters calibrated so that a launch takes ~--target-ms;
   CUDA events, warm-up, median of --repeats. G mults/s counts the C x iters chain steps per
   thread (the set-up, combine and conversion multiplications, ~2C per thread, are left out:
   < 1% at the calibrated iters).

Prints the table (G mults/s, ratio to the field's integer baseline: fr_r2 = kernels/cuda/
fr_mul.cuh's fr_mul_r2 for Fr, mont.cuh's generic CIOS for Fp) LAST and writes
DIR/fp64_mul.json. An exactness failure is printed, the timing still runs, the exit code is 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))

from provetop.kernels.constants import FP_MODULUS, FR_MODULUS  # noqa: E402

M64 = (1 << 64) - 1
SENTINEL = 0xA5A5A5A5A5A5A5A5
# field: modulus, 64-bit words per element, mont.cuh radix bits, FP64 limbs
FIELDS = {"fr": (FR_MODULUS, 4, 256, 5), "fp": (FP_MODULUS, 6, 384, 8)}
# name: field, radix bits of the map kernel (None: chain only), lazy output, has mapc_ kernel
VARIANTS: dict[str, tuple[str, int | None, bool, bool]] = {
    "fr_r2": ("fr", 256, False, False),
    "fr_generic": ("fr", 256, False, False),
    "fr_f64": ("fr", 260, False, True),
    "fr_f64_lazy": ("fr", 260, True, False),
    "fr_f64_s5": ("fr", 260, False, True),
    "fr_mix": ("fr", None, False, False),
    "fp_generic": ("fp", 384, False, False),
    "fp_kara": ("fp", 384, False, False),
    "fr_kara": ("fr", 256, False, False),
    "fp_f64": ("fp", 416, False, True),
    "fp_f64_lazy": ("fp", 416, True, False),
    "fp_f64_s8": ("fp", 416, False, True),
    "fp_mix": ("fp", None, False, False),
    # 8 chains per thread; the multiplication is the 4-chain variant's, so is its map check
    "fr_r2_c8": ("fr", None, False, False),
    "fr_f64_c8": ("fr", None, False, False),
    "fr_f64_lazy_c8": ("fr", None, False, False),
    "fp_generic_c8": ("fp", None, False, False),
    "fp_f64_c8": ("fp", None, False, False),
    "fr_f64_c8b": ("fr", None, False, False),
    "fr_f64_lazy_c8b": ("fr", None, False, False),
    "fr_r2_c8b": ("fr", None, False, False),
}
# independent chains per thread of chain_<variant> (fp64_bench.cu's chainN<V, C>)
CHAINS = {v: 8 if v.endswith(("_c8", "_c8b")) else 4 for v in VARIANTS}
BASELINE = {"fr": "fr_r2", "fp": "fp_generic"}
DESCRIPTION = {
    "fr_r2": "fr_mul.cuh fr_mul_r2 (IMAD, today's NTT)",
    "fr_generic": "mont.cuh generic CIOS (IMAD)",
    "fr_f64": "FP64, 5 x 52-bit limbs, all products DFMA",
    "fr_f64_lazy": "as fr_f64, output < 2r (no final subtraction)",
    "fr_f64_s5": "FP64 + reduction lo halves on IMAD",
    "fr_mix": "2 chains fr_mul_r2 + 2 chains fr_f64",
    "fp_generic": "mont.cuh generic CIOS (IMAD, g1.cuh's)",
    "fp_kara": "mont.cuh Karatsuba product + REDC rows (IMAD)",
    "fr_kara": "mont.cuh Karatsuba product + REDC rows (IMAD)",
    "fp_f64": "FP64, 8 x 52-bit limbs, all products DFMA",
    "fp_f64_lazy": "as fp_f64, output < 2p",
    "fp_f64_s8": "FP64 + reduction lo halves on IMAD",
    "fp_mix": "2 chains generic + 2 chains fp_f64",
    "fr_r2_c8": "fr_r2, 8 chains per thread",
    "fr_f64_c8": "fr_f64, 8 chains per thread",
    "fr_f64_lazy_c8": "fr_f64_lazy, 8 chains per thread",
    "fp_generic_c8": "fp_generic, 8 chains per thread",
    "fp_f64_c8": "fp_f64, 8 chains per thread",
    "fr_f64_c8b": "fr_f64, 8 chains, registers capped for 2 blocks/SM",
    "fr_f64_lazy_c8b": "fr_f64_lazy, 8 chains, capped for 2 blocks/SM",
    "fr_r2_c8b": "fr_r2, 8 chains, capped for 2 blocks/SM",
}


def chain_exponent(chains: int, iters: int) -> int:
    """Exponent of z in a chain kernel's output: chains start at z^1..z^C, each gains z^iters."""
    return chains * (chains + 1) // 2 + chains * iters


def to_words(vals: list[int], w: int) -> np.ndarray:
    return np.array([[(v >> (64 * k)) & M64 for k in range(w)] for v in vals], dtype=np.uint64)


def from_words(arr: np.ndarray) -> list[int]:
    rows = arr.tolist()
    return [sum(int(x) << (64 * k) for k, x in enumerate(r)) for r in rows]


def stress_values(m: int, words: int, limbs: int, rb_old: int) -> list[int]:
    """Edge values < m: extremes, all-ones 52-bit limbs / 64-bit words, top bits set."""
    top = m >> (52 * (limbs - 1))
    vals = [0, 1, 2, 3, m - 1, m - 2, m - 3, m >> 1, (m >> 1) + 1, pow(2, rb_old, m)]
    vals += [pow(2, 52 * limbs, m), (1 << (m.bit_length() - 1)), (1 << (m.bit_length() - 1)) - 1]
    vals += [(1 << (52 * k)) - 1 for k in range(1, limbs)]  # k low limbs all 2^52 - 1
    vals += [((top - 1) << (52 * (limbs - 1))) | ((1 << (52 * (limbs - 1))) - 1)]
    vals += [(1 << (64 * k)) - 1 for k in range(1, words)]  # 64-bit words all ones
    vals += [m - (1 << k) for k in (1, 32, 51, 52, 53, 64, 104, 200)]
    rng = random.Random(7)
    for _ in range(6):  # random values with every limb's top bits set, below m
        v = 0
        for j in range(limbs):
            v |= (rng.getrandbits(52) | (0xF << 48)) << (52 * j)
        vals.append(v % m)
    return sorted({v % m for v in vals})


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        import cupy as cp

        self.cp = cp
        self.args = args
        dev = cp.cuda.Device()
        self.sms = dev.attributes["MultiProcessorCount"]
        # CuPy adds -arch for the device (sm_90 on the H200). Its on-disk cache keys on the
        # source text only: a digest of the included headers goes into the text.
        opts = ("-std=c++17", f"-I{REPO / 'kernels' / 'cuda' / 'src'}", f"-I{HERE}")
        src_dir = REPO / "kernels" / "cuda" / "src"
        headers = [HERE / "fp64_mont.cuh"] + sorted(src_dir.rglob("*.cuh"))
        digest = hashlib.sha256(b"".join(h.read_bytes() for h in headers)).hexdigest()
        src = f"// headers {digest}\n" + (HERE / "fp64_bench.cu").read_text()
        t0 = time.time()
        self.mod = cp.RawModule(code=src, options=opts, backend="nvrtc")
        self.mod.compile()
        self.fns: dict[str, Any] = {}
        for v in VARIANTS:
            self.fns[f"chain_{v}"] = self.mod.get_function(f"chain_{v}")
        self.compile_s = time.time() - t0
        self.failures: list[str] = []

    def fn(self, name: str) -> Any:
        if name not in self.fns:
            self.fns[name] = self.mod.get_function(name)
        return self.fns[name]

    def launch_map(self, kname: str, a: list[int], b: list[int], w: int) -> list[int]:
        cp = self.cp
        n = len(a)
        da, db = cp.asarray(to_words(a, w)), cp.asarray(to_words(b, w))
        out = cp.full((n, w), np.uint64(SENTINEL), dtype=cp.uint64)
        self.fn(kname)(((n + 255) // 256,), (256,), (out, da, db, np.uint64(n)))
        host = cp.asnumpy(out)
        unwritten = int(np.all(host == np.uint64(SENTINEL), axis=1).sum())
        if unwritten:
            self.fail(f"{kname}: {unwritten} of {n} outputs not written (sentinel left)")
        return from_words(host)

    def fail(self, msg: str) -> None:
        print(f"EXACTNESS FAILURE: {msg}", flush=True)
        self.failures.append(msg)

    def check_exact(self, v: str, n_random: int) -> dict[str, Any]:
        field, rb, lazy, has_conv = VARIANTS[v]
        m, w, rb_old, limbs = FIELDS[field]
        res: dict[str, Any] = {}
        if rb is None:
            return res
        rng = random.Random()
        st = stress_values(m, w, limbs, rb_old)
        pairs = [(x, y) for x in st for y in st]
        pairs += [(rng.randrange(m), rng.randrange(m)) for _ in range(n_random)]
        pairs += [(x, rng.randrange(m)) for x in st for _ in range(8)]
        a, b = [p[0] for p in pairs], [p[1] for p in pairs]
        rinv = pow(2, -rb, m)
        got = self.launch_map(f"map_{v}", a, b, w)
        bad = 0
        for x, y, g in zip(a, b, got, strict=True):
            want = x * y * rinv % m
            ok = (g < 2 * m and g % m == want) if lazy else g == want
            if not ok:
                bad += 1
                if bad <= 3:
                    self.fail(f"map_{v}: a={x:#x} b={y:#x} got {g:#x} want {want:#x}")
        if bad:
            self.fail(f"map_{v}: {bad} of {len(pairs)} products wrong")
        res["map_checked"] = len(pairs)
        res["map_wrong"] = bad
        if has_conv:  # mont.cuh form in and out: a b 2^-rb_old
            rinv_old = pow(2, -rb_old, m)
            a2, b2 = a[: 4096 + len(st) ** 2], b[: 4096 + len(st) ** 2]
            got = self.launch_map(f"mapc_{v}", a2, b2, w)
            badc = sum(g != x * y * rinv_old % m for x, y, g in zip(a2, b2, got, strict=True))
            if badc:
                self.fail(f"mapc_{v}: {badc} of {len(a2)} conversions+products wrong")
            res["conv_checked"], res["conv_wrong"] = len(a2), badc
        return res

    def random_io(self, field: str, n: int) -> Any:
        m, w, _, _ = FIELDS[field]
        rng = np.random.default_rng()
        words = rng.integers(0, 2**63, size=(n, w), dtype=np.uint64) * np.uint64(2)
        words += rng.integers(0, 2, size=(n, w), dtype=np.uint64)
        words[:, w - 1] &= np.uint64((1 << (m.bit_length() - 1 - 64 * (w - 1))) - 1)  # < m
        return self.cp.asarray(words)

    def check_chain(self, v: str) -> dict[str, Any]:
        field = VARIANTS[v][0]
        m, w, rb_old, _ = FIELDS[field]
        n, iters = 4096, 37
        io = self.random_io(field, n)
        z = from_words(self.cp.asnumpy(io))
        self.fn(f"chain_{v}")(((n + 255) // 256,), (256,), (io, np.int32(iters), np.uint64(n)))
        got = from_words(self.cp.asnumpy(io))
        R, e = pow(2, rb_old, m), chain_exponent(CHAINS[v], iters)
        rinv = pow(R, -1, m)
        idx = random.Random().sample(range(n), 256)
        bad = sum(got[i] != pow(z[i] * rinv % m, e, m) * R % m for i in idx)
        if bad:
            self.fail(f"chain_{v}: {bad} of {len(idx)} sampled chain outputs wrong")
        return {"chains": CHAINS[v], "chain_checked": len(idx), "chain_wrong": bad}

    def time_chain(self, v: str) -> dict[str, Any]:
        cp, args = self.cp, self.args
        field = VARIANTS[v][0]
        n = self.sms * 2048
        io = self.random_io(field, n)
        fn = self.fn(f"chain_{v}")
        grid, block = ((n + 255) // 256,), (256,)

        def once(iters: int) -> float:
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            fn(grid, block, (io, np.int32(iters), np.uint64(n)))
            stop.record()
            stop.synchronize()
            return cp.cuda.get_elapsed_time(start, stop)

        once(8)
        probe = 32
        t = once(probe)
        iters = int(min(8192, max(16, probe * args.target_ms / max(t, 1e-3))))
        for _ in range(args.warmup):
            once(iters)
        times = [once(iters) for _ in range(args.repeats)]
        med = statistics.median(times)
        rate = CHAINS[v] * n * iters / (med * 1e-3)
        regs = None
        try:
            regs = int(fn.attributes["num_regs"])
        except Exception:  # attribute names differ across CuPy versions
            pass
        return {
            "n_threads": n,
            "iters": iters,
            "median_ms": med,
            "min_ms": min(times),
            "max_ms": max(times),
            "repeats": len(times),
            "mults_per_s": rate,
            "registers": regs,
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for fp64_mul.json")
    ap.add_argument("--repeats", type=int, default=25, help="timed launches per variant (>= 20)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--target-ms", type=float, default=25.0, help="calibrated launch time")
    ap.add_argument("--random", type=int, default=1 << 15, help="random pairs per variant")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset")
    args = ap.parse_args(argv)
    names = [v for v in args.variants.split(",") if v]
    for v in names:
        if v not in VARIANTS:
            ap.error(f"unknown variant {v!r}; known: {', '.join(VARIANTS)}")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    bench = Bench(args)
    print(f"NVRTC compile {bench.compile_s:.1f} s, {bench.sms} SMs", flush=True)
    results: dict[str, dict[str, Any]] = {}
    for v in names:
        r = bench.check_exact(v, args.random)
        r.update(bench.check_chain(v))
        results[v] = r
        print(f"exactness {v}: {r}", flush=True)
    for v in names:
        results[v].update(bench.time_chain(v))
        print(
            f"timed {v}: {results[v]['mults_per_s'] / 1e9:.2f} G/s "
            f"({results[v]['iters']} iters, {results[v]['median_ms']:.2f} ms)",
            flush=True,
        )

    from provetop.kernels.bench_meta import bench_command, gpu_bench_meta

    meta = gpu_bench_meta(bench.cp, bench_command(sys.argv if argv is None else argv))
    meta["nvrtc_compile_s"] = round(bench.compile_s, 2)
    for v, r in results.items():
        base = results.get(BASELINE[VARIANTS[v][0]])
        r["ratio_to_baseline"] = r["mults_per_s"] / base["mults_per_s"] if base else None
        r["description"] = DESCRIPTION[v]
    doc = {
        "meta": meta,
        "exact": not bench.failures,
        "failures": bench.failures,
        "variants": results,
    }
    path = out_dir / "fp64_mul.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}")
    print()
    print(f"{'variant':15s} {'G mults/s':>10s} {'ratio':>7s} {'regs':>5s}  exact  what")
    for v, r in results.items():
        ratio = r["ratio_to_baseline"]
        wrong = r.get("map_wrong", 0) + r.get("conv_wrong", 0) + r.get("chain_wrong", 0)
        print(
            f"{v:15s} {r['mults_per_s'] / 1e9:10.2f} "
            f"{(f'{ratio:.3f}' if ratio else '-'):>7s} {str(r['registers']):>5s}  "
            f"{'yes' if not wrong else 'NO':5s}  {r['description']}"
        )
    print(f"(ratio: to {BASELINE['fr']} for fr_*, to {BASELINE['fp']} for fp_*)")
    if bench.failures:
        print(f"EXACTNESS FAILED ({len(bench.failures)} messages above)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
