"""``python -m provetop.kernels.cpu_bench``: time the CPU backend (the numbers in docs/kernels.md).

Why a script: the 2^12-partition budget (3 s on a 2-core machine) is a requirement, so the
measurement must be reproducible with one command. Every timed result is also verified with
the exact identities, so a fast wrong answer cannot pass as a measurement.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import numpy as np

from provetop.kernels.constants import FR_MODULUS as R
from provetop.kernels.cpu import msm, ntt, srs
from provetop.kernels.cpu.srs import check_h_identity, check_msm_identity, powers
from provetop.kernels.cpu_backend import CpuBackend
from provetop.kernels.layout import (
    fr_from_limbs,
    fr_to_limbs,
    g1_from_limbs,
    random_fr,
    random_fr_limbs,
)


def _partition(n: int, use_arkworks: bool | None, repeats: int) -> list[float]:
    be = CpuBackend(use_arkworks=use_arkworks)
    gen = np.random.default_rng()
    tau = random.Random().randrange(R)
    secrets = powers(tau, n)
    pts = be.srs(fr_to_limbs(secrets, montgomery=False))
    times = []
    for _ in range(repeats):
        a, b = random_fr_limbs(n, gen), random_fr_limbs(n, gen)
        av, bv = fr_from_limbs(a), fr_from_limbs(b)
        c = fr_to_limbs([x * y % R for x, y in zip(av, bv, strict=True)])
        sc = random_fr_limbs(n, gen, montgomery=False)
        t0 = time.perf_counter()
        h = be.h_step(a, b, c)
        res = be.msm(pts, sc)
        times.append(time.perf_counter() - t0)
        hv = fr_from_limbs(h, montgomery=False)
        assert check_h_identity(av, bv, fr_from_limbs(c), hv, tau), "H identity failed"
        ks = fr_from_limbs(sc, montgomery=False)
        assert check_msm_identity(secrets, ks, g1_from_limbs(res)[0]), "MSM identity failed"
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-n", type=int, default=12, help="partition size 2^k (default 12)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ntt-max", type=int, default=16, help="largest NTT size 2^k to time")
    parser.add_argument("--srs-max", type=int, default=14, help="largest SRS size 2^k to time")
    parser.add_argument("--no-arkworks", action="store_true", help="force the plain-Python path")
    args = parser.parse_args(argv)

    try:
        import gmpy2  # noqa: F401

        has_gmpy2 = True
    except ImportError:
        has_gmpy2 = False
    ark = False if args.no_arkworks else None
    using_ark = msm.ARKWORKS_AVAILABLE and not args.no_arkworks
    print(f"arkworks: {'yes' if using_ark else 'no'}, gmpy2: {'yes' if has_gmpy2 else 'no'}")

    n = 1 << args.log_n
    times = _partition(n, ark, args.repeats)
    print(
        f"partition 2^{args.log_n} (h_step + MSM, verified): median {statistics.median(times):.3f}s"
        f" min {min(times):.3f}s max {max(times):.3f}s over {len(times)}"
    )
    for k in range(10, args.ntt_max + 1, 2):
        xs = random_fr(1 << k)
        ntt.ntt(xs)  # warm the twiddle cache
        t0 = time.perf_counter()
        ntt.ntt(xs)
        print(f"ntt 2^{k}: {time.perf_counter() - t0:.3f}s")
    for k in range(12, args.srs_max + 1, 2):
        secrets = random_fr(1 << k)
        t0 = time.perf_counter()
        srs.srs_points(secrets, use_arkworks=ark)
        print(f"srs 2^{k}: {time.perf_counter() - t0:.3f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
