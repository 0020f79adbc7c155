"""The host-side planning of the GPU MSM (kernels/cuda/msm.py), on the CPU: window rule, level
sizes, scratch model. Why: these decide launch shapes and how much memory the engine budgets; a
level plan that does not shrink would hang, and a scratch model below the real peak would let
the engine's allocator over-commit."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kernels.cuda import msm as cm
from kernels.tuning import DEFAULT_TUNING


def test_window_rule_is_the_cost_argmin_and_grows_with_n() -> None:
    prev = 0
    for k in range(0, 31):
        n = 1 << k
        c = cm.choose_window_bits(n)
        assert cm.MIN_WINDOW <= c <= cm.MAX_WINDOW
        if n > 1:
            best = min(cm.window_cost(n, d) for d in range(cm.MIN_WINDOW, cm.MAX_WINDOW + 1))
            assert cm.window_cost(n, c) == best
        assert c >= prev
        prev = c
    assert [cm.choose_window_bits(1 << k) for k in (16, 20, 24, 27)] == [13, 16, 20, 22]


@pytest.mark.parametrize("m", [1, 2, 7, 8, 9, 1000, 12345, 1 << 20, 218_000_000, 1_610_612_736])
def test_levels_shrink_to_one_thread(m: int) -> None:
    levels = cm._level_sizes(m, m)
    assert levels[-1][2] == 1
    for (size, L, T), nxt in zip(levels, levels[1:], strict=False):
        assert T == -(-size // L) and nxt[0] == 2 * T and nxt[2] < T
    assert len(levels) < 40


def test_plan_and_scratch_model() -> None:
    for k in (4, 10, 16, 20, 24, 27):
        n = 1 << k
        c = cm.choose_window_bits(n)
        p = cm.make_plan(n, c)
        assert p.K == p.W * p.B + 1 and p.S & (p.S - 1) == 0 and p.G * p.S == p.B
        assert n * p.W < 1 << 32  # offsets fit 32 bits
        b = cm.scratch_bytes(n, c)
        assert b >= 192 * p.K + 4 * n * p.W  # at least buckets and sorted entries
        assert b <= cm.scratch_bytes(2 * n, c)
    # fewer entries (zeros, ones) never need more
    assert cm.scratch_bytes(1 << 20, 16, n_entries=1000) < cm.scratch_bytes(1 << 20, 16)


def test_host_scratch_model() -> None:
    """Per chunk: two point buffers, a chunk's MSM and the window sums. Whole-query buckets:
    two point buffers and the chunk's scratch for the largest of the windows the query may
    take (fewer non-trivial scalars pick smaller ones, with more windows), so a cap on the
    window caps the bytes, and the bound holds whatever window the scalars choose."""

    n, chunk = 1 << 27, 1 << 22
    per_chunk = replace(DEFAULT_TUNING, msm_host_buckets="chunk")
    c = cm.choose_window_bits(chunk)
    assert cm.host_scratch_bytes(n, chunk, c, tuning=per_chunk) == (
        2 * chunk * 96 + 2 * 192 * (cm.num_windows(c) + 1) + cm.scratch_bytes(chunk, c)
    )
    assert cm.host_scratch_bytes(1000, chunk) < cm.host_scratch_bytes(n, chunk)
    assert cm.stream_window_bits(n) == cm.choose_window_bits(n)
    assert cm.stream_window_bits(n, 20) == 20 and cm.stream_window_bits(1000, 20) < 20
    caps = [cm.host_scratch_bytes(n, chunk, w) for w in range(16, 23)]
    assert caps == sorted(caps)  # a smaller cap never needs more
    for w in range(16, 23):
        bound = cm.host_scratch_bytes(n, chunk, w)
        p = cm.make_plan(chunk, w)  # dense scalars at the cap: the query's buckets and entries
        assert bound >= 2 * chunk * 96 + 192 * p.K + 4 * chunk * p.W
        assert bound >= 2 * chunk * 96 + cm.scratch_bytes(chunk, w)
    # the resident rule is monotone in n, so a query's scalars never pick more than its size
    ws = [cm.choose_window_bits(1 << k) for k in range(1, 28)]
    assert ws == sorted(ws)
    for chunks in (1, 2, 8, 32, 1000):  # never below the streamed floor, never above a cap
        for x in (0, 1, 1000, 1 << 20, 1 << 27):
            assert cm.STREAM_MIN_WINDOW <= cm.stream_window_bits(x, None, chunks) <= 23
            assert cm.stream_window_bits(x, 14, chunks) <= 14


def test_streamed_window_weighs_the_additions_into_kept_buckets() -> None:
    """One chunk: the resident rule. Many chunks: a smaller window than the query's own (each
    chunk adds its sum into every bucket it reaches), and never above a cap."""
    n = 1 << 27
    assert cm.stream_window_bits(n, None, 1) == cm.choose_window_bits(n) == 22
    c32 = cm.stream_window_bits(n, None, 32)
    assert c32 < 22 and cm.stream_cost(n, c32, 32) < cm.stream_cost(n, 22, 32)
    assert cm.stream_cost(n, 22, 1) == cm.window_cost(n, 22)
    assert cm.stream_window_bits(n, 17, 32) <= 17
    # more chunks never favour more buckets
    assert cm.stream_window_bits(n, None, 16) >= c32


def test_interleave_order_takes_every_chunk_once_in_order_and_spread() -> None:
    chunks = [32, 31, 31, 8]
    order = cm.interleave_order(chunks)
    assert sorted(order) == [(q, k) for q, n in enumerate(chunks) for k in range(n)]
    for q, n in enumerate(chunks):  # each query's chunks in their own order
        assert [k for qq, k in order if qq == q] == list(range(n))
    # spread: no two chunks of the big query with more than 4 others between them
    pos = [i for i, (q, _) in enumerate(order) if q == 0]
    assert max(b - a for a, b in zip(pos, pos[1:], strict=False)) <= 5
    assert cm.interleave_order([1]) == [(0, 0)] and cm.interleave_order([]) == []
    # a lead: the first query's first chunks before any other's, every chunk still once
    led = cm.interleave_order(chunks, lead=2)
    assert led[:2] == [(0, 0), (0, 1)] and sorted(led) == sorted(order)
    assert sorted(cm.interleave_order(chunks, lead=99)) == sorted(order)


@pytest.mark.parametrize("mode", ["query", "query-merge"])
def test_one_pass_scratch_counts_every_query_buckets_and_the_buffers(mode: str) -> None:
    """The buffers, each query's bucket arrays (two with the merge kernel, else one), a
    chunk's sort and levels (its own bucket array too with ``query-merge``, which never
    exists: the old bound, kept), and a single query never below msm_host_points' bound."""
    tuning = replace(DEFAULT_TUNING, msm_host_buckets=mode)
    chunk = 1 << 22
    sizes, windows = [1 << 27, 130_000_000, 33_000_000], [19, 16, 16]
    one = cm.many_scratch_bytes(sizes, chunk, windows, 4, tuning=tuning)
    two = cm.many_scratch_bytes(sizes, chunk, windows, 2, tuning=tuning)
    assert one - two == 2 * chunk * 96
    per_query = 2 if mode == "query-merge" else 1
    arrays = sum(per_query * 192 * cm.make_plan(chunk, w).K for w in windows)
    chunk_scratch = cm.scratch_bytes(chunk, 19)
    if mode == "query":
        chunk_scratch -= 192 * cm.make_plan(chunk, 19).K
    assert one >= 4 * chunk * 96 + arrays + chunk_scratch
    assert cm.many_scratch_bytes([1 << 27], chunk, [19], tuning=tuning) >= cm.host_scratch_bytes(
        1 << 27, chunk, 19, tuning=tuning
    )
    # summed straight into the kept arrays: less than through a second array each
    if mode == "query":
        merge = replace(tuning, msm_host_buckets="query-merge")
        assert one < cm.many_scratch_bytes(sizes, chunk, windows, 4, tuning=merge)
