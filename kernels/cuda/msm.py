"""GPU multi-scalar multiplication on BLS12-381 G1: the entry points.

:func:`msm` sums device (or host) points in one pass of the stages of
:mod:`provetop.kernels.cuda.msm_stages`; :func:`msm_host_points` and :func:`msm_host_points_many`
stream
points from host memory in chunks (a card smaller than the SRS), several queries' chunks
interleaved in one pass. The sizes, orders and memory models of all three are
:mod:`provetop.kernels.cuda.msm_plan` (pure Python), which the engine's memory plan reads.

Layout (``kernels/backend.py``): points ``(n, 12)`` uint64 affine Montgomery, scalars ``(n, 4)``
uint64 canonical; the result is one affine point as a numpy ``(12,)`` array.

Scratch memory is drawn from ``allocator`` (a callable ``nbytes -> cupy.cuda.MemoryPointer``, as
``cupy.cuda.set_allocator`` takes) when given, else CuPy's current allocator;
:func:`provetop.kernels.cuda.msm_plan.scratch_bytes` says how much one call needs at most, so the
engine
can budget.

Tuning (:class:`provetop.kernels.tuning.KernelTuning`, passed down by the caller; the defaults are
what
the published figures use): the build's defines, and which sort orders the entries by bucket
(``msm_sort``: the counting sort's scatter, or the radix partition of
:func:`provetop.kernels.cuda.msm_plan.radix_plan`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from provetop.kernels.cuda import msm_plan as mp

# Read through the module: tests stand in for its launchers to follow the pass on the host.
from provetop.kernels.cuda import msm_stages
from provetop.kernels.cuda.msm_stages import Counted, MsmKernels, StageMarks
from provetop.kernels.cuda.runtime import CudaArray, Event, on_stream, require_cupy, to_device
from provetop.kernels.tuning import DEFAULT_TUNING, KernelTuning


def window_sums(
    points: Any,
    scalars: Any,
    c: int,
    stream: Any,
    marks: StageMarks | None = None,
    *,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> Any:
    """The device array ``(W + 1, 24)`` of XYZZ window sums sum_b (b+1) bucket[w][b] followed
    by the ones bucket, for device ``points`` and ``scalars`` (current allocator and stream).
    ``marks``, when a list, receives (stage, recorded cupy Event) pairs for a time breakdown."""
    cupy = require_cupy()
    mod = msm_stages.kernels(tuning)
    n = int(points.shape[0])
    p = mp.make_plan(n, c)
    mark = msm_stages.stage_marker(cupy, stream, marks)
    mark("start")
    buckets = msm_stages.accumulate_buckets(mod, points, scalars, p, None, stream, tuning, mark)
    if buckets is None:
        return cupy.zeros((p.W + 1, mp.XYZZ_WORDS), dtype=np.uint64)
    return msm_stages.reduce_buckets(mod, buckets, p, stream, mark)


def sort_entries(
    scalars: Any,
    c: int,
    *,
    stream: Any = None,
    allocator: Any = None,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> tuple[Any, Any]:
    """Stages 1-3 alone, for device ``scalars`` (n, 4) and window ``c``: the bucket offsets
    (K + 1) and the entries (point index | sign << 31) grouped by bucket, both device uint32
    arrays. Why public: the two sorts must give the same buckets, and a test can say so
    without the point arithmetic after them."""
    cupy = require_cupy()
    n = int(scalars.shape[0])
    p = mp.make_plan(n, c)
    with on_stream(stream, allocator) as s:
        mod = msm_stages.kernels(tuning)
        offs, sorted_e, *_ = msm_stages.bucket_sort(
            mod, scalars, n, p, s, tuning, msm_stages.no_mark
        )
        if sorted_e is None:
            sorted_e = cupy.empty(0, dtype=np.uint32)
    return offs, sorted_e


def msm(
    points: Any,
    scalars: Any,
    *,
    stream: Any = None,
    allocator: Any = None,
    window_bits: int | None = None,
    marks: StageMarks | None = None,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> np.ndarray:
    """sum_i scalars[i] * points[i] for ``points`` (n, 12) and ``scalars`` (n, 4); returns the
    affine result as a numpy ``(12,)`` array (infinity = zeros). The window is
    :func:`provetop.kernels.cuda.msm_plan.choose_window_bits` of the number of scalars other than 0
    and
    1 unless given. Device ``points`` are read in place; host (numpy) ``points`` go through
    :func:`msm_host_points` (chunked uploads, pinned memory for the overlap). ``tuning``
    selects the build's defines and the sort."""
    cupy = require_cupy()
    if isinstance(scalars, np.ndarray):
        with on_stream(stream, allocator):  # the upload is ordered on the caller's stream
            scalars = to_device(cupy, scalars)
    if isinstance(points, np.ndarray):
        return msm_host_points(
            points,
            scalars,
            stream=stream,
            allocator=allocator,
            window_bits=window_bits,
            tuning=tuning,
        )
    n = msm_stages.check_inputs(points, scalars)
    with on_stream(stream, allocator) as s:
        c = window_bits or mp.choose_window_bits(msm_stages.tail_count(scalars) if n else 0)
        sums = window_sums(points, scalars, c, s, marks, tuning=tuning).get(stream=s)
    return msm_stages.combine_windows(sums, c)


