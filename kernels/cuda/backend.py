"""The CUDA kernel backend: ``KernelBackend`` composed from the GPU NTT/H step, MSM and SRS.

Why a thin composition: the arithmetic lives in ``provetop.kernels.cuda.ntt``, ``msm`` and ``srs``
(each with its own tests and notes); this class only decides *where data lives* and *which
allocator and stream* a call uses, so the engine can drive the GPU through the same interface
as the CPU reference. It also carries the kernels' tuning record
(:class:`provetop.kernels.tuning.KernelTuning`) and passes it to every call.

Where results live: the result of :meth:`ntt`, :meth:`h_step` and :meth:`srs` lives where the
inputs lived. CuPy in, CuPy out (the engine's path: nothing leaves the device until copy-back);
numpy in, numpy out (a caller without a GPU-side array, such as
``provetop.engine.spec.srs.generate_srs``,
gets host arrays and never holds device memory after the call). :meth:`msm` always returns a
numpy ``(12,)`` point (the window combination runs on the host).

Where MSM points live: a CuPy ``points`` array is summed in place (``msm.msm``); a numpy
one is streamed up in chunks of :attr:`CudaBackend.host_chunk` points through two device
buffers (``msm.msm_host_points``), which is how an SRS that does not fit on the card is
used (pinned host memory gives the copy/compute overlap).

Allocations: everything a call allocates (outputs included) comes from ``allocator`` when one
is given (the engine passes its stream-ordered pool), else from an uncached cudaMalloc for the
numpy-in calls (nothing is left in CuPy's caching pool) and CuPy's current allocator otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from provetop.kernels.cuda import check, msm, msm_stages, srs
from provetop.kernels.cuda.h_streamed import run_streamed_h_step
from provetop.kernels.cuda.ntt import CudaNtt
from provetop.kernels.cuda.ntt_plan import log2_size
from provetop.kernels.cuda.runtime import CudaArray, on_stream, require_cupy, to_device
from provetop.kernels.tuning import DEFAULT_TUNING, KernelTuning

DEFAULT_HOST_CHUNK = (
    DEFAULT_TUNING.msm_host_chunk
)  # points per streamed chunk (provetop.kernels.tuning)
SRS_HOST_CHUNK = 1 << 23  # points generated per device round trip for numpy secrets


def is_host(x: Any) -> bool:
    """True for numpy arrays (and anything else that is not in device memory: no CUDA array
    interface, :class:`provetop.kernels.cuda.runtime.CudaArray`)."""
    return isinstance(x, np.ndarray) or not isinstance(x, CudaArray)


def _host_scalars(x: Any) -> np.ndarray:
    """Host scalars as the streamed pass reads them: a (n, 4) uint64 view, C-contiguous (a
    prefix of one array keeps its address, so prefixes of one witness share their uploads)."""
    arr = np.asarray(x)
    if arr.ndim != 2 or arr.shape[1] != 4 or arr.dtype != np.uint64:
        raise ValueError(f"msm scalars must be a uint64 (n, 4) array, got {arr.dtype} {arr.shape}")
    return arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)


def uncached_allocator(cupy: Any) -> Any:
    """An allocator whose blocks are plain cudaMalloc, freed by cudaFree when the last array
    over them goes: for temporaries that must not stay in CuPy's caching pool."""

    def alloc(nbytes: int) -> Any:
        return cupy.cuda.MemoryPointer(cupy.cuda.Memory(max(1, int(nbytes))), 0)

    return alloc


