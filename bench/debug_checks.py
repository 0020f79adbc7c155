"""Diagnose the engine's GPU checks on a small CUDA run: each identity's pieces, next to the
same checks computed from host copies (provetop.kernels.cuda.check) and the CPU reference."""

from __future__ import annotations

import sys

from provetop.engine.partition.cuda import CudaPartition
from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.kernels.constants import FR_MODULUS as R
from provetop.kernels.cpu.g1 import GENERATOR, scalar_mul
from provetop.kernels.cuda import check as cuda_check
from provetop.kernels.layout import fr_from_limbs, g1_from_limbs

K = int(sys.argv[1]) if len(sys.argv) > 1 else 12
orig_sums, orig_checks, orig_inputs = (
    CudaPartition.check_sums,
    CudaPartition.verify,
    CudaPartition.check_inputs,
)
stash = {}


def inputs(self, att, a, b, c):
    stash["abc_dev"] = [v.get() for v in (a, b, c)]
    return orig_inputs(self, att, a, b, c)


def device_sums(self, att, w, h):
    stash["h"] = h.get()
    return orig_sums(self, att, w, h)


def checks(self, att, w, h, results):
    srs, sizes = self.ctx.srs, self.ctx.sizes
    n = 1 << self.ctx.config.domain_log
    tau = srs.tau
    A, B, C = att.abc_at_tau
    h = att.device_sums["h"]  # h(tau), summed on the device inside the region
    z = (pow(tau, n, R) - 1) % R
    print("H identity (device sums):", (A * B - C) % R == h * z % R)
    abc_host = [w.a, w.b, w.c]
    same = [bool((x == y).all()) for x, y in zip(stash["abc_dev"], abc_host, strict=True)]
    print("device a, b, c == host a, b, c:", same)
    A2, B2, C2 = cuda_check.interpolants_at(*abc_host, tau)
    print("interpolants host == device:", (A2, B2, C2) == (A, B, C))
    h2 = cuda_check.dot_powers(stash["h"], tau)
    print(
        "h(tau) host == device:", h2 == h, " H identity (host):", (A2 * B2 - C2) % R == h2 * z % R
    )
    if n <= 1 << 12:
        from provetop.kernels.cpu.ntt import evaluate_interpolant

        a_i, b_i, c_i = (fr_from_limbs(v) for v in (w.a, w.b, w.c))
        ok = all(x * y % R == v for x, y, v in zip(a_i, b_i, c_i, strict=True))
        print("c == a*b on the host:", ok)
        want = tuple(evaluate_interpolant([a_i, b_i, c_i], tau))
        print("CPU interpolants == device:", want == (A, B, C))
    # the same sums with one chunk per launch (no grid-stride iterations) and tiny chunks
    for chunk in (1 << 12, 1 << 21):
        got = cuda_check.interpolants_at(*abc_host, tau, chunk=chunk)
        print(f"interpolants chunk {chunk} == device:", got == (A, B, C))
    terms = [(srs.sigmas[q], getattr(sizes, q)) for q in ("l", "a", "b_g1")]
    dots = cuda_check.dot_powers_prefixes(w.z, terms)
    for q, e in zip(("l", "a", "b_g1"), dots, strict=True):
        m = getattr(sizes, q)
        slow = cuda_check.dot_powers(w.z[:m], srs.sigmas[q])
        ok = scalar_mul(GENERATOR, e) == g1_from_limbs(results[q])[0]
        same = e == att.device_sums[q]
        print(f"msm {q}: prefix dot == single dot {e == slow}; == region's {same}; identity {ok}")
    print("msm h identity:", scalar_mul(GENERATOR, h) == g1_from_limbs(results["h"])[0])
    res = orig_checks(self, att, w, h, results)
    print("engine check says:", res)
    return res


CudaPartition.check_inputs = inputs
CudaPartition.check_sums = device_sums
CudaPartition.verify = checks
cfg = from_preset(
    "porep-32g",
    backend="cuda",
    domain_log=K,
    partitions=1,
    proofs=1,
    workers_per_device=1,
    verify="always",
)
with Engine(cfg, listen=False) as e:
    e.wait()
print("engine error:", e.error)