# --- streamed MSMs: points in host memory ----------------------------------------------------


class _StreamingKit:
    """The copy stream and events of :func:`msm_host_points`, made once per thread and
    device and reused by every call. On the H200 creating CUDA events waited for the running
    kernel (2026-11-29, db942e6; bench/notes/msm.md), and the 16 GiB engine streams four MSMs
    per partition. Reuse is safe: a call returns only after its compute stream has waited for
    every copy, so no wait on these events is pending when the next call records them."""

    def __init__(self, cupy: Any) -> None:
        def event() -> Any:
            return cupy.cuda.Event(disable_timing=True)

        self._event = event
        self.copy_stream = cupy.cuda.Stream(non_blocking=True)
        self.allocated, self.drained = event(), event()
        self.uploaded: list[Any] = []  # one per chunk buffer
        self.consumed: list[Any] = []
        self.scalars_up: list[Any] = []  # one per scalar buffer of a pass (ScalarFeed)
        self.scalars_read: list[Any] = []
        self.buffers(2)
        # a joint pass: the prelude's copies done; the count stages' read-backs, in turn
        self.prelude = event()
        self.counted = [event(), event()]

    def buffers(self, count: int, scalar_slots: int = 0) -> None:
        """Make sure there are events for ``count`` chunk buffers and ``scalar_slots`` scalar
        buffers (made once, then kept)."""
        while len(self.uploaded) < count:
            self.uploaded.append(self._event())
            self.consumed.append(self._event())
        while len(self.scalars_up) < scalar_slots:
            self.scalars_up.append(self._event())
            self.scalars_read.append(self._event())


class _Kits(threading.local):
    """Each thread's streaming kits, by device (a thread's kit is never shared: its events
    are recorded by that thread's calls only)."""

    def __init__(self) -> None:
        self.by_device: dict[int, _StreamingKit] = {}


_kits = _Kits()


def _streaming_kit(cupy: Any) -> _StreamingKit:
    kits = _kits.by_device
    device = cupy.cuda.Device().id
    kit = kits.get(device)
    if kit is None:
        kit = kits[device] = _StreamingKit(cupy)
    return kit