class CudaBackend:
    """``KernelBackend`` on the GPU (see the module docstring for data placement).

    Raises ``provetop.kernels.cuda.runtime.CudaUnavailable`` (a RuntimeError) at construction when
    CuPy
    or a device is missing, which ``provetop.kernels.backends.get_backend`` turns into
    BackendUnavailable. ``tuning`` is kept (:attr:`tuning`) and passed to every kernel.
    """

    name = "cuda"

    def __init__(
        self, host_chunk: int | None = None, tuning: KernelTuning = DEFAULT_TUNING
    ) -> None:
        self.cupy = require_cupy()
        self.tuning = tuning
        self._ntt = CudaNtt(tuning=tuning)
        if host_chunk is None:
            host_chunk = tuning.msm_host_chunk
        if host_chunk < 1:
            raise ValueError(f"host_chunk must be positive, got {host_chunk}")
        self.host_chunk = int(host_chunk)
        self.h_in_place = False  # the engine sets True: it owns a, b, c (see h_step)

    # -- placement helpers -------------------------------------------------------------------

    def _device(self, x: Any, what: str) -> Any:
        """``x`` as a C-contiguous uint64 CuPy array on the current device and stream."""
        cupy = self.cupy
        if is_host(x):
            a = np.ascontiguousarray(x)
            if a.dtype != np.uint64:
                raise ValueError(f"{what}: expected a uint64 array, got {a.dtype}")
            return to_device(cupy, a)
        if x.dtype != cupy.uint64:
            raise ValueError(f"{what}: expected a uint64 array, got {x.dtype}")
        return cupy.ascontiguousarray(x)

    def _host_default(self, allocator: Any, *xs: Any) -> Any:
        """The allocator a call uses: the caller's, else uncached when every input is host."""
        if allocator is None and all(is_host(x) for x in xs):
            return uncached_allocator(self.cupy)
        return allocator

    # what warm_up does, in order: one step each for a caller's progress counter
    WARM_UP_STEPS = ("NTT tables", "MSM module", "check module", "first MSM", "every MSM path")

    def warm_up(self, domain_log: int, step: Callable[[str], None] | None = None) -> None:
        """Compile the modules and build every table a partition of 2^domain_log uses (NTT
        twiddles, H-step factor tables, MSM module), on the current device with CuPy's default
        allocator: tables live for the process, so they must not land in the stream-ordered
        pool the engine trims, and the first partition must not pay for compilation.
        ``step(name)`` is called after each of :attr:`WARM_UP_STEPS` (a module compiled with
        NVRTC on a new machine takes minutes: the caller can say how far it got)."""
        done = step or (lambda name: None)
        k = int(domain_log)
        self._ntt.twiddles(k)
        self._ntt.consts(k)
        for p in self._ntt.h_plan(k):
            self._ntt.pass_tables(p)
        done("NTT tables")
        msm_stages.kernels(self.tuning)
        done("MSM module")
        check.module(self.tuning)
        done("check module")
        # one tiny MSM: the first one in a process paid 390-800 ms on the H200 (CuPy's own
        # kernels for the scan and the scalar classification load on first use)
        cupy = self.cupy
        secrets = cupy.arange(1, 65, dtype=cupy.uint64).reshape(16, 4) % 7
        pts = srs.srs(secrets, tuning=self.tuning)
        msm.msm(pts, secrets, tuning=self.tuning)
        cupy.cuda.Device().synchronize()
        done("first MSM")
        self._warm_msm_paths(pts, secrets)
        cupy.cuda.Device().synchronize()
        done("every MSM path")

    def _warm_msm_paths(self, pts: Any, dense: Any) -> None:
        """Every way a partition's MSMs run, once each on a tiny input, so that none of
        CuPy's own kernels (the elementwise, scan and reduction kernels CuPy compiles with
        NVRTC on first use, per expression and dtype) compiles inside the first partition: a
        ``small`` run's first MSM took 9.4 s after a 1.7 s warm-up that ran only the counting
        sort on dense scalars (H100, 2026-12-07), against 21-50 ms for the next ones.

        The paths: both sorts (counting, radix: the radix one runs from 2^22 dense scalars and
        uses int64 bins, a 2-D scan and its own reductions), scalars mostly 0 and 1 (the ones
        bucket and the tail count), and points in host memory (the streamed MSM of a card
        smaller than the SRS) in several chunks."""
        cupy = self.cupy
        n = int(dense.shape[0])
        ones = cupy.zeros_like(dense)
        ones[: n // 2, 0] = 1
        ones[-1] = dense[-1]
        host_points = cupy.asnumpy(pts)
        for sort in ("counting", "radix"):
            tuning = replace(self.tuning, msm_sort=sort)
            for scalars in (dense, ones):
                msm.msm(pts, scalars, tuning=tuning)
        for scalars in (dense, ones):
            msm.msm_host_points(host_points, scalars, chunk=n // 4, tuning=self.tuning)

    # -- KernelBackend -----------------------------------------------------------------------

    def ntt(
        self,
        x: Any,
        *,
        inverse: bool = False,
        coset: bool = False,
        input_order: str = "natural",
        output_order: str = "natural",
        stream: Any = None,
        allocator: Any = None,
    ) -> Any:
        """Forward/inverse (coset) NTT; see ``provetop.kernels.backend.KernelBackend.ntt``."""
        host = is_host(x)
        with on_stream(stream, self._host_default(allocator, x)) as s:
            d = self._device(x, "ntt")
            out = self._ntt.ntt(
                d,
                inverse=inverse,
                coset=coset,
                input_order=input_order,
                output_order=output_order,
                stream=s,
            )
            return out.get(stream=s) if host else out

    def h_step(
        self,
        a: Any,
        b: Any,
        c: Any,
        *,
        stream: Any = None,
        allocator: Any = None,
        overwrite_inputs: bool | None = None,
        ready: Mapping[str, Any] | None = None,
    ) -> Any:
        """H's n-1 canonical coefficients ``(n - 1, 4)``; scratch and output from
        ``allocator``. The result is a view of an n-row device array (row n-1 is scratch).
        ``ready``: CUDA events by input name ("b", "c", ...) that the step waits for, on its
        stream, just before the part that first reads that input (device inputs still being
        copied: the transforms of a run under the copies of b and c).

        ``overwrite_inputs`` (default :attr:`h_in_place`): for device inputs, run the H step
        in place, H in ``a``'s memory and ``b``, ``c`` used as the work buffers, so the step
        needs no device memory beyond a, b, c (the footprint ``provetop.engine.memory.allocator``
        plans: at
        n = 2^27 the out-of-place step would need 12 GiB more). Safe because the passes that
        read a, b, c first are tile-local DIF passes (no gather), which ``ntt.cuh`` runs in
        place; the one gathering pass reads ``c``'s buffer and writes ``a``'s."""
        host = all(is_host(v) for v in (a, b, c))
        alloc = self._host_default(allocator, a, b, c)
        in_place = self.h_in_place if overwrite_inputs is None else overwrite_inputs
        with on_stream(stream, alloc) as s:
            da, db, dc = (self._device(v, "h_step") for v in (a, b, c))
            if in_place and not host:
                h = self._h_step_in_place(da, db, dc, s, ready)
            else:
                h = self._ntt.h_step(da, db, dc, stream=s, allocator=alloc, ready=ready)
            return h.get(stream=s) if host else h

    def _h_step_in_place(
        self, a: Any, b: Any, c: Any, s: Any, ready: Mapping[str, Any] | None = None
    ) -> Any:
        n = a.shape[0]
        for v in (a, b, c):
            if v.shape != (n, 4) or not v.flags.c_contiguous:
                raise ValueError(f"in-place H step needs C-contiguous ({n}, 4) arrays")
        if len({int(v.data.ptr) for v in (a, b, c)}) != 3:
            raise ValueError("in-place H step needs three distinct buffers")
        k = log2_size(n)
        if k < 1:
            raise ValueError("the H step needs n >= 2")
        bufs = {"a": a, "b": b, "c": c, "out": a, "wb": b, "wc": c}
        self._ntt.run_h_step(k, bufs, s, ready)
        return a[: n - 1]

    def h_step_streamed(
        self,
        a: np.ndarray,
        b: np.ndarray,
        c: np.ndarray,
        slots: list[Any],
        scratch: np.ndarray | None = None,
        *,
        stream: Any = None,
        allocator: Any = None,
        release_twiddles: bool = False,
    ) -> Any:
        """The H step from host a, b, c (page-locked) through one or two device ``slots``
        ((n, 4) uint64, the caller's), with ``scratch`` (page-locked (n, 4)) for one slot
        (``provetop.kernels.cuda.h_streamed``). H is a view of ``slots[0]``. With
        ``release_twiddles`` the twiddle table is dropped afterwards (its bytes: the return's
        second item) so that a small card can give them to the MSMs."""
        with on_stream(stream, allocator) as s:
            q = slots[1] if len(slots) > 1 else None
            h = run_streamed_h_step(
                a, b, c, slots[0], q, scratch, ntt=self._ntt, stream=s, allocator=allocator
            )
            released = 0
            if release_twiddles:
                s.synchronize()  # the passes queued on s still read the table
                released = self._ntt.release_twiddles()
            return h, released

    def msm(
        self,
        points: Any,
        scalars: Any,
        *,
        stream: Any = None,
        allocator: Any = None,
        window_max: int | None = None,
        chunk: int | None = None,
    ) -> np.ndarray:
        """sum_i scalars[i] points[i] as a numpy affine ``(12,)``. Device points are summed in
        place; host points are streamed in chunks of ``chunk`` points (default
        :attr:`host_chunk`; pinned host memory overlaps the copies with the sums), at a window
        of at most ``window_max`` (the engine's cap from its memory plan; None: the query's
        own)."""
        alloc = self._host_default(allocator, points, scalars)
        with on_stream(stream, alloc) as s:
            sc = self._device(scalars, "msm scalars")
            if is_host(points):
                pts = points if points.dtype == np.uint64 else np.asarray(points, np.uint64)
                return msm.msm_host_points(
                    pts,
                    sc,
                    chunk=self._chunk(chunk),
                    stream=s,
                    allocator=alloc,
                    window_max=window_max,
                    tuning=self.tuning,
                )
            pts = self._device(points, "msm points")
            return msm.msm(pts, sc, stream=s, allocator=alloc, tuning=self.tuning)

    def msm_many(
        self,
        points: list[Any],
        scalars: list[Any],
        *,
        stream: Any = None,
        allocator: Any = None,
        windows_max: list[int | None] | None = None,
        ready: list[Any] | None = None,
        buffers: int = 4,
        lead: int = 0,
        prelude: list[tuple[np.ndarray, Any]] | None = None,
        chunk: int | None = None,
        host_scalars: bool = False,
        rows_read: Any = None,
    ) -> list[np.ndarray]:
        """Several MSMs whose points are all in (pinned) host memory, streamed together
        (:func:`provetop.kernels.cuda.msm.msm_host_points_many`: their chunks interleaved through
        ``buffers`` device buffers, so that the copies of the copy-bound queries run under
        the sums of the compute-bound one). ``windows_max``: each query's window cap;
        ``ready``: per query, an event its scalars' upload records, or None; ``lead`` and
        ``prelude`` (host-to-device copies the later queries need, made on the pass's copy
        stream after the first query's first chunks): as ``msm_host_points_many`` takes them;
        ``chunk``: points per upload (default :attr:`host_chunk`); ``host_scalars``: scalars in
        host memory stay there and go up per chunk beside the points (queries over prefixes
        of one array share each chunk's upload), instead of being copied up whole first;
        ``rows_read``: as ``msm_host_points_many`` takes it (device scalars' rows done with)."""
        k = len(points)
        caps = windows_max or [None] * k
        events = ready or [None] * k
        alloc = self._host_default(allocator, *points, *scalars)
        with on_stream(stream, alloc) as s:
            jobs = []
            for pts, sc, cap, ev in zip(points, scalars, caps, events, strict=True):
                if not is_host(pts):
                    raise ValueError("msm_many streams host points only")
                pts = pts if pts.dtype == np.uint64 else np.asarray(pts, np.uint64)
                keep = host_scalars and is_host(sc)
                dsc = _host_scalars(sc) if keep else self._device(sc, "msm scalars")
                jobs.append(msm.StreamedQuery(pts, dsc, window_max=cap, ready=ev))
            return msm.msm_host_points_many(
                jobs,
                chunk=self._chunk(chunk),
                stream=s,
                allocator=alloc,
                buffers=buffers,
                lead=lead,
                prelude=prelude,
                rows_read=rows_read,
                tuning=self.tuning,
            )

    def _chunk(self, chunk: int | None) -> int:
        if chunk is None:
            return self.host_chunk
        if chunk < 1:
            raise ValueError(f"chunk must be positive, got {chunk}")
        return int(chunk)

    def srs(self, secrets: Any, *, stream: Any = None, allocator: Any = None) -> Any:
        """P_i = [s_i]G. Host secrets give host points, generated in device round trips of
        at most :data:`SRS_HOST_CHUNK` points (the device never holds a whole 2^27 query)."""
        alloc = self._host_default(allocator, secrets)
        if not is_host(secrets):
            return srs.srs(secrets, stream=stream, allocator=alloc, tuning=self.tuning)
        sec = np.ascontiguousarray(secrets)
        if sec.ndim != 2 or sec.shape[1] != 4 or sec.dtype != np.uint64:
            raise ValueError(f"secrets must be a uint64 (n, 4) array, got {sec.shape}")
        n = sec.shape[0]
        out = np.empty((n, 12), dtype=np.uint64)
        with on_stream(stream, alloc) as s:
            for lo in range(0, n, SRS_HOST_CHUNK):
                hi = min(n, lo + SRS_HOST_CHUNK)
                d = srs.srs(
                    to_device(self.cupy, sec[lo:hi]), stream=s, allocator=alloc, tuning=self.tuning
                )
                out[lo:hi] = d.get(stream=s)
                del d
        return out

    def srs_powers(
        self,
        sigma: int,
        count: int,
        out: Any,
        *,
        stream: Any = None,
        allocator: Any = None,
        chunk: int = SRS_HOST_CHUNK,
        progress: Callable[[int], None] | None = None,
    ) -> Any:
        """Fill ``out`` ``(count, 12)`` with [sigma^i]G, i < count: an SRS query made without
        its secrets ever existing outside the device (``provetop.engine.spec.srs``). ``out`` on the
        device
        is written in place; a host ``out`` (pinned memory for full copy speed) receives
        device round trips of ``chunk`` points. ``progress(points)``: called after each chunk
        is complete (the stream synchronised, so the count is of points made, not queued);
        what it raises ends the generation there (the engine's stop)."""
        if tuple(out.shape) != (count, 12):
            raise ValueError(f"out must be ({count}, 12), got {tuple(out.shape)}")
        host = is_host(out)
        alloc = self._host_default(allocator, out)
        with on_stream(stream, alloc) as s:
            for lo in range(0, count, chunk):
                hi = min(count, lo + chunk)
                sec = check.powers(sigma, lo, hi - lo, canonical=True, stream=s, tuning=self.tuning)
                if host:
                    pts = srs.srs(sec, stream=s, allocator=alloc, tuning=self.tuning)
                    pts.get(stream=s, out=out[lo:hi])
                    del pts
                else:
                    srs.srs(sec, stream=s, allocator=alloc, out=out[lo:hi], tuning=self.tuning)
                del sec
                if progress is not None:
                    s.synchronize()
                    progress(hi - lo)
            s.synchronize()
        return out


__all__ = ["CudaBackend", "DEFAULT_HOST_CHUNK", "is_host", "to_device", "uncached_allocator"]
