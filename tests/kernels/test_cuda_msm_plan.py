"""The planning of the GPU MSM (kernels/cuda/msm_plan.py), on the CPU: window rule, level
sizes, scratch model; and the streamed pass's orchestration (kernels/cuda/msm.py) with every
CUDA step replaced. Why: these decide launch shapes and how much memory the engine budgets; a
level plan that does not shrink would hang, and a scratch model below the real peak would let
the engine's allocator over-commit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from provetop.kernels.cuda import msm as cm
from provetop.kernels.cuda import msm_plan as mp
from provetop.kernels.cuda import msm_stages
from provetop.kernels.tuning import DEFAULT_TUNING


def test_window_rule_is_the_cost_argmin_and_grows_with_n() -> None:
    prev = 0
    for k in range(0, 31):
        n = 1 << k
        c = mp.choose_window_bits(n)
        assert mp.MIN_WINDOW <= c <= mp.MAX_WINDOW
        if n > 1:
            best = min(mp.window_cost(n, d) for d in range(mp.MIN_WINDOW, mp.MAX_WINDOW + 1))
            assert mp.window_cost(n, c) == best
        assert c >= prev
        prev = c
    assert [mp.choose_window_bits(1 << k) for k in (16, 20, 24, 27)] == [13, 16, 20, 22]


@pytest.mark.parametrize("m", [1, 2, 7, 8, 9, 1000, 12345, 1 << 20, 218_000_000, 1_610_612_736])
def test_levels_shrink_to_one_thread(m: int) -> None:
    levels = mp.level_sizes(m, m)
    assert levels[-1][2] == 1
    for (size, L, T), nxt in zip(levels, levels[1:], strict=False):
        assert T == -(-size // L) and nxt[0] == 2 * T and nxt[2] < T
    assert len(levels) < 40


def test_plan_and_scratch_model() -> None:
    for k in (4, 10, 16, 20, 24, 27):
        n = 1 << k
        c = mp.choose_window_bits(n)
        p = mp.make_plan(n, c)
        assert p.K == p.W * p.B + 1 and p.S & (p.S - 1) == 0 and p.G * p.S == p.B
        assert n * p.W < 1 << 32  # offsets fit 32 bits
        b = mp.scratch_bytes(n, c)
        assert b >= 192 * p.K + 4 * n * p.W  # at least buckets and sorted entries
        assert b <= mp.scratch_bytes(2 * n, c)
    # fewer entries (zeros, ones) never need more
    assert mp.scratch_bytes(1 << 20, 16, n_entries=1000) < mp.scratch_bytes(1 << 20, 16)


def test_host_scratch_model() -> None:
    """Per chunk (the reference of the window floor): two point buffers, a chunk's MSM and the
    window sums. Whole-query buckets: two point buffers and the chunk's scratch for the largest
    of the windows the query may take (fewer non-trivial scalars pick smaller ones, with more
    windows), so a cap on the window caps the bytes, and the bound holds whatever window the
    scalars choose."""

    n, chunk = 1 << 27, 1 << 22
    c = mp.choose_window_bits(chunk)
    # a streamed chunk sorts as the counting sort when the setting is auto (streamed_tuning)
    streamed = mp.streamed_tuning(DEFAULT_TUNING)
    assert mp.per_chunk_scratch_bytes(chunk, c) == (
        2 * chunk * 96
        + 2 * 192 * (mp.num_windows(c) + 1)
        + mp.scratch_bytes(chunk, c, tuning=streamed)
    )
    floor = mp.stream_window_floor(chunk)
    assert floor < c  # the kept array spans the query's windows beside the chunk's sort
    assert mp.host_scratch_bytes(2 * chunk, chunk, floor) <= mp.per_chunk_scratch_bytes(chunk, c)
    assert mp.host_scratch_bytes(2 * chunk, chunk, floor + 1) > mp.per_chunk_scratch_bytes(chunk, c)
    assert mp.host_scratch_bytes(1000, chunk) < mp.host_scratch_bytes(n, chunk)
    assert mp.stream_window_bits(n) == mp.choose_window_bits(n)
    assert mp.stream_window_bits(n, 20) == 20 and mp.stream_window_bits(1000, 20) < 20
    caps = [mp.host_scratch_bytes(n, chunk, w) for w in range(16, 23)]
    assert caps == sorted(caps)  # a smaller cap never needs more
    for w in range(16, 23):
        bound = mp.host_scratch_bytes(n, chunk, w)
        p = mp.make_plan(chunk, w)  # dense scalars at the cap: the query's buckets and entries
        assert bound >= 2 * chunk * 96 + 192 * p.K + 4 * chunk * p.W
        assert bound >= 2 * chunk * 96 + mp.scratch_bytes(chunk, w, tuning=streamed)
    # the resident rule is monotone in n, so a query's scalars never pick more than its size
    ws = [mp.choose_window_bits(1 << k) for k in range(1, 28)]
    assert ws == sorted(ws)
    for chunks in (1, 2, 8, 32, 1000):  # never below the streamed floor, never above a cap
        for x in (0, 1, 1000, 1 << 20, 1 << 27):
            assert mp.STREAM_MIN_WINDOW <= mp.stream_window_bits(x, None, chunks) <= 23
            assert mp.stream_window_bits(x, 14, chunks) <= 14


def test_streamed_msms_take_the_counting_sort_for_auto() -> None:
    """A streamed MSM's chunks sort while the query's buckets are alive, so ``auto`` resolves
    to the counting sort there, in the run and in both memory models; an explicit setting is
    kept."""
    auto, counting, radix = (
        replace(DEFAULT_TUNING, msm_sort=s) for s in ("auto", "counting", "radix")
    )
    assert mp.streamed_tuning(auto) == counting
    assert mp.streamed_tuning(radix) is radix and mp.streamed_tuning(counting) is counting
    n, chunk = 1 << 27, 1 << 22
    assert mp.host_scratch_bytes(n, chunk, tuning=auto) == mp.host_scratch_bytes(
        n, chunk, tuning=counting
    )
    assert mp.host_scratch_bytes(n, chunk, tuning=radix) > mp.host_scratch_bytes(
        n, chunk, tuning=counting
    )
    sizes, windows = [n, n // 2], [20, 19]
    assert mp.many_scratch_bytes(sizes, chunk, windows, tuning=auto) == mp.many_scratch_bytes(
        sizes, chunk, windows, tuning=counting
    )


def test_streamed_window_weighs_the_additions_into_kept_buckets() -> None:
    """One chunk: the resident rule. Many chunks: a smaller window than the query's own (each
    chunk adds its sum into every bucket it reaches), and never above a cap."""
    n = 1 << 27
    assert mp.stream_window_bits(n, None, 1) == mp.choose_window_bits(n) == 22
    c32 = mp.stream_window_bits(n, None, 32)
    assert c32 < 22 and mp.stream_cost(n, c32, 32) < mp.stream_cost(n, 22, 32)
    assert mp.stream_cost(n, 22, 1) == mp.window_cost(n, 22)
    assert mp.stream_window_bits(n, 17, 32) <= 17
    # more chunks never favour more buckets
    assert mp.stream_window_bits(n, None, 16) >= c32


def test_interleave_order_takes_every_chunk_once_in_order_and_spread() -> None:
    chunks = [32, 31, 31, 8]
    order = mp.interleave_order(chunks)
    assert sorted(order) == [(q, k) for q, n in enumerate(chunks) for k in range(n)]
    for q, n in enumerate(chunks):  # each query's chunks in their own order
        assert [k for qq, k in order if qq == q] == list(range(n))
    # spread: no two chunks of the big query with more than 4 others between them
    pos = [i for i, (q, _) in enumerate(order) if q == 0]
    assert max(b - a for a, b in zip(pos, pos[1:], strict=False)) <= 5
    assert mp.interleave_order([1]) == [(0, 0)] and mp.interleave_order([]) == []
    # a lead: the first query's first chunks before any other's, every chunk still once
    led = mp.interleave_order(chunks, lead=2)
    assert led[:2] == [(0, 0), (0, 1)] and sorted(led) == sorted(order)
    assert sorted(mp.interleave_order(chunks, lead=99)) == sorted(order)


def test_one_pass_scratch_counts_every_query_buckets_and_the_buffers() -> None:
    """The buffers, each query's kept bucket array, a chunk's sort and levels (without a bucket
    array of its own: its sums go into the query's), and a single query never below
    msm_host_points' bound."""
    chunk = 1 << 22
    sizes, windows = [1 << 27, 130_000_000, 33_000_000], [19, 16, 16]
    one = mp.many_scratch_bytes(sizes, chunk, windows, 4)
    two = mp.many_scratch_bytes(sizes, chunk, windows, 2)
    assert one - two == 2 * chunk * 96
    arrays = sum(192 * mp.make_plan(chunk, w).K for w in windows)
    chunk_scratch = mp.scratch_bytes(chunk, 19) - 192 * mp.make_plan(chunk, 19).K
    assert one >= 4 * chunk * 96 + arrays + chunk_scratch
    assert mp.many_scratch_bytes([1 << 27], chunk, [19]) >= mp.host_scratch_bytes(
        1 << 27, chunk, 19
    )


def test_grouped_order_takes_chunk_k_of_the_later_queries_together() -> None:
    chunks = [22, 21, 21, 6]
    order = mp.interleave_order(chunks, lead=5, grouped=True)
    assert sorted(order) == [(q, k) for q, n in enumerate(chunks) for k in range(n)]
    assert order[:5] == [(0, k) for k in range(5)]
    for k in range(6):  # L_k, A_k, B_k one after the other
        i = order.index((1, k))
        assert order[i : i + 3] == [(1, k), (2, k), (3, k)]
    for q, n in enumerate(chunks):
        assert [k for qq, k in order if qq == q] == list(range(n))
    # not grouped: B's chunks spread over the run as before
    spread = mp.interleave_order(chunks, lead=5)
    assert spread.index((3, 5)) > spread.index((1, 15))


def _feed_violations(order, feed, buffers):  # type: ignore[no-untyped-def]
    """An independent replay of the pass's queueing: the upload of order entry j is queued in
    step max(j - (buffers - 1), 0) (before that step's sums; a one-buffer pass queues a
    chunk's scalars with its count stage, a step earlier) and a scalar buffer's previous
    readers must all have been queued in an earlier step; returns the uploads that break it."""
    lag = max(1, buffers - 1)
    bad = []
    readers: dict[int, list[int]] = {}
    for i, u in enumerate(feed.use):
        if u is not None:
            readers.setdefault(u, []).append(i)
    for u in range(len(feed.uploads)):
        step = max(min(readers[u]) - lag, 0)
        slot = u % feed.slots
        earlier = [v for v in range(u) if v % feed.slots == slot]
        if earlier and max(readers[earlier[-1]]) >= step:
            bad.append(u)
    return bad


@pytest.mark.parametrize("buffers", [1, 2, 4])
@pytest.mark.parametrize("lead", [0, 5])
@pytest.mark.parametrize("chunk", [1 << 22, 6291456, 1 << 23])
def test_scalar_feed_shares_prefix_rows_and_never_refills_a_buffer_still_read(
    buffers: int, lead: int, chunk: int
) -> None:
    sizes = [(1 << 27) - 1, 130_169_893, 129_753_620, 33_112_282]
    chunks = [-(-n // chunk) for n in sizes]
    order = mp.interleave_order(chunks, lead, grouped=True)
    keys = [None, "z", "z", "z"]
    feed = mp.plan_scalar_feed(order, sizes, chunk, keys, buffers)
    # H reads device scalars; every other chunk reads the upload of its own rows
    for i, (q, k) in enumerate(order):
        u = feed.use[i]
        if q == 0:
            assert u is None
            continue
        _q, lo, hi = feed.uploads[u]
        assert lo == k * chunk and hi >= min(lo + chunk, sizes[q])
    assert len(feed.uploads) == chunks[1]  # one upload per row range of z, shared
    assert feed.slots >= 2 and not _feed_violations(order, feed, buffers)
    # one buffer fewer would break the rule (the minimum is taken), unless 2 is the floor
    if feed.slots > 2:
        fewer = mp.ScalarFeed(feed.use, feed.uploads, feed.first, feed.last, feed.slots - 1)
        assert _feed_violations(order, fewer, buffers)
    assert mp.pass_scalar_slots(sizes, chunk, [False, True, True, True], buffers, lead) == (
        feed.slots
    )


def test_scalar_feed_of_separate_arrays_and_of_device_scalars() -> None:
    order = mp.interleave_order([3, 3])
    feed = mp.plan_scalar_feed(order, [30, 30], 10, ["x", "y"], 2)
    assert len(feed.uploads) == 6 and not _feed_violations(order, feed, 2)
    none = mp.plan_scalar_feed(order, [30, 30], 10, [None, None], 2)
    assert none.slots == 0 and none.uploads == [] and none.use == [None] * 6
    # the pass's memory counts the scalar buffers
    base = mp.many_scratch_bytes([1 << 27], 1 << 22, [19])
    assert (
        mp.many_scratch_bytes([1 << 27], 1 << 22, [19], scalar_slots=2) == base + 2 * (1 << 22) * 32
    )


class _HostArray(np.ndarray):
    """A numpy array standing in for a CuPy one: ``set`` copies in at once (a stream that
    runs everything when it is queued)."""

    def set(self, host, stream=None):  # noqa: A003 (CuPy's name)
        self[...] = host

    def get(self, stream=None):
        return np.asarray(self)


class _DeviceArray(_HostArray):
    """A stand-in device array: what the pass must never treat as host memory."""

    __cuda_array_interface__ = {}  # noqa: RUF012 (CuPy's mark of device memory)


class _FakeCupy:
    """What the pass's orchestration asks of CuPy, on the host: arrays, events, streams."""

    uint64 = np.uint64

    class cuda:  # noqa: N801 (CuPy's name)
        class Event:
            def __init__(self, *a, **kw):
                pass

            def record(self, stream=None):
                pass

            def synchronize(self):
                pass

        class Stream:
            def __init__(self, *a, **kw):
                pass

            def wait_event(self, event):
                pass

        class Device:
            id = 0

    @staticmethod
    def empty(shape, dtype=np.uint64):
        return np.zeros(shape, dtype).view(_DeviceArray)

    zeros = empty


@pytest.mark.parametrize(
    ("buffers", "lead", "chunk"), [(4, 5, 7), (2, 0, 10), (1, 1, 6), (3, 2, 5)]
)
def test_the_pass_feeds_every_chunk_its_own_rows(monkeypatch, buffers, lead, chunk) -> None:
    """The pass's orchestration on the host, every CUDA step replaced by a recorder and every
    copy done when it is queued (so a buffer refilled before its last reader was queued would
    hand that reader the wrong rows): each count stage and each accumulation gets exactly its
    chunk's points and scalars, H's from the device array, the others' from the one host array
    they read prefixes of, each chunk of rows uploaded once."""
    import contextlib
    import random as stdrandom

    rng = stdrandom.Random()
    sizes = [rng.randrange(40, 60), rng.randrange(35, 45), rng.randrange(30, 40), 12]
    points = np.arange(max(sizes) * 12, dtype=np.uint64).reshape(-1, 12)
    h = np.arange(sizes[0] * 4, dtype=np.uint64).reshape(-1, 4) + (1 << 40)
    z = np.arange(max(sizes[1:]) * 4, dtype=np.uint64).reshape(-1, 4) + (1 << 50)
    seen = []
    uploads = []

    def count_stage(mod, scalars, n, p, stream, done=None):
        seen.append(("count", n, np.array(scalars)))
        return None

    def accumulate_buckets(mod, pts, sc, p, buckets, stream, tuning, counted=None, kept=False):
        seen.append(("sums", np.array(pts), np.array(sc)))

    fake = _FakeCupy()
    monkeypatch.setattr(cm, "require_cupy", lambda: fake)
    monkeypatch.setattr(cm, "_kits", cm._Kits())
    monkeypatch.setattr(cm, "on_stream", lambda s, a: contextlib.nullcontext(fake.cuda.Stream()))
    monkeypatch.setattr(msm_stages, "kernels", lambda tuning: None)
    monkeypatch.setattr(msm_stages, "tail_count", lambda sc: len(sc))
    monkeypatch.setattr(msm_stages, "count_stage", count_stage)
    monkeypatch.setattr(msm_stages, "accumulate_buckets", accumulate_buckets)
    monkeypatch.setattr(msm_stages, "reduce_buckets", lambda *a, **kw: fake.zeros((2, 24)))
    monkeypatch.setattr(msm_stages, "combine_windows", lambda sums, c: c)
    real_set = _HostArray.set

    def counting_set(self, host, stream=None):
        if self.shape[-1] == 4:
            uploads.append(int(host[0, 0]))
        real_set(self, host, stream)

    monkeypatch.setattr(_HostArray, "set", counting_set)
    h_dev = h.view(_DeviceArray)
    jobs = [cm.StreamedQuery(points[: sizes[0]], h_dev, window_max=13)]
    jobs += [cm.StreamedQuery(points[:n], z[:n], window_max=12) for n in sizes[1:]]
    reads = []

    def rows_read(q, lo, hi, stream):
        reads.append((q, lo, hi, len([s for s in seen if s[0] == "sums"])))

    got = cm.msm_host_points_many(
        jobs, chunk=chunk, buffers=buffers, lead=lead, rows_read=rows_read
    )
    assert len(got) == 4
    order = mp.interleave_order([-(-n // chunk) for n in sizes], lead, grouped=True)
    # H's rows (device scalars) are reported free once each, right after the accumulation
    # of their chunk (the last kernel reading them); the host-scalar queries' never
    h_at = [i for i, (q, _k) in enumerate(order) if q == 0]
    assert [r[0] for r in reads] == [0] * len(h_at)
    assert [(lo, hi) for _q, lo, hi, _n in reads] == [
        (k * chunk, min(k * chunk + chunk, sizes[0])) for q, k in order if q == 0
    ]
    assert [n for *_r, n in reads] == [i + 1 for i in h_at]
    counts = [s for s in seen if s[0] == "count"]
    sums = [s for s in seen if s[0] == "sums"]
    assert len(counts) == len(sums) == len(order)
    for (q, k), cnt, sm in zip(order, counts, sums, strict=True):
        lo, hi = k * chunk, min(k * chunk + chunk, sizes[q])
        want_sc = (h if q == 0 else z)[lo:hi]
        assert cnt[1] == hi - lo and np.array_equal(cnt[2], want_sc)
        assert np.array_equal(sm[1], points[lo:hi]) and np.array_equal(sm[2], want_sc)
    # z's rows went up once per chunk of rows (H's scalars never: they are on the device)
    assert sorted(uploads) == [int(z[lo, 0]) for lo in range(0, max(sizes[1:]), chunk)]
