"""The GPU MSM and SRS (kernels/cuda/msm.py, kernels/cuda/srs.py) against the CPU reference.

Why these cases: fresh random points and scalars at every size in {1, 2, 3, 31, 1000, 4096}
(sizes below, at and above a warp and a chunk), and the inputs that break a Pippenger in
practice: all-zero and all-one scalars, a real witness mix (48% zeros, 48% ones, 4% dense),
one point repeated many times (the doubling case inside a bucket), the point at infinity among
the inputs; every call's scratch comes from an allocator that fills memory with 0xff, so a
buffer the pipeline forgets to initialise shows up as a wrong result. At 2^20 and 2^24 the
reference MSM would take hours on a CPU; there the known-secret identity
MSM(k, [s]G) = [<k, s>]G is exact and costs one dot product in Fr and one scalar multiplication.
"""

from __future__ import annotations

import operator
import random

import numpy as np
import pytest

from provetop.kernels import layout
from provetop.kernels.constants import FR_MODULUS as R
from provetop.kernels.cpu import g1
from provetop.kernels.cpu import msm as cmsm
from provetop.kernels.tuning import KernelTuning


@pytest.fixture(scope="module")
def poison(cp):
    """An allocator (nbytes -> MemoryPointer) whose every block starts as 0xff bytes."""
    pool = cp.cuda.MemoryPool()

    def alloc(nbytes: int):
        mem = pool.malloc(nbytes)
        if nbytes:
            cp.cuda.runtime.memset(mem.ptr, 0xFF, nbytes)
        return mem

    return alloc


def random_points(cp, n: int) -> tuple[object, list[g1.Affine]]:
    """n random points [s]G from the GPU SRS (a few checked against the CPU scalar mult)."""
    from provetop.kernels.cuda.srs import srs_random_points

    pts_dev, secrets = srs_random_points(n)
    pts = layout.g1_from_limbs(pts_dev.get())
    for i in random.sample(range(n), min(n, 3)):
        assert pts[i] == g1.scalar_mul(g1.GENERATOR, secrets[i]), "GPU SRS point wrong"
    return pts_dev, pts


def scalars_of(kind: str, n: int, rng: random.Random) -> list[int]:
    if kind == "dense":
        return layout.random_fr(n, rng)
    if kind == "zeros":
        return [0] * n
    if kind == "ones":
        return [1] * n
    # a real witness: 48% zeros, 48% ones, 4% dense
    return [rng.choice((0, 1)) if rng.random() < 0.96 else rng.randrange(R) for _ in range(n)]


def gpu_msm(cp, pts_dev, ks: list[int], alloc, **kw) -> g1.Affine:
    from provetop.kernels.cuda.msm import msm

    sc = cp.asarray(layout.fr_to_limbs(ks, montgomery=False))
    out = msm(pts_dev, sc, allocator=alloc, **kw)
    assert isinstance(out, np.ndarray) and out.shape == (12,) and out.dtype == np.uint64
    return layout.g1_from_limbs(out)[0]


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 2, 3, 31, 1000, 4096])
def test_msm_matches_reference(cp, poison, n: int) -> None:
    rng = random.Random()
    pts_dev, pts = random_points(cp, n)
    for kind in ("dense", "zeros", "ones", "witness"):
        ks = scalars_of(kind, n, rng)
        got = gpu_msm(cp, pts_dev, ks, poison)
        assert got == cmsm.msm_fast(pts, ks), f"GPU MSM != reference (n={n}, {kind})"


def repeated_points_with_infinity(cp, n: int, rng: random.Random):
    """n points drawn from 8 (device, CPU) with 20 of them the point at infinity, and scalars
    repeating every 7th one: the same (point, scalar) pairs, P + P inside buckets. Also the
    8 distinct points (device, CPU)."""
    pts_dev, pts = random_points(cp, 8)
    idx = [rng.randrange(8) for _ in range(n)]
    big = cp.ascontiguousarray(pts_dev[cp.asarray(idx)])
    full = [pts[i] for i in idx]
    for i in rng.sample(range(n), 20):  # the point at infinity (all-zero row)
        big[i] = 0
        full[i] = None
    ks = layout.random_fr(n, rng)
    for i in range(0, n, 7):
        ks[i] = ks[0]
    return big, full, ks, (pts_dev, pts)


@pytest.mark.gpu
def test_repeated_points_and_infinity(cp, poison) -> None:
    rng = random.Random()
    big, full, ks, (pts_dev, pts) = repeated_points_with_infinity(cp, 1000, rng)
    assert gpu_msm(cp, big, ks, poison) == cmsm.msm_fast(full, ks)
    # P and -P in one bucket cancel to infinity
    neg = cp.asarray(layout.g1_to_limbs([g1.affine_neg(pts[0])]))
    both = cp.concatenate([pts_dev[:1], neg])
    assert gpu_msm(cp, both, [5, 5], poison) is None