def msm_host_points(
    points: np.ndarray,
    scalars: Any,
    *,
    chunk: int = 1 << 25,
    stream: Any = None,
    allocator: Any = None,
    window_bits: int | None = None,
    window_max: int | None = None,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> np.ndarray:
    """The same sum with ``points`` in host memory (pinned, see
    :func:`provetop.kernels.cuda.host_pinned.pinned_empty`, for the overlap) and ``scalars`` on the
    device: for a card smaller than the SRS. Points go up in chunks through two device buffers
    on a copy stream; chunk k+1 uploads while chunk k is summed.

    One bucket array is kept for the whole query (window:
    :func:`provetop.kernels.cuda.msm_plan.stream_window_bits` of the query's non-trivial scalars, at
    most ``window_max``), every chunk is summed straight into it (a bucket begun in a chunk
    starts from its kept sum), and the buckets are reduced once at the end. Why: a chunk
    summed as an MSM of its own (its window, a bucket reduction per chunk) took 1,295 ms at
    2^27 in chunks of 2^22 where the kept buckets took 1,061, and later chunks summed into a
    second array that a merge kernel added in took 1,177 (H200, 2026-12-02, 465a624 and
    3f043be; bench/notes/msm.md). Device memory:
    :func:`provetop.kernels.cuda.msm_plan.host_scratch_bytes`."""
    job = StreamedQuery(points, scalars, window_bits=window_bits, window_max=window_max)
    return msm_host_points_many(
        [job], chunk=chunk, stream=stream, allocator=allocator, buffers=2, tuning=tuning
    )[0]


@dataclass
class StreamedQuery:
    """One MSM of :func:`msm_host_points_many`: host ``points``, ``scalars`` on the device or
    in host memory (sent up per chunk), its window (``window_bits``) or the cap on it
    (``window_max``), and ``ready``: a CUDA event its scalars' upload records (the compute
    stream waits for it before the query's first chunk, not before the whole call)."""

    points: np.ndarray
    scalars: Any
    window_bits: int | None = None
    window_max: int | None = None
    ready: Any = None


def _host_key(scalars: Any) -> int | None:
    """Where a query's scalars begin in host memory (None: they are on the device, which an
    array says by offering the CUDA array interface)."""
    if not isinstance(scalars, np.ndarray) or isinstance(scalars, CudaArray):
        return None
    return int(scalars.__array_interface__["data"][0])


RowsRead = Callable[[int, int, int, Any], None]
# A probe's chunk events: (start, end) event pairs on the way in, (query, chunk, start, end)
# rows on the way out (:func:`msm_host_points_many`).
ChunkEvents = list[tuple[Any, ...]]


class _JointPass:
    """One call of :func:`msm_host_points_many` on its compute stream ``s``: the order of the
    chunks, the device buffers they go up through, and each query's window, plan and kept
    buckets (made at its first chunk). Each method is one step of :meth:`stream_chunks`."""

    def __init__(
        self,
        cupy: Any,
        mod: MsmKernels,
        jobs: list[StreamedQuery],
        ns: list[int],
        chunk: int,
        s: Any,
        *,
        buffers: int,
        lead: int,
        prelude: list[tuple[np.ndarray, Any]] | None,
        rows_read: RowsRead | None,
        tuning: KernelTuning,
    ) -> None:
        self.cupy, self.mod, self.jobs, self.ns, self.chunk, self.s = cupy, mod, jobs, ns, chunk, s
        self.prelude, self.rows_read, self.tuning = prelude, rows_read, tuning
        self.keys = [_host_key(j.scalars) for j in jobs]
        nq = len(jobs)
        self.windows: list[int] = [0] * nq
        self.plans: list[Any] = [None] * nq
        self.kept: list[Any] = [None] * nq
        grouped = any(k is not None for k in self.keys[1:])
        self.order = mp.interleave_order([-(-n // chunk) for n in ns], lead, grouped)
        self.kit = kit = _streaming_kit(cupy)
        self.nb = nb = max(1, min(buffers, len(self.order)))
        self.feed = feed = mp.plan_scalar_feed(self.order, ns, chunk, self.keys, nb)
        kit.buffers(nb, feed.slots)
        self.copy_stream = kit.copy_stream
        self.bufs = [cupy.empty((chunk, 12), dtype=np.uint64) for _ in range(nb)]
        self.sbufs = [cupy.empty((chunk, 4), dtype=np.uint64) for _ in range(feed.slots)]
        # The buffers come from the allocator in the order of the compute stream; with a
        # stream-ordered pool they may be memory a kernel still queued there has just freed.
        # The copy stream must not write them before that work is done.
        kit.allocated.record(s)
        self.copy_stream.wait_event(kit.allocated)
        self.prelude_sent = not prelude
        self.sent = [False] * len(feed.uploads)

    def rows(self, i: int) -> tuple[int, int, int, int]:
        """(query, chunk, first row, end row) of order entry ``i``."""
        q, k = self.order[i]
        lo = k * self.chunk
        return q, k, lo, min(lo + self.chunk, self.ns[q])

    def send_prelude(self) -> None:
        """The prelude's copies on the copy stream (once), then its event."""
        if self.prelude_sent:
            return
        self.prelude_sent = True
        for host, dev in self.prelude or []:
            dev.set(host, stream=self.copy_stream)
        self.kit.prelude.record(self.copy_stream)

    def send_scalars(self, i: int) -> None:
        """The host scalars chunk i reads, if no earlier chunk has sent them up."""
        feed = self.feed
        u = feed.use[i]
        if u is None or self.sent[u]:
            return
        self.sent[u] = True
        q, lo, hi = feed.uploads[u]
        slot = u % feed.slots
        if u >= feed.slots:  # the last chunk reading the slot's previous rows is done
            self.copy_stream.wait_event(self.kit.scalars_read[slot])
        self.sbufs[slot][: hi - lo].set(self.jobs[q].scalars[lo:hi], stream=self.copy_stream)
        self.kit.scalars_up[slot].record(self.copy_stream)

    def scalars_of(self, i: int) -> Any:
        """Chunk i's scalars on the device (for host scalars: in their buffer)."""
        q, _k, lo, hi = self.rows(i)
        u = self.feed.use[i]
        if u is None:
            return self.jobs[q].scalars[lo:hi]
        return self.sbufs[u % self.feed.slots][: hi - lo]

    def upload(self, i: int) -> None:
        """Chunk i's points (and first its host scalars) into buffer i mod nb."""
        q, _k, lo, hi = self.rows(i)
        if q > 0:
            self.send_prelude()
        self.send_scalars(i)  # first: the chunk's count stage (queued earlier) waits for them
        b = i % self.nb
        if i >= self.nb:  # the sums of chunk i - nb are done with the buffer
            self.copy_stream.wait_event(self.kit.consumed[b])
        self.bufs[b][: hi - lo].set(self.jobs[q].points[lo:hi], stream=self.copy_stream)
        self.kit.uploaded[b].record(self.copy_stream)

    def begin(self, q: int) -> None:
        """A query's first chunk: its inputs' waits, its window, its bucket array."""
        j, n, s = self.jobs[q], self.ns[q], self.s
        if j.ready is not None:
            s.wait_event(j.ready)
        if q > 0 and self.prelude:
            self.send_prelude()
            s.wait_event(self.kit.prelude)
        nontrivial = (
            n if self.keys[q] is not None else (msm_stages.tail_count(j.scalars) if n else 0)
        )
        chunks = -(-n // self.chunk) if n else 1
        c = j.window_bits or mp.stream_window_bits(nontrivial, j.window_max, chunks)
        p = mp.make_plan(self.chunk, c)
        self.windows[q], self.plans[q] = c, p
        self.kept[q] = self.cupy.zeros((p.K, mp.XYZZ_WORDS), dtype=np.uint64)

    def count(self, i: int) -> Counted:
        """Chunk i's count stage, queued now (every chunk holds at least one point)."""
        q, _k, lo, hi = self.rows(i)
        if self.plans[q] is None:
            self.begin(q)
        u = self.feed.use[i]
        if u is not None:
            if not self.sent[u]:  # (one buffer: its points are queued after this count)
                self.send_scalars(i)
            self.s.wait_event(self.kit.scalars_up[u % self.feed.slots])
        done = self.kit.counted[i % 2]
        return msm_stages.count_stage(
            self.mod, self.scalars_of(i), hi - lo, self.plans[q], self.s, done
        )

    def sum_chunk(self, i: int, counted: Counted | None, pair: tuple[Event, Event] | None) -> None:
        """Chunk i's sums straight into its query's kept buckets (the first chunk: into
        zeros), between ``pair``'s events when given; then the events that free its buffers
        (and the caller's ``rows_read`` for device scalars)."""
        q, k, lo, hi = self.rows(i)
        s, kit = self.s, self.kit
        b = i % self.nb
        s.wait_event(kit.uploaded[b])
        pts, sc = self.bufs[b][: hi - lo], self.scalars_of(i)
        if pair is not None:
            pair[0].record(s)
        p = self.plans[q]
        msm_stages.accumulate_buckets(
            self.mod, pts, sc, p, self.kept[q], s, self.tuning, counted=counted, kept=k > 0
        )
        kit.consumed[b].record(s)
        u = self.feed.use[i]
        if u is not None:
            kit.scalars_read[u % self.feed.slots].record(s)
        elif self.rows_read is not None:
            self.rows_read(q, lo, hi, s)
        if pair is not None:
            pair[1].record(s)

    def stream_chunks(self, pairs: ChunkEvents | None, chunk_events: ChunkEvents | None) -> None:
        """Every chunk in order, the copy stream up to nb - 1 chunks ahead of the sums and
        each chunk's count stage queued before the previous chunk's accumulation (its
        read-back is then complete, or nearly, when the host needs it)."""
        order, nb, s = self.order, self.nb, self.s
        try:
            for i in range(min(nb - 1, len(order))):
                self.upload(i)
            counted = self.count(0) if order else None  # (no chunk at all: the loop never runs)
            for i, (q, k) in enumerate(order):
                if i + nb - 1 < len(order):
                    self.upload(i + nb - 1)
                following = self.count(i + 1) if i + 1 < len(order) else None
                pair = pairs[i] if pairs is not None else None
                self.sum_chunk(i, counted, pair)
                if chunk_events is not None and pair is not None:
                    chunk_events.append((q, k, *pair))
                counted = following
        finally:
            # The buffers are freed in the compute stream's order as the pass ends. After an
            # error part-way, a copy may still be queued into one of them on the copy stream,
            # which nothing else waits for: the compute stream waits for it here.
            self.send_prelude()  # (its device arrays must not be read before it lands)
            self.kit.drained.record(self.copy_stream)
            s.wait_event(self.kit.drained)

    def reduce(self) -> list[Any]:
        """The chunk buffers given back, then each query's window sums (a query of no points,
        never begun: the zero sums)."""
        self.bufs.clear()  # the chunk buffers go back before the reductions allocate
        self.sbufs.clear()
        sums = []
        for q in range(len(self.jobs)):
            if self.plans[q] is None:
                self.begin(q)
            sums.append(msm_stages.reduce_buckets(self.mod, self.kept[q], self.plans[q], self.s))
            self.kept[q] = None
        return sums


def msm_host_points_many(
    jobs: list[StreamedQuery],
    *,
    chunk: int = 1 << 22,
    stream: Any = None,
    allocator: Any = None,
    buffers: int = 2,
    lead: int = 0,
    prelude: list[tuple[np.ndarray, Any]] | None = None,
    chunk_events: ChunkEvents | None = None,
    rows_read: RowsRead | None = None,
    tuning: KernelTuning = DEFAULT_TUNING,
) -> list[np.ndarray]:
    """Several streamed MSMs in one pass (the results in ``jobs`` order): every query keeps its
    bucket array (:func:`msm_host_points`), and their chunks go up through ``buffers`` device
    buffers on one copy stream in :func:`provetop.kernels.cuda.msm_plan.interleave_order`
    (``lead``),
    the copy stream running up to ``buffers`` - 1 chunks ahead of the sums. With one query and
    two buffers this is :func:`msm_host_points`. Device memory:
    :func:`provetop.kernels.cuda.msm_plan.many_scratch_bytes`.

    A query's scalars may be on the device or in (pinned) host memory. Host scalars go up
    chunk by chunk beside the points, through a few scalar buffers
    (:func:`provetop.kernels.cuda.msm_plan.plan_scalar_feed`): queries whose host scalars begin at
    one
    address (prefixes of one array, as the engine's L, A and B-G1 of z) take their chunk k
    together (the order is then ``grouped``) and share one upload of those rows. Why: the
    engine's aux scalars (4.2 GB at 2^27) need not sit on the device through the whole pass.
    The window of a query with host scalars is chosen from its row count (counting its
    non-trivial scalars would read them all on the host): at the engine's companion cap it is
    the same window for any witness with a million of them.

    ``prelude``: (host, device) copies the queries after the first need (the engine's aux
    scalars when they are on the device), made on the copy stream just before the first of
    their chunks, so that they do not share the link with the first query's first chunks;
    those queries' sums wait for them. A query's window (from its scalars: one host sync) and
    buckets are made at its first chunk.

    ``chunk_events``: for a probe, (start, end) CUDA event pairs made beforehand (making an
    event can wait for the running kernel), one per chunk in the order taken; each chunk's
    sums are recorded between them, after its waits, and the list gets (query, chunk, start,
    end) rows in their place.

    ``rows_read(q, lo, hi, stream)``: called once the last kernel reading rows lo..hi of query
    q's device scalars is queued on ``stream`` (after that chunk's accumulation); the caller
    records an event there to reuse those rows (the engine copies the next partition's a
    into H's block that way, ``engine.handover``)."""
    tuning = mp.streamed_tuning(tuning)
    cupy = require_cupy()
    ns = [msm_stages.check_inputs(j.points, j.scalars) for j in jobs]
    mod = msm_stages.kernels(tuning)
    chunk = max(1, min(chunk, max(ns, default=1) or 1))
    with on_stream(stream, allocator) as s:
        pairs = list(chunk_events) if chunk_events is not None else None
        if chunk_events is not None:
            chunk_events.clear()
        run = _JointPass(
            cupy,
            mod,
            jobs,
            ns,
            chunk,
            s,
            buffers=buffers,
            lead=lead,
            prelude=prelude,
            rows_read=rows_read,
            tuning=tuning,
        )
        run.stream_chunks(pairs, chunk_events)
        host = [x.get(stream=s) for x in run.reduce()]
    return [msm_stages.combine_windows(h, c) for h, c in zip(host, run.windows, strict=True)]
