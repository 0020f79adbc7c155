"""GPU NTT and H step against the CPU reference and exact identities (marked ``gpu``).

Sizes and how each is checked (fresh random inputs every run, outputs and scratch poisoned
with 0xFF.. before each run):
- k in {1, 2, 5, 10, 11}: every (inverse, coset, input order, output order) combination,
  batched (2 vectors), compared element by element with kernels/cpu/ntt.py;
- k = 16: four combinations compared with the reference directly (< 1 s each there);
- k = 20: the Python reference takes ~25 s per transform, so instead: every combination's
  round trip (forward then inverse gives the input back, on the device) and, for each, the
  output at 3 random positions against a direct Horner evaluation of the polynomial on the GPU
  (P(g^c w^i), independent of the NTT code);
- H step: the full output against the reference at k = 10, and the identity
  (A B - C)(tau) = H(tau) Z(tau) at a random tau for k up to 24, evaluations on the GPU;
  the checks above run the plans without the small ones' tiles and tables (``small=False``,
  the kind the streamed H step runs) through CudaNtt's executor;
- the small plans (what ``CudaNtt.ntt`` and ``h_step`` run): the same checks at k = 1 .. 13
  (every combination, each twice so the cached launches run with other buffers), 15, 16
  (reference), and at 17, 20, 21, 22 bit-equality with the plans above plus round trips and
  Horner spot checks; their H step against the reference (k = 5, 12) and the identity at tau
  (k = 1 .. 22);
- the packed driver launches from two threads sharing one cached program, and from a thread
  whose first CUDA call is the transform, against one thread's output.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from provetop.kernels.constants import FR_COSET_GENERATOR, FR_MODULUS

pytestmark = pytest.mark.gpu

R = FR_MODULUS
POISON = np.uint64(0xFFFFFFFFFFFFFFFF)
COMBOS = [
    (inv, coset, io, oo)
    for inv in (False, True)
    for coset in (False, True)
    for io in ("natural", "bitrev")
    for oo in ("natural", "bitrev")
]


class PlainPlans:
    """CudaNtt's executor running the plans without the small ones' 2^11 tiles, whole-block
    transforms and full factor tables (``small=False``: the kind the streamed H step runs), so
    that the planner's other branch stays checked against the reference, and the small plans
    have an oracle where the reference is too slow."""

    def __init__(self, cp, ntt) -> None:
        self.cp, self.eng = cp, ntt

    def ntt(self, x, *, inverse=False, coset=False, input_order="natural", output_order="natural",
            out=None):  # fmt: skip
        from provetop.kernels.cuda.ntt_plan import log2_size, plan_ntt

        k = log2_size(x.shape[-2])
        out = self.cp.empty_like(x) if out is None else out
        plans = plan_ntt(k, inverse=inverse, coset=coset, input_order=input_order,
                         output_order=output_order, max_levels=self.eng.levels_for(k),
                         small=False, lowest_levels=self.eng.lowest_for(k))  # fmt: skip
        batch = x.shape[0] if x.ndim == 3 else 1
        stream = self.cp.cuda.get_current_stream()
        self.eng.run_plan(plans, {"x": x, "out": out}, batch, stream)
        return out

    def h_step(self, a, b, c, *, out=None, allocator=None):
        from provetop.kernels.cuda.ntt_plan import log2_size, plan_h_step

        cp, n = self.cp, a.shape[0]
        k = log2_size(n)
        out = cp.empty((n, 4), dtype=cp.uint64) if out is None else out
        wb, wc = (cp.ndarray((n, 4), dtype=cp.uint64, memptr=allocator(32 * n)) for _ in "bc")
        bufs = {"a": a, "b": b, "c": c, "out": out, "wb": wb, "wc": wc}
        plans = plan_h_step(k, self.eng.levels_for(k, h_step=True), small=False)
        self.eng.run_plan(plans, bufs, 1, cp.cuda.get_current_stream())
        return out[: n - 1]


@pytest.fixture(scope="module")
def eng(cp):
    """The plans without the small ones (:class:`PlainPlans`), which the small ones are
    checked against at the sizes the reference is too slow for."""
    from provetop.kernels.cuda.ntt import CudaNtt

    return PlainPlans(cp, CudaNtt())


def _rand(n: int) -> list[int]:
    rng = random.Random()
    return [rng.randrange(R) for _ in range(n)]


def _reorder(vals: list[int], order: str) -> list[int]:
    from provetop.kernels.cpu import ntt as ref

    if order == "natural":
        return vals
    idx = ref.bitrev_indices(len(vals).bit_length() - 1)
    return [vals[int(i)] for i in idx]


def _brev(i: int, k: int) -> int:
    return int(format(i, f"0{k}b")[::-1], 2) if k else 0


def _poisoned(cp, shape):
    return cp.full(shape, POISON, dtype=cp.uint64)


class PoisonAllocator:
    """Scratch through the allocator hook, pre-filled with 0xFF.. (and counted)."""

    def __init__(self, cp) -> None:
        self.cp = cp
        self.keep: list = []

    def __call__(self, nbytes: int):
        buf = self.cp.full((nbytes + 7) // 8, POISON, dtype=self.cp.uint64)
        self.keep.append(buf)
        return buf.data


def test_device_field_ops_match_python_ints(cp) -> None:
    from provetop.kernels.cuda import fr as cuda_fr
    from provetop.kernels.cuda.ntt_plan import from_words, to_words

    n = 4096
    edges = [0, 1, 2, R - 1, R - 2, (1 << 256) % R]
    xs = _rand(n - len(edges)) + edges
    ys = _rand(n - len(edges)) + edges[::-1]
    a = cp.asarray(to_words(xs, False))  # raw words: read as Montgomery or canonical below
    b = cp.asarray(to_words(ys, False))
    rinv = pow(1 << 256, -1, R)
    expect = {
        "mul": lambda x, y: x * y * rinv % R,
        "sqr": lambda x, y: x * x * rinv % R,
        "add": lambda x, y: (x + y) % R,
        "sub": lambda x, y: (x - y) % R,
        "neg": lambda x, y: -x % R,
        "to_mont": lambda x, y: x * (1 << 256) % R,
        "from_mont": lambda x, y: x * rinv % R,
        "inv": lambda x, y: (1 << 512) * pow(x, -1, R) % R if x else 0,
    }
    for op, f in expect.items():
        got = from_words(cp.asnumpy(cuda_fr.elementwise(op, a, b)), False)
        for x, y, g in zip(xs, ys, got, strict=True):
            assert g == f(x, y), (op, hex(x), hex(y))


def test_device_fr_mul_variants_match_python_ints(cp) -> None:
    """Every multiplication of kernels/cuda/fr_mul.cuh (and mont.cuh's generic one) in its
    device build: fresh random inputs plus the edge values of tests/kernels/test_cuda_fr_mul_host.py
    (low words 0 / 0xffffffff exercise the r_0 = 1, r_1 = 2^32 - 1 shortcuts), output
    poisoned."""
    from provetop.kernels.cuda.ntt import module
    from provetop.kernels.cuda.ntt_plan import from_words, to_words
    from tests.kernels.test_cuda_fr_mul_host import edge_values

    edges = edge_values()
    xs = [a for a in edges for _ in edges] + _rand(8192)
    ys = [b for _ in edges for b in edges] + _rand(8192)
    n = len(xs)
    a = cp.asarray(to_words(xs, False))
    b = cp.asarray(to_words(ys, False))
    out = _poisoned(cp, (3 * n, 4))
    module().get_function("fr_mul_variants")(((n + 255) // 256,), (256,), (out, a, b, np.uint64(n)))
    got = from_words(cp.asnumpy(out), False)
    rinv = pow(1 << 256, -1, R)
    for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
        want = x * y * rinv % R
        assert got[3 * i : 3 * i + 3] == [want] * 3, (hex(x), hex(y), got[3 * i : 3 * i + 3])


@pytest.mark.parametrize("k", [1, 2, 5, 10, 11])
def test_ntt_matches_reference_all_combinations(cp, eng, k: int) -> None:
    from provetop.kernels.cpu import ntt as ref
    from provetop.kernels.cuda.ntt_plan import from_words, to_words

    n, batch = 1 << k, 2
    for inv, coset, io, oo in COMBOS:
        vecs = [_rand(n) for _ in range(batch)]
        x = cp.asarray(np.stack([to_words(v, True) for v in vecs]))
        out = _poisoned(cp, x.shape)
        eng.ntt(x, inverse=inv, coset=coset, input_order=io, output_order=oo, out=out)
        host = cp.asnumpy(out)
        for bi in range(batch):
            want = ref.ntt(_reorder(vecs[bi], io), inverse=inv, coset=coset)
            got = _reorder(from_words(host[bi], True), oo)
            assert got == want, (k, inv, coset, io, oo, bi)


def test_ntt_matches_reference_2_16(cp, eng) -> None:
    from provetop.kernels.cpu import ntt as ref
    from provetop.kernels.cuda.ntt_plan import from_words, to_words

    k, n = 16, 1 << 16
    rng = random.Random()
    for inv in (False, True):
        for coset in (False, True):
            io, oo = rng.choice(("natural", "bitrev")), rng.choice(("natural", "bitrev"))
            vals = _rand(n)
            x = cp.asarray(to_words(vals, True))
            out = _poisoned(cp, x.shape)
            eng.ntt(x, inverse=inv, coset=coset, input_order=io, output_order=oo, out=out)
            want = ref.ntt(_reorder(vals, io), inverse=inv, coset=coset)
            assert _reorder(from_words(cp.asnumpy(out), True), oo) == want, (k, inv, coset, io, oo)


def _natural(cp, arr, order: str, k: int):
    """A natural-order copy of a vector stored in ``order`` (device bit-reversal kernel)."""
    if order == "natural":
        return arr
    from provetop.kernels.cuda.ntt import module

    out = cp.empty_like(arr)
    fn = module().get_function("fr_bitrev_permute")
    fn((((1 << k) + 255) // 256, 1), (256,), (out, cp.ascontiguousarray(arr), np.int32(k)))
    return out


def test_ntt_2_20_round_trip_and_point_evaluations(cp, eng) -> None:
    from provetop.kernels.cpu.ntt import domain_root
    from provetop.kernels.cuda import fr as cuda_fr
    from provetop.kernels.cuda.ntt_plan import from_words

    k = 20
    n = 1 << k
    w = domain_root(k)
    rng = random.Random()
    for inv, coset, io, oo in COMBOS:
        x = cuda_fr.random_fr((n,))
        y = _poisoned(cp, x.shape)
        eng.ntt(x, inverse=inv, coset=coset, input_order=io, output_order=oo, out=y)
        back = _poisoned(cp, x.shape)
        eng.ntt(y, inverse=not inv, coset=coset, input_order=oo, output_order=io, out=back)
        assert bool(cp.all(back == x)), ("round trip", inv, coset, io, oo)
        # exact spot checks through an independent Horner evaluation on the GPU
        xn = _natural(cp, x, io, k)
        yn = _natural(cp, y, oo, k)
        shift = FR_COSET_GENERATOR if coset else 1
        for _ in range(3):
            i = rng.randrange(n)
            if not inv:  # y[i] = P_x(g^c w^i)
                got = from_words(cp.asnumpy(yn[i]), True)[0]
                assert got == cuda_fr.evaluate(xn, shift * pow(w, i, R) % R), (inv, coset, i)
            else:  # x[i] = P_y(g^c w^i): y holds the coefficients of the interpolant
                got = from_words(cp.asnumpy(xn[i]), True)[0]
                assert got == cuda_fr.evaluate(yn, shift * pow(w, i, R) % R), (inv, coset, i)


def test_h_step_matches_reference(cp, eng) -> None:
    from provetop.kernels.cpu import ntt as ref
    from provetop.kernels.cuda.ntt_plan import from_words, to_words

    n = 1 << 10
    a, b = _rand(n), _rand(n)
    c = [x * y % R for x, y in zip(a, b, strict=True)]
    c[3] = (c[3] + 5) % R  # unsatisfied on purpose: the top coefficient is non-zero too
    d = [cp.asarray(to_words(v, True)) for v in (a, b, c)]
    out = _poisoned(cp, (n, 4))
    alloc = PoisonAllocator(cp)
    h = eng.h_step(*d, out=out, allocator=alloc)
    assert h.shape == (n - 1, 4) and len(alloc.keep) == 2
    want = [int(v) for v in ref.h_step_objects(*(ref._as_objects(v) for v in (a, b, c)))]
    assert from_words(cp.asnumpy(out), False) == want


@pytest.mark.parametrize("k", [1, 2, 5, 10, 16, 20, 24])
def test_h_identity_at_tau(cp, eng, k: int) -> None:
    from provetop.kernels.cuda import fr as cuda_fr

    n = 1 << k
    a = cuda_fr.random_fr((n,))
    b = cuda_fr.random_fr((n,))
    c = cuda_fr.elementwise("mul", a, b)  # satisfied: a*b = c on the domain
    out = _poisoned(cp, (n, 4))
    h = eng.h_step(a, b, c, out=out, allocator=PoisonAllocator(cp))
    assert not bool(cp.any(out[n - 1])), "deg H must be <= n-2"
    tau = random.Random().randrange(2, R)
    ev = []
    for v in (a, b, c):
        coeffs = _poisoned(cp, (n, 4))
        eng.ntt(v, inverse=True, out=coeffs)
        ev.append(cuda_fr.evaluate(coeffs, tau))
    h_tau = cuda_fr.evaluate(cuda_fr.elementwise("to_mont", h), tau)
    z_tau = (pow(tau, n, R) - 1) % R
    assert (ev[0] * ev[1] - ev[2]) % R == h_tau * z_tau % R


def test_random_fr_continues_one_sequence_across_launches(cp) -> None:
    """A vector made in chunks (``first`` = the chunk's start) is the vector made at once, and
    every row is below 2^254."""
    from provetop.kernels.cuda import fr as cuda_fr

    seed, n = random.getrandbits(64), 5000
    whole = cuda_fr.random_fr((n,), seed=seed)
    cuts = sorted(random.sample(range(1, n), 4))
    parts = [
        cuda_fr.random_fr((hi - lo,), seed=seed, first=lo)
        for lo, hi in zip([0, *cuts], [*cuts, n], strict=True)
    ]
    assert bool(cp.all(cp.concatenate(parts) == whole))
    assert int(whole[:, 3].max()) < 1 << 62
    other = cuda_fr.random_fr((n,), seed=seed ^ 1)
    assert int(cp.count_nonzero(cp.all(other == whole, axis=1))) == 0


# --- the small plans (CudaNtt's) --------------------------------------------------------------


@pytest.fixture(scope="module")
def eng_small(cp):
    """The plans and the cached launches of ``CudaNtt.ntt`` and ``h_step``."""
    from provetop.kernels.cuda.ntt import CudaNtt

    return CudaNtt()


def test_driver_launches_from_two_threads(cp) -> None:
    """The packed arguments of one cached program are rewritten per call: two threads running
    the same shape on their own buffers and streams, many times, each get their own transform
    (compared with another instance's, computed on this thread first)."""
    import threading

    from provetop.kernels.cuda import fr as cuda_fr
    from provetop.kernels.cuda.ntt import CudaNtt

    fast = CudaNtt()
    slow = CudaNtt()
    k, rounds = 18, 40  # two passes
    xs = [cuda_fr.random_fr((1 << k,), seed=random.getrandbits(64)) for _ in range(2)]
    want = [slow.ntt(x) for x in xs]
    cp.cuda.Device().synchronize()  # the threads' streams do not wait for the null stream
    bad: list[str] = []

    def work(t: int) -> None:
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            for r in range(rounds):
                out = _poisoned(cp, xs[t].shape)
                fast.ntt(xs[t], out=out, stream=stream)
                if not bool(cp.all(out == want[t])):
                    bad.append(f"thread {t} round {r}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not bad

    # a thread whose first CUDA call is the transform itself (arrays made elsewhere, no stream
    # of its own): the launch must find or make the device's context
    out = _poisoned(cp, xs[0].shape)
    cp.cuda.Device().synchronize()
    errors: list[BaseException] = []

    def first_call() -> None:
        try:
            fast.ntt(xs[0], out=out)
            cp.cuda.Device().synchronize()
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    th = threading.Thread(target=first_call)
    th.start()
    th.join()
    assert not errors, errors
    assert bool(cp.all(out == want[0]))


@pytest.mark.parametrize("k", [1, 2, 3, 7, 11, 12, 13])
def test_small_ntt_matches_reference_all_combinations(cp, eng_small, k: int) -> None:
    """Every combination, twice each with fresh inputs (the second call reuses the cached
    launches with other buffers), batched, against the CPU reference; outputs poisoned."""
    from provetop.kernels.cpu import ntt as ref
    from provetop.kernels.cuda.ntt_plan import from_words, to_words

    n, batch = 1 << k, 2
    for inv, coset, io, oo in COMBOS:
        for _ in range(2):
            vecs = [_rand(n) for _ in range(batch)]
            x = cp.asarray(np.stack([to_words(v, True) for v in vecs]))
            out = _poisoned(cp, x.shape)
            eng_small.ntt(x, inverse=inv, coset=coset, input_order=io, output_order=oo, out=out)
            host = cp.asnumpy(out)
            for bi in range(batch):
                want = ref.ntt(_reorder(vecs[bi], io), inverse=inv, coset=coset)
                got = _reorder(from_words(host[bi], True), oo)
                assert got == want, (k, inv, coset, io, oo, bi)


@pytest.mark.parametrize("k", [15, 16])
def test_small_ntt_matches_reference_mid_sizes(cp, eng_small, k: int) -> None:
    from provetop.kernels.cpu import ntt as ref
    from provetop.kernels.cuda.ntt_plan import from_words, to_words

    rng = random.Random()
    for inv in (False, True):
        for coset in (False, True):
            io, oo = rng.choice(("natural", "bitrev")), rng.choice(("natural", "bitrev"))
            vals = _rand(1 << k)
            x = cp.asarray(to_words(vals, True))
            out = _poisoned(cp, x.shape)
            eng_small.ntt(x, inverse=inv, coset=coset, input_order=io, output_order=oo, out=out)
            want = ref.ntt(_reorder(vals, io), inverse=inv, coset=coset)
            got = _reorder(from_words(cp.asnumpy(out), True), oo)
            assert got == want, (k, inv, coset, io, oo)


@pytest.mark.parametrize("k", [17, 20, 21, 22])
def test_small_ntt_large_sizes(cp, eng, eng_small, k: int) -> None:
    """Where the Python reference is too slow: every combination equals the default plans'
    output bit for bit (those are checked against the reference above), the round trip gives
    the input back, and 2 random outputs equal a direct Horner evaluation on the GPU."""
    from provetop.kernels.cpu.ntt import domain_root
    from provetop.kernels.cuda import fr as cuda_fr
    from provetop.kernels.cuda.ntt_plan import from_words

    n = 1 << k
    w = domain_root(k)
    rng = random.Random()
    for inv, coset, io, oo in COMBOS:
        x = cuda_fr.random_fr((n,), seed=rng.getrandbits(64))
        y = _poisoned(cp, x.shape)
        eng_small.ntt(x, inverse=inv, coset=coset, input_order=io, output_order=oo, out=y)
        y_default = _poisoned(cp, x.shape)
        eng.ntt(x, inverse=inv, coset=coset, input_order=io, output_order=oo, out=y_default)
        assert bool(cp.all(y == y_default)), ("small != default", k, inv, coset, io, oo)
        back = _poisoned(cp, x.shape)
        eng_small.ntt(y, inverse=not inv, coset=coset, input_order=oo, output_order=io, out=back)
        assert bool(cp.all(back == x)), ("round trip", k, inv, coset, io, oo)
        xn, yn = _natural(cp, x, io, k), _natural(cp, y, oo, k)
        shift = FR_COSET_GENERATOR if coset else 1
        for _ in range(2):
            i = rng.randrange(n)
            point = shift * pow(w, i, R) % R
            if not inv:  # y[i] = P_x(g^c w^i)
                assert from_words(cp.asnumpy(yn[i]), True)[0] == cuda_fr.evaluate(xn, point)
            else:  # x[i] = P_y(g^c w^i)
                assert from_words(cp.asnumpy(xn[i]), True)[0] == cuda_fr.evaluate(yn, point)


@pytest.mark.parametrize("k", [5, 12])
def test_small_h_step_matches_reference(cp, eng_small, k: int) -> None:
    from provetop.kernels.cpu import ntt as ref
    from provetop.kernels.cuda.ntt_plan import from_words, to_words

    n = 1 << k
    for _ in range(2):  # the second call runs the cached launches
        a, b = _rand(n), _rand(n)
        c = [x * y % R for x, y in zip(a, b, strict=True)]
        c[1] = (c[1] + 3) % R
        d = [cp.asarray(to_words(v, True)) for v in (a, b, c)]
        out = _poisoned(cp, (n, 4))
        eng_small.h_step(*d, out=out, allocator=PoisonAllocator(cp))
        want = [int(v) for v in ref.h_step_objects(*(ref._as_objects(v) for v in (a, b, c)))]
        assert from_words(cp.asnumpy(out), False) == want


@pytest.mark.parametrize("k", [1, 3, 13, 21, 22])
def test_small_h_identity_at_tau(cp, eng_small, k: int) -> None:
    from provetop.kernels.cuda import fr as cuda_fr

    n = 1 << k
    a = cuda_fr.random_fr((n,))
    b = cuda_fr.random_fr((n,))
    c = cuda_fr.elementwise("mul", a, b)
    out = _poisoned(cp, (n, 4))
    h = eng_small.h_step(a, b, c, out=out, allocator=PoisonAllocator(cp))
    assert not bool(cp.any(out[n - 1])), "deg H must be <= n-2"
    tau = random.Random().randrange(2, R)
    ev = []
    for v in (a, b, c):
        coeffs = _poisoned(cp, (n, 4))
        eng_small.ntt(v, inverse=True, out=coeffs)
        ev.append(cuda_fr.evaluate(coeffs, tau))
    h_tau = cuda_fr.evaluate(cuda_fr.elementwise("to_mont", h), tau)
    assert (ev[0] * ev[1] - ev[2]) % R == h_tau * ((pow(tau, n, R) - 1) % R) % R


def _assert_equals_default_plans(cp, eng, tag: int) -> None:
    """``eng``'s transforms at 2^14 and 2^20, every direction and order, bit for bit those of a
    CudaNtt with the default plans, outputs poisoned."""
    from provetop.kernels.cuda import fr as cuda_fr
    from provetop.kernels.cuda.ntt import CudaNtt

    default = CudaNtt()
    for k in (14, 20):
        x = cuda_fr.random_fr((1 << k,), seed=random.getrandbits(64))
        for inv, coset, io, oo in COMBOS:
            got, want = _poisoned(cp, x.shape), _poisoned(cp, x.shape)
            eng.ntt(x, inverse=inv, coset=coset, input_order=io, output_order=oo, out=got)
            default.ntt(x, inverse=inv, coset=coset, input_order=io, output_order=oo, out=want)
            assert bool(cp.all(got == want)), (tag, k, inv, coset, io, oo)


@pytest.mark.parametrize("levels", [6, 7, 8, 10])
def test_small_tiles_equal_the_default_plans(cp, levels: int) -> None:
    """Passes of at most ``levels`` levels on tiles of at most 2^levels elements (``bench ntt
    --max-levels``; 10 is the plans before 2^9 tiles became the default), at 2^20 and 2^14 in
    every direction and order: bit for bit the default plans' output (those are checked
    against the reference above), outputs poisoned."""
    from provetop.kernels.cuda.ntt import CudaNtt

    _assert_equals_default_plans(cp, CudaNtt(max_levels=levels), levels)


@pytest.mark.parametrize("lowest", [0, 7, 10])
def test_other_lowest_levels_equal_the_default_plans(cp, lowest: int) -> None:
    """The transforms' pass over the lowest levels given ``lowest`` levels (``bench ntt
    --lowest-levels``; 0 is the plans before a whole tile became the default), at 2^20 and
    2^14 in every direction and order: bit for bit the default plans' output, outputs
    poisoned."""
    from provetop.kernels.cuda.ntt import CudaNtt

    _assert_equals_default_plans(cp, CudaNtt(lowest_levels=lowest), lowest)