@pytest.mark.gpu
def test_sort_in_window_groups(cp, poison, monkeypatch: pytest.MonkeyPatch) -> None:
    """The counting sort launched per group of windows (as the rule has it where the counters
    do not fit the L2, here by pretending the L2 holds ``2 g`` windows of counters: g windows
    per count launch, fewer per scatter launch) gives the same sums: the digits below a group
    are computed for their carries only, the ones are counted once."""
    from provetop.kernels.cuda import msm_plan as mp
    from provetop.kernels.cuda import msm_stages

    rng = random.Random()
    pts_dev, pts = random_points(cp, 700)
    for group in (1, 3, 5):
        for kind in ("dense", "witness"):
            ks = scalars_of(kind, 700, rng)
            want = cmsm.msm_fast(pts, ks)
            for c in (7, 16):
                l2 = 2 * group * 4 * (1 << (c - 1))
                assert mp.sort_groups(mp.num_windows(c), 1 << (c - 1), l2)[0] == group
                monkeypatch.setattr(msm_stages, "_l2_bytes", lambda l2=l2: l2)
                got = gpu_msm(cp, pts_dev, ks, poison, window_bits=c)
                assert got == want, f"group {group}, {kind}, c={c}"


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1000, 4096, 20000])
def test_cut_buckets_summed_by_heads_or_by_the_levels(
    cp, poison, monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    """When no bucket holds more than HEADS_MAX_CHUNKS first chunks of entries, one thread per
    cut bucket adds its partial sums (``msm_accumulate_heads``) in place of the levels: the
    same sums as the levels and the reference, the path taken exactly when the largest bucket
    (from the sort's own offsets) allows it; a witness's ones bucket keeps the levels, and
    HEADS_MAX_CHUNKS = 0 turns the heads off."""
    from provetop.kernels.cuda import msm as cm
    from provetop.kernels.cuda import msm_plan as mp

    rng = random.Random()
    pts_dev, pts = random_points(cp, n)
    taken = set()
    for kind, c in (("dense", 9), ("dense", 13), ("witness", 13)):
        ks = scalars_of(kind, n, rng)
        want = cmsm.msm_fast(pts, ks)
        sc = cp.asarray(layout.fr_to_limbs(ks, montgomery=False))
        offs, _ = cm.sort_entries(sc, c)
        largest = int(cp.max(offs[1:] - offs[:-1]))
        chunk = mp.first_chunk(n * mp.num_windows(c))
        for heads in (4, 2, 0):
            monkeypatch.setattr(mp, "HEADS_MAX_CHUNKS", heads)
            marks: list = []
            got = gpu_msm(cp, pts_dev, ks, poison, window_bits=c, marks=marks)
            assert got == want, f"{kind}, c={c}, HEADS_MAX_CHUNKS={heads}"
            took_heads = "heads" in {stage for stage, _ in marks}
            assert took_heads == (heads > 0 and largest <= heads * chunk), (kind, c, heads)
            taken.add(took_heads)
        if kind == "witness":  # the ones bucket: half the scalars
            assert largest > 4 * chunk
    assert False in taken
    if n <= 4096:  # c = 13: ~1 entry a bucket besides the top window's few low ones
        assert True in taken, "the heads never ran"


@pytest.mark.gpu
def test_bucket_reduction_tree(cp, poison) -> None:
    """The bucket reduction's tree (provetop.kernels.cuda.msm_plan.reduce_tree: span doublings, then
    pre-scaled sums from the switch on) gives the reference's sums at windows whose reduction
    takes one, two and several tree levels (c = 7: 64 buckets per window, c = 13 and 16: 2^12
    and 2^15, with 2 to 32 buckets per leaf thread; the switch at level 1 at c = 16)."""
    rng = random.Random()
    pts_dev, pts = random_points(cp, 600)
    for kind in ("dense", "witness"):
        ks = scalars_of(kind, 600, rng)
        want = cmsm.msm_fast(pts, ks)
        for c in (7, 13, 16):
            got = gpu_msm(cp, pts_dev, ks, poison, window_bits=c)
            assert got == want, f"{kind}, c={c}"


@pytest.mark.gpu
def test_sort_rule_with_a_small_l2(cp, poison, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule's own grouping (three windows per count launch, one per scatter launch, as at
    2^27 on the H200) on small inputs, by pretending the L2 holds six windows of counters."""
    from provetop.kernels.cuda import msm_plan as mp
    from provetop.kernels.cuda import msm_stages

    rng = random.Random()
    pts_dev, pts = random_points(cp, 500)
    for c in (7, 16):
        l2 = 6 * 4 * (1 << (c - 1))
        assert mp.sort_groups(mp.num_windows(c), 1 << (c - 1), l2) == (3, 1)
        monkeypatch.setattr(msm_stages, "_l2_bytes", lambda l2=l2: l2)
        for kind in ("dense", "witness"):
            ks = scalars_of(kind, 500, rng)
            got = gpu_msm(cp, pts_dev, ks, poison, window_bits=c)
            assert got == cmsm.msm_fast(pts, ks), f"{kind}, c={c}"


def test_sort_groups_rule() -> None:
    """Windows per launch of the count and the scatter: one launch each while all counters fit
    in half the L2; otherwise about half the L2 per count launch and a sixth per scatter."""
    from provetop.kernels.cuda import msm_plan as mp

    h200_l2 = 50 << 20
    W22, W18 = mp.num_windows(22), mp.num_windows(18)
    assert mp.sort_groups(W22, 1 << 21, h200_l2) == (3, 1)  # 8 MiB of counters per window
    assert mp.sort_groups(W18, 1 << 17, h200_l2) == (W18, W18)  # 0.5 MiB: all in L2
    assert mp.sort_groups(mp.num_windows(20), 1 << 19, h200_l2) == (12, 4)
    assert mp.sort_groups(W22, 1 << 21, 1 << 20) == (1, 1)  # never below one window


SORTS = ("counting", "radix")


def edge_scalars(c: int, n: int, rng: random.Random) -> list[int]:
    """Scalars whose signed digits hit the ends of the bucket range for window c: the largest
    digit 2^(c-1) (the last bucket of a window) in any window, 2^c - 1 (digit -1 and a carry),
    r - 1 and r - 2 (every window, the top one included), 2 and 1; a few dense ones."""
    W = -(-256 // c)
    pool = [R - 1, R - 2, (1 << c) - 1, 2, 1, (1 << (c - 1)) + 1]
    pool += [(1 << (c - 1)) << (c * w) for w in range(W - 1)]
    pool += [((1 << c) - 1) << (c * w) for w in range(W - 1)]
    pool = [k % R for k in pool]
    return [rng.choice(pool) if rng.random() < 0.9 else rng.randrange(R) for _ in range(n)]


@pytest.mark.gpu
@pytest.mark.parametrize("sort", SORTS)
@pytest.mark.parametrize("n", [1, 31, 257, 1000, 4099])
def test_sort_settings_match_reference(cp, poison, sort: str, n: int) -> None:
    """Both sort settings (``msm_sort``) against the CPU reference, fresh scalars each run:
    sizes off the block and tile sizes, every scalar mix, and the edge digits at a small and a
    large window (all buffers poisoned)."""
    rng = random.Random()
    tuning = KernelTuning(msm_sort=sort)
    pts_dev, pts = random_points(cp, n)
    for kind in ("dense", "zeros", "ones", "witness"):
        ks = scalars_of(kind, n, rng)
        got = gpu_msm(cp, pts_dev, ks, poison, tuning=tuning)
        assert got == cmsm.msm_fast(pts, ks), f"{sort}: n={n}, {kind}"
    for c in (5, 16):
        ks = edge_scalars(c, n, rng)
        got = gpu_msm(cp, pts_dev, ks, poison, window_bits=c, tuning=tuning)
        assert got == cmsm.msm_fast(pts, ks), f"{sort}: n={n}, edge digits, c={c}"


@pytest.mark.gpu
def test_auto_sort_takes_each_sort_by_the_entries(
    cp, poison, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``msm_sort = "auto"`` with its size floor lowered to these sizes: dense scalars take
    the radix sort, a witness (4 % dense) the counting sort, and both equal the reference."""
    from provetop.kernels.cuda import msm_plan as mp

    monkeypatch.setattr(mp, "RADIX_AUTO_MIN_LOG", 0)
    taken: list[str] = []
    real = mp.sort_kind

    def spy(*args, **kw):
        taken.append(real(*args, **kw))
        return taken[-1]

    monkeypatch.setattr(mp, "sort_kind", spy)
    rng = random.Random()
    tuning = KernelTuning(msm_sort="auto")
    n = 3001
    pts_dev, pts = random_points(cp, n)
    for kind, want in (("dense", "radix"), ("witness", "counting")):
        ks = scalars_of(kind, n, rng)
        got = gpu_msm(cp, pts_dev, ks, poison, tuning=tuning)
        assert got == cmsm.msm_fast(pts, ks), kind
        assert taken[-1] == want, (kind, taken)


def test_carved_buffers_are_disjoint_aligned_views_of_one_block() -> None:
    """The radix sort's buffers (:func:`_carve`, numpy standing in for CuPy): the lengths and
    types asked for, each start aligned to CARVE_ALIGN, no two overlapping, all in one block,
    and a write to one leaves the others as they were."""
    from provetop.kernels.cuda import msm_plan as mp
    from provetop.kernels.cuda import msm_stages

    shapes = [(1001, np.uint32), (7, np.uint16), (0, np.uint32), (513, np.uint16), (3, np.uint32)]
    views = msm_stages._carve(np, shapes)
    base = views[0].base
    spans = []
    for v, (length, dtype) in zip(views, shapes, strict=True):
        assert v.dtype == dtype and v.shape == (length,)
        assert v.base is base  # one allocation
        if not length:
            continue  # holds no bytes (numpy may point an empty view anywhere)
        start = v.__array_interface__["data"][0] - base.__array_interface__["data"][0]
        assert start % mp.CARVE_ALIGN == 0
        spans.append((start, start + v.nbytes))
    for i in range(1, len(spans)):
        assert spans[i - 1][1] <= spans[i][0]
    for v in views:
        v[:] = 0
    views[1][:] = 0xFFFF
    assert not views[0].any() and not views[3].any() and not views[4].any()


def test_auto_sort_rule() -> None:
    """The rule on its own (no GPU): the size floor, then the share of dense entries; the
    other settings are taken as they are."""
    from provetop.kernels.cuda import msm_plan as mp

    auto = KernelTuning(msm_sort="auto")
    n = 1 << mp.RADIX_AUTO_MIN_LOG
    p = mp.make_plan(n, 20)
    half = -(-n * p.W // mp.RADIX_AUTO_MIN_FILL)
    assert mp.sort_kind(auto, n, p, half) == "radix"
    assert mp.sort_kind(auto, n, p, half - 1) == "counting"
    assert mp.sort_kind(auto, n // 2, mp.make_plan(n // 2, 20), n * p.W) == "counting"
    assert mp.radix_possible(auto, n) and not mp.radix_possible(auto, n - 1)
    for sort in ("counting", "radix"):
        assert mp.sort_kind(KernelTuning(msm_sort=sort), n, p, 0) == sort
    # the model counts the radix buffers wherever auto may take that sort
    radix = KernelTuning(msm_sort="radix")
    assert mp.scratch_bytes(n, 20, tuning=auto) == mp.scratch_bytes(n, 20, tuning=radix)
    small = n // 2
    assert mp.scratch_bytes(small, 20, tuning=auto) == mp.scratch_bytes(small, 20)


def sorted_buckets(cp, ks: list[int], c: int, alloc, tuning: KernelTuning):
    from provetop.kernels.cuda.msm import sort_entries

    sc = cp.asarray(layout.fr_to_limbs(ks, montgomery=False))
    offs, ent = sort_entries(sc, c, allocator=alloc, tuning=tuning)
    return offs.get(), ent.get()


@pytest.mark.gpu
def test_radix_sort_groups_the_same_entries(cp, poison, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sort alone: the radix setting's output is a permutation of the counting sort's that
    keeps every bucket's entries (the same offsets, the same multiset per bucket), with every
    slot written. Run with the shipped shape, then with tiny bins and chunks and few tiles, so
    that bins span several level-2 chunks (the global-atomic path) next to one-chunk bins,
    threads loop over several scalars of a tile, and windows go one per launch."""
    from provetop.kernels.cuda import msm_plan as mp

    rng = random.Random()
    counting = KernelTuning(msm_sort="counting")
    radix = KernelTuning(msm_sort="radix")
    rule = mp.radix_plan
    shapes = [
        (1 << 15, 1 << 14, 1024, 0, 512, mp.RADIX_STAGE),
        (48, 32, 3, 0, 512, mp.RADIX_STAGE),
        (48, 32, 3, 1, 4, 64),
        (5, 64, 7, 3, 3, 32),
        (1 << 15, 8, 2, 0, 16, 512),
    ]
    for chunk, bin_entries, tiles, group, superbins, stage in shapes:
        monkeypatch.setattr(mp, "RADIX_CHUNK", chunk)
        monkeypatch.setattr(mp, "RADIX_BIN_ENTRIES", bin_entries)
        monkeypatch.setattr(mp, "RADIX_TILES", tiles)
        # few superbins (many bins each) and small staged chunks: a tile's entries in many
        # chunks at level a, a superbin in many blocks at level b
        monkeypatch.setattr(mp, "RADIX_SUPERBINS", superbins)
        monkeypatch.setattr(mp, "RADIX_STAGE", stage)
        # group > 0: that many windows per launch, where the rule would take them all
        plan = (lambda n, c, g=0, budget=0, group=group: rule(n, c, group)) if group else rule
        monkeypatch.setattr(mp, "radix_plan", plan)
        for n, kind, c in [(5000, "dense", 9), (3001, "witness", 13), (777, "edge", 7)]:
            ks = edge_scalars(c, n, rng) if kind == "edge" else scalars_of(kind, n, rng)
            ks[: n // 10] = [2] * (n // 10)  # one heavy bucket: a bin of many chunks
            want_offs, want = sorted_buckets(cp, ks, c, poison, counting)
            offs, got = sorted_buckets(cp, ks, c, poison, radix)
            what = f"chunk={chunk} tiles={tiles} group={group} superbins={superbins} "
            what += f"stage={stage}: n={n} {kind} c={c}"
            assert (offs == want_offs).all(), what
            assert got.shape == want.shape and len(got) == int(offs[-1]), what
            for b in range(len(offs) - 1):
                lo, hi = int(offs[b]), int(offs[b + 1])
                if hi > lo:
                    assert sorted(got[lo:hi]) == sorted(want[lo:hi]), f"{what}, bucket {b}"


def test_radix_plan_fits_the_kernels() -> None:
    """Every window and size the MSM accepts gives a radix shape its kernels can run: a bin's
    counters fit a block (2^s <= 2^12, low keys fit 16 bits), a launch's bins fit 48 KiB of
    shared memory, the bins tile a window, and tiles cover the scalars; the H200 shapes are the
    ones bench/notes/msm.md reasons with."""
    from provetop.kernels.cuda import msm_plan as mp

    for c in range(mp.MIN_WINDOW, mp.MAX_WINDOW + 1):
        W, B = mp.num_windows(c), 1 << (c - 1)
        for log_n in range(0, 31):
            n = 1 << log_n
            if n * W >= 1 << 32:
                continue
            for group in (0, 1, 5):
                rp = mp.radix_plan(n, c, group)
                assert 0 <= rp.s <= 12 and rp.bins << rp.s == B, (c, n)
                assert 1 <= rp.group <= W and rp.group * rp.bins <= mp.radix_max_bins()
                assert rp.tile % mp.RADIX_THREADS == 0 and rp.tiles * rp.tile >= n
                assert (rp.tiles - 1) * rp.tile < n
                # level a's superbins (with the ones') fit its shared counters
                nsb = -(-(rp.group * rp.bins) // (1 << rp.t)) + 1
                assert nsb <= mp.RADIX_SUPERBINS and 1 << rp.t <= mp.RADIX_MAX_SPAN, (c, n, group)
                if rp.t:  # and as many as fit: t is the least that does
                    finer = -(-(rp.group * rp.bins) // (1 << (rp.t - 1))) + 1
                    assert finer > mp.RADIX_SUPERBINS, (c, n, group)
    assert mp.radix_plan(1 << 27, 22) == mp.RadixPlan(
        s=8, bins=8192, group=1, tile=1 << 17, tiles=1024, t=5
    )
    assert mp.radix_plan(1 << 24, 20) == mp.RadixPlan(
        s=9, bins=1024, group=3, tile=1 << 14, tiles=1024, t=3
    )
    assert mp.radix_plan(1 << 20, 16) == mp.RadixPlan(
        s=9, bins=64, group=16, tile=1024, tiles=1024, t=2
    )
    with pytest.raises(ValueError, match="group=-1"):
        mp.radix_plan(1 << 20, 16, -1)
    # with the accumulation phase's bytes as the budget: more windows per launch (fewer passes
    # of the key pass over the scalars), and never more bytes than that phase, so the MSM's
    # peak (scratch_bytes) is the counting sort's
    radix = KernelTuning(msm_sort="radix")
    for n, c in [(1 << 27, 22), (1 << 26, 22), (1 << 24, 20), (1 << 27, 19)]:
        p = mp.make_plan(n, c)
        budget = mp.accumulation_bytes(n, p, n * p.W)
        rp = mp.radix_plan(n, c, budget=budget)
        assert rp.group >= mp.radix_plan(n, c).group
        assert mp.radix_scratch_bytes(n, c, budget=budget) <= budget, (n, c)
        assert mp.scratch_bytes(n, c, tuning=radix) == mp.scratch_bytes(n, c), (n, c)
        if rp.group < p.W:  # the next window would not have fitted
            assert mp.radix_scratch_bytes(n, c, group=rp.group + 1) > budget, (n, c)
    assert mp.radix_plan(1 << 27, 22, budget=mp.accumulation_bytes(
        1 << 27, mp.make_plan(1 << 27, 22), 12 << 27)).group == 4  # fmt: skip


def test_scratch_model_counts_the_radix_buffers() -> None:
    """The radix buffers are alive only before the buckets: the model takes the larger phase,
    so at 2^27 (buckets and levels larger) it equals the counting model, and at a small n with
    a forced large window it may exceed it but never by more than the radix buffers."""
    from provetop.kernels.cuda import msm_plan as mp

    for n, c in [(1 << 27, 22), (1 << 24, 20), (1 << 20, 16), (1000, 7), (300, 21)]:
        counting = mp.scratch_bytes(n, c, tuning=KernelTuning(msm_sort="counting"))
        radix = mp.scratch_bytes(n, c, tuning=KernelTuning(msm_sort="radix"))
        assert counting <= radix <= counting + mp.radix_scratch_bytes(n, c), (n, c)


@pytest.mark.gpu
@pytest.mark.parametrize("sort", SORTS)
@pytest.mark.parametrize("log_n", [16, 20])
def test_pool_stays_within_the_scratch_model(cp, sort: str, log_n: int) -> None:
    """An MSM's allocations, from a pool of their own, never make it hold more than
    :func:`scratch_bytes` says: what an operator's memory budget rests on. With the radix
    buffers in separate blocks the pool held 578 MB at 2^20 against a model of 382
    (2026-12-03)."""
    from provetop.kernels.cuda import msm as cm
    from provetop.kernels.cuda import msm_plan as mp
    from provetop.kernels.cuda.srs import srs

    n = 1 << log_n
    gen = np.random.default_rng()
    pts = srs(cp.asarray(layout.random_fr_limbs(n, gen, montgomery=False)))
    sc = cp.asarray(layout.random_fr_limbs(n, gen, montgomery=False))
    tuning = KernelTuning(msm_sort=sort)
    c = mp.choose_window_bits(n)
    pool = cp.cuda.MemoryPool()
    for _ in range(2):  # the second call runs on what the first left cached
        cm.msm(pts, sc, allocator=pool.malloc, window_bits=c, tuning=tuning)
    model = mp.scratch_bytes(n, c, tuning=tuning)
    assert 0 < pool.total_bytes() <= model, (sort, n, pool.total_bytes(), model)


@pytest.mark.gpu
def test_window_sizes_agree(cp, poison) -> None:
    """Every window (small, odd, large) gives the same point: the digits and bucket layout are
    right for each c, not only for the one the rule picks."""
    rng = random.Random()
    pts_dev, pts = random_points(cp, 300)
    ks = scalars_of("dense", 300, rng)
    want = cmsm.msm_fast(pts, ks)
    for c in (4, 7, 13, 16, 21):
        assert gpu_msm(cp, pts_dev, ks, poison, window_bits=c) == want, f"window {c}"


@pytest.mark.gpu
def test_host_streamed_points(cp, poison) -> None:
    """Points in pinned host memory, uploaded in chunks overlapped with the compute."""
    from provetop.kernels.cuda.host_pinned import pinned_empty
    from provetop.kernels.cuda.msm import msm_host_points

    rng = random.Random()
    n = 4096
    pts_dev, pts = random_points(cp, n)
    host = pinned_empty((n, 12))
    host[:] = pts_dev.get()
    ks = scalars_of("witness", n, rng)
    ks[: n // 2] = layout.random_fr(n // 2, rng)
    sc = cp.asarray(layout.fr_to_limbs(ks, montgomery=False))
    got = msm_host_points(host, sc, chunk=1000, allocator=poison)
    want = cmsm.msm_fast(pts, ks)
    assert layout.g1_from_limbs(got)[0] == want
    # msm() itself routes host points (numpy, not pinned here) and numpy scalars
    from provetop.kernels.cuda.msm import msm

    plain = pts_dev.get()
    got2 = msm(plain, layout.fr_to_limbs(ks, montgomery=False), allocator=poison)
    assert layout.g1_from_limbs(got2)[0] == want


@pytest.mark.gpu
@pytest.mark.parametrize("sort", ["auto", "radix"])
def test_host_streamed_buckets_kept_across_chunks(cp, poison, sort: str) -> None:
    """Points streamed in chunks, each chunk's sums added straight into one bucket array of
    the whole query: exact against the reference for witness-like scalars (zeros, ones,
    dense), a short last chunk, a window cap, and both sorts (``auto`` is the counting sort
    there)."""
    from provetop.kernels.cuda import msm as cuda_msm
    from provetop.kernels.cuda.host_pinned import pinned_empty

    rng = random.Random()
    n = rng.randrange(4000, 6000)
    pts_dev, pts = random_points(cp, n)
    host = pinned_empty((n, 12))
    host[:] = pts_dev.get()
    ks = scalars_of("witness", n, rng)
    for i in rng.sample(range(n), n // 3):
        ks[i] = rng.randrange(R)
    sc = cp.asarray(layout.fr_to_limbs(ks, montgomery=False))
    tuning = KernelTuning(msm_sort=sort)
    want = cmsm.msm_fast(pts, ks)
    for chunk, cap in ((1100, None), (n // 2 + 1, 13), (n, None)):
        got = cuda_msm.msm_host_points(
            host, sc, chunk=chunk, allocator=poison, window_max=cap, tuning=tuning
        )
        assert layout.g1_from_limbs(got)[0] == want, f"chunk {chunk}, cap {cap}"


@pytest.mark.gpu
def test_host_streamed_chunks_that_cancel_the_kept_sums(cp, poison) -> None:
    """The later chunks hold the first chunk's points negated, with the same scalars: every
    kept bucket sum goes back to infinity (which the kept accumulation must store, not skip),
    and the MSM is the identity; then the same points with a few scalars changed, against the
    reference."""
    from provetop.kernels.cuda import msm as cuda_msm
    from provetop.kernels.cuda.host_pinned import pinned_empty

    rng = random.Random()
    half = rng.randrange(1500, 2500)
    _, pts = random_points(cp, half)
    negs = [g1.affine_neg(p) for p in pts]
    host = pinned_empty((2 * half, 12))
    host[:] = layout.g1_to_limbs(pts + negs)
    ks = [rng.randrange(R) for _ in range(half)]
    for chunk in (half, 700):
        sc = cp.asarray(layout.fr_to_limbs(ks + ks, montgomery=False))
        got = cuda_msm.msm_host_points(host, sc, chunk=chunk, allocator=poison)
        assert layout.g1_from_limbs(got)[0] is None, f"chunk {chunk}"
    ks2 = list(ks)
    for i in rng.sample(range(half), 5):
        ks2[i] = rng.randrange(R)
    sc = cp.asarray(layout.fr_to_limbs(ks + ks2, montgomery=False))
    want = cmsm.msm_fast(pts + negs, ks + ks2)
    got = cuda_msm.msm_host_points(host, sc, chunk=half, allocator=poison)
    assert layout.g1_from_limbs(got)[0] == want


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("buffers", "lead", "prelude"),
    [(1, 0, False), (2, 0, False), (4, 0, False), (4, 2, True), (3, 99, True), (1, 1, True)],
)
def test_host_streamed_queries_in_one_pass(
    cp, poison, buffers: int, lead: int, prelude: bool
) -> None:
    """Several streamed MSMs in one pass, their chunks interleaved through ``buffers`` device
    buffers: each exact against the reference, whatever its size (one chunk, several, a short
    last one), its scalars (dense, witness-like), its window cap, and an upload its first chunk
    must wait for (scalars copied on another stream just before the call)."""
    from provetop.kernels.cuda import msm as cuda_msm
    from provetop.kernels.cuda.host_pinned import pinned_empty

    rng = random.Random()
    sizes = [rng.randrange(5000, 7000), rng.randrange(2000, 3000), 900]
    pts_dev, pts = random_points(cp, max(sizes))
    host = pinned_empty((max(sizes), 12))
    host[:] = pts_dev.get()
    side = cp.cuda.Stream(non_blocking=True)
    jobs, wants, copies = [], [], []
    for q, n in enumerate(sizes):
        ks = layout.random_fr(n, rng) if q == 0 else scalars_of("witness", n, rng)
        limbs = np.ascontiguousarray(layout.fr_to_limbs(ks, montgomery=False))
        sc = cp.empty(limbs.shape, dtype=cp.uint64)
        ready = None
        if q and prelude:  # copied by the pass itself, before this query's first chunk
            host_sc = pinned_empty(limbs.shape)
            host_sc[:] = limbs
            copies.append((host_sc, sc))
        elif q:  # uploaded on a side stream: the pass must wait before this query's first chunk
            sc.set(limbs, stream=side)
            ready = cp.cuda.Event(disable_timing=True)
            ready.record(side)
        else:
            sc.set(limbs)
        cap = (None, 13, 12)[q]
        jobs.append(cuda_msm.StreamedQuery(host[:n], sc, window_max=cap, ready=ready))
        wants.append(cmsm.msm_fast(pts[:n], ks))
    events = [(cp.cuda.Event(), cp.cuda.Event()) for _ in range(sum(-(-n // 1500) for n in sizes))]
    rows = list(events)
    got = cuda_msm.msm_host_points_many(
        jobs,
        chunk=1500,
        allocator=poison,
        buffers=buffers,
        lead=lead,
        prelude=copies or None,
        chunk_events=rows,
    )
    assert [layout.g1_from_limbs(g)[0] for g in got] == wants
    # every chunk once, each query's in order, in the pairs made beforehand
    assert sorted((q, k) for q, k, _, _ in rows) == [
        (q, k) for q, n in enumerate(sizes) for k in range(-(-n // 1500))
    ]
    assert [(a, b) for _, _, a, b in rows] == events


@pytest.mark.gpu
@pytest.mark.parametrize(("buffers", "lead", "chunk"), [(4, 2, 700), (2, 0, 1500), (1, 1, 900)])
def test_host_scalars_go_up_per_chunk_shared_by_prefix_queries(
    cp, poison, buffers: int, lead: int, chunk: int
) -> None:
    """The engine's pass with the aux scalars left in pinned host memory: queries after the
    first read prefixes of one host array (as L, A, B-G1 read z), each chunk's rows go up once
    for all of them through a few scalar buffers, refilled only after their last reader; the
    first query's scalars are on the device. Each result exact against the reference, with
    the scalar buffers drawn from a poisoning allocator."""
    from provetop.kernels.cuda import msm as cuda_msm
    from provetop.kernels.cuda import msm_plan as mp
    from provetop.kernels.cuda.host_pinned import pinned_empty

    rng = random.Random()
    sizes = [rng.randrange(5000, 7000), rng.randrange(4000, 5000), rng.randrange(3000, 4000), 1100]
    pts_dev, pts = random_points(cp, max(sizes))
    host = pinned_empty((max(sizes), 12))
    host[:] = pts_dev.get()
    ks_h = layout.random_fr(sizes[0], rng)
    z = scalars_of("witness", max(sizes[1:]), rng)
    z_host = pinned_empty((len(z), 4))
    z_host[:] = layout.fr_to_limbs(z, montgomery=False)
    h_dev = cp.asarray(layout.fr_to_limbs(ks_h, montgomery=False))
    jobs = [cuda_msm.StreamedQuery(host[: sizes[0]], h_dev)]
    wants = [cmsm.msm_fast(pts[: sizes[0]], ks_h)]
    for n in sizes[1:]:
        jobs.append(cuda_msm.StreamedQuery(host[:n], z_host[:n], window_max=13))
        wants.append(cmsm.msm_fast(pts[:n], z[:n]))
    order = mp.interleave_order([-(-n // chunk) for n in sizes], lead, grouped=True)
    feed = mp.plan_scalar_feed(order, sizes, chunk, [None, 1, 1, 1], buffers)
    assert len(feed.uploads) == -(-sizes[1] // chunk)  # one upload per row range, shared
    got = cuda_msm.msm_host_points_many(
        jobs, chunk=chunk, allocator=poison, buffers=buffers, lead=lead
    )
    assert [layout.g1_from_limbs(g)[0] for g in got] == wants


@pytest.mark.gpu
def test_host_streamed_calls_in_a_row_reuse_one_copy_stream_and_stay_exact(cp, poison) -> None:
    """Each thread makes its copy stream and events once (creating events waited for the
    running kernel on the H200); back-to-back calls with other chunkings, one of them
    ending with a short chunk and one with a single chunk, must all stay exact."""
    from provetop.kernels.cuda import msm as cuda_msm
    from provetop.kernels.cuda.host_pinned import pinned_empty

    rng = random.Random()
    n = 3000
    pts_dev, pts = random_points(cp, n)
    host = pinned_empty((n, 12))
    host[:] = pts_dev.get()
    kits = []
    for chunk in (700, 1500, n):
        ks = layout.random_fr(n, rng)
        sc = cp.asarray(layout.fr_to_limbs(ks, montgomery=False))
        got = cuda_msm.msm_host_points(host, sc, chunk=chunk, allocator=poison)
        assert layout.g1_from_limbs(got)[0] == cmsm.msm_fast(pts, ks), f"chunk {chunk}"
        kits.append(cuda_msm._streaming_kit(cp))
    assert kits[0] is kits[1] is kits[2]


@pytest.mark.gpu
def test_selftest_rows(cp) -> None:
    """The MSM rows of `provetop selftest --backend cuda` pass."""
    from provetop.kernels.selftest.registry import run_check
    from provetop.kernels.selftest.rows_cuda import msm_checks

    for check in msm_checks():
        res = run_check(check)
        assert res.status == "pass", f"{check.name}: {res.status} {res.detail}"


@pytest.mark.gpu
def test_srs_edges(cp) -> None:
    from provetop.kernels.cuda.srs import srs

    rng = random.Random()
    secrets = [0, 1, 2, R - 1, R - 2, (1 << 254) + 12345] + layout.random_fr(26, rng)
    out = srs(cp.asarray(layout.fr_to_limbs(secrets, montgomery=False))).get()
    got = layout.g1_from_limbs(out)
    for s, p in zip(secrets, got, strict=True):
        assert p == g1.scalar_mul(g1.GENERATOR, s), f"srs([{s:#x}]G)"


def dot_mod_r(ks: list[int], ss: list[int]) -> int:
    return sum(map(operator.mul, ks, ss)) % R


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("log_n", [20, 24])
def test_identity_large(cp, log_n: int) -> None:
    """MSM(k, [s]G) == [<k, s> mod r]G at 2^20 and 2^24, with the SRS from the GPU generator."""
    from provetop.kernels.cuda.msm import msm
    from provetop.kernels.cuda.srs import srs

    n = 1 << log_n
    gen = np.random.default_rng()
    s_limbs = layout.random_fr_limbs(n, gen, montgomery=False)
    k_limbs = layout.random_fr_limbs(n, gen, montgomery=False)
    k_limbs[: n // 4] = 0  # a quarter zeros, a quarter ones, half dense
    k_limbs[n // 4 : n // 2] = 0
    k_limbs[n // 4 : n // 2, 0] = 1
    pts = srs(cp.asarray(s_limbs))
    got = msm(pts, cp.asarray(k_limbs))
    e = dot_mod_r(
        layout.fr_from_limbs(k_limbs, montgomery=False),
        layout.fr_from_limbs(s_limbs, montgomery=False),
    )
    assert layout.g1_from_limbs(got)[0] == g1.scalar_mul(g1.GENERATOR, e)


@pytest.mark.parametrize("c", [4, 13, 16, 22])
def test_combine_windows_on_host(c: int) -> None:
    """The host window combination (inlined Jacobian doublings, affine window sums) against
    sum_w 2^(c w) S_w + ones computed with the reference group law; window sums in random XYZZ
    representations (ZZ != 1), some of them infinity (zeros, as the kernels write them)."""
    from provetop.kernels.constants import FP_MODULUS as P
    from provetop.kernels.cuda.msm_plan import num_windows
    from provetop.kernels.cuda.msm_stages import combine_windows

    rng = random.Random()
    W = num_windows(c)
    base = g1.scalar_mul(g1.GENERATOR, rng.randrange(1, R))
    ks = [rng.randrange(R) for _ in range(W + 1)]
    for i in rng.sample(range(W + 1), min(3, W)):
        ks[i] = 0
    pts = [g1.scalar_mul(base, k) for k in ks]
    rows = []
    for pt in pts:
        if pt is None:
            rows.append((0, 0, 0, 0))
            continue
        z = rng.randrange(1, P)
        zz, zzz = z * z % P, pow(z, 3, P)
        rows.append((pt[0] * zz % P, pt[1] * zzz % P, zz, zzz))
    sums = layout.g1_xyzz_to_limbs(rows)
    sums[[i for i, k in enumerate(ks) if k == 0]] = 0
    e = (sum(k << (c * w) for w, k in enumerate(ks[:W])) + ks[W]) % R
    got = layout.g1_from_limbs(combine_windows(sums, c))[0]
    assert got == g1.scalar_mul(base, e)
