"""GPU NTT and Groth16 H step over BLS12-381 Fr: the launches of ``src/ntt/ntt.cu`` (CuPy).

Why split into a planner and an executor: the planner (:mod:`provetop.kernels.cuda.ntt_plan`, pure
Python, no CuPy) turns one request into a list of passes over named buffers and named tables;
this module maps the names to CuPy arrays and launches, and keeps the device's tables. The CPU
tests run the very same plans through a host build of ``src/ntt/ntt.cuh``
(``tests/kernels/test_cuda_ntt_host.py``), so the GPU tests only have to prove the device
build. Arrays are ``(n, 4)`` or ``(batch, n, 4)`` uint64, Montgomery form
(``kernels/backend.py``).

Memory: the twiddle table holds 2^(K-1) + 1 elements for the largest K used (2 GiB at K = 27),
built once per device on the GPU and reused, with a stride, for every smaller size.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from provetop.kernels.cuda.ntt_plan import (
    F_POST_FULL,
    F_PRE_FULL,
    TILE_LOG,
    Pass,
    const_values,
    default_lowest_levels,
    default_max_levels,
    factor_table_values,
    log2_size,
    plan_h_step,
    plan_h_step_parts,
    plan_ntt,
    twiddle_split,
)
from provetop.kernels.cuda.runtime import KernelModule, load, require_cupy
from provetop.kernels.tuning import DEFAULT_TUNING, KernelTuning

DEFAULT_SHARED_BYTES = 48 << 10  # above this a kernel needs the opt-in attribute
_U64 = np.dtype(np.uint64)  # CuPy arrays carry NumPy dtypes


SOURCE = "ntt/ntt.cu"


def ntt_defines(tuning: KernelTuning = DEFAULT_TUNING) -> dict[str, str]:
    """Compile-time options of ntt.cu: none by default; ``tuning.ntt_defines``
    (``PROVETOP_NTT_DEFINES="A=1,B=2"``) for tuning runs (e.g. NTT_MIN_BLOCKS, MONT_PORTABLE)."""
    return dict(tuning.ntt_defines)


def module(tuning: KernelTuning = DEFAULT_TUNING) -> KernelModule:
    """ntt.cu on the current device, with ``tuning``'s defines (also home of the Fr utility
    kernels of :mod:`provetop.kernels.cuda.fr` and the multiplication ceilings of ``bench ntt``)."""
    return load(SOURCE, defines=tuning.ntt_defines, cubin_dir=tuning.cubin_dir)


@dataclass
class _DeviceTables:
    """The tables one device keeps for the life of the process (they do not depend on the
    module's defines): twiddles, factor tables and constants."""

    tw: Any = None
    tw_log: int = 0
    tables: dict[tuple[str, int, bool], tuple[Any, Any, int]] = field(default_factory=dict)
    consts: dict[int, Any] = field(default_factory=dict)
    generation: int = 0  # bumped when the twiddle table is rebuilt: cached programs go stale


_tables: dict[int, _DeviceTables] = {}
_tables_lock = threading.Lock()


def _device_tables() -> _DeviceTables:
    cupy = require_cupy()
    dev = cupy.cuda.Device().id
    with _tables_lock:
        st = _tables.get(dev)
        if st is None:
            st = _tables[dev] = _DeviceTables()
        return st


MAX_PROGRAMS = 256  # cached launch programs per CudaNtt (cleared when full)


@dataclass
class _DriverLaunch:
    """One pass for ``cuLaunchKernel``: its arguments packed once, one 8-byte slot each
    (pointers, and the int32 values in a slot's low half: little-endian), and the array of
    slot addresses the driver reads them through. Only the caller's buffers are written per
    call. ``keep`` holds the arrays whose addresses are packed, so they outlive the program."""

    fn: int
    grid: tuple[int, int]
    block: int
    shared: int
    blob: np.ndarray
    params: np.ndarray
    slots: tuple[tuple[int, str], ...]
    keep: tuple[Any, ...]
    params_ptr: int = 0  # params' address (numpy's .ctypes builds an object on every access)


def _driver_launch(
    fn: Any, grid: tuple[int, int], block: int, shared: int, args: tuple[Any, ...]
) -> _DriverLaunch:
    """Pack ``args`` (buffer names as str, CuPy arrays, np.int32) for :class:`_DriverLaunch`."""
    blob = np.zeros(len(args), dtype=np.uint64)
    slots = []
    keep = []
    for i, a in enumerate(args):
        if isinstance(a, str):
            slots.append((i, a))
        elif isinstance(a, np.int32):
            blob[i] = int(a) & 0xFFFFFFFF
        else:
            blob[i] = a.data.ptr
            keep.append(a)
    fn_ptr = fn.kernel.ptr  # the CUfunction behind CuPy's RawKernel
    base = blob.ctypes.data
    params = np.array([base + 8 * i for i in range(len(args))], dtype=np.uint64)
    return _DriverLaunch(
        fn_ptr, grid, block, shared, blob, params, tuple(slots), tuple(keep), params.ctypes.data
    )


@dataclass
class _Program:
    """Resolved launches of one plan (see :meth:`CudaNtt._program`): per pass the kernel, grid,
    block, shared bytes and arguments packed for ``cuLaunchKernel``, with the places of the
    caller's buffers in them.

    Why the driver's launch and not CuPy's kernel call: CuPy converts each of a pass's 19
    arguments on every launch, and at 2^16 .. 2^20 that host time before the first launch is
    GPU idle time in every call (bench/notes/ntt.md, 2026-12-02, the NTT at 2^20). On
    the H200 the packed launches took 2^16 0.050 -> 0.045 ms and 2^20 0.284 -> 0.281, the rest
    equal; as programmatic dependents of the pass before (``cuLaunchKernelEx``) 2^16 took
    0.073 and 2^20 0.296 (2026-12-03, 3c90f38 and 501d527)."""

    generation: int
    driver: list[_DriverLaunch]
    cupy: Any = None  # the module, for the driver launch (no import check per call)
    device: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def launch(self, buffers: dict[str, Any], stream: Any) -> None:
        """Launch every pass on ``stream`` (a CuPy stream) with the named buffers.
        ``cuLaunchKernel`` copies the argument values before it returns, so the one blob per
        pass is rewritten under the lock by the next call, from whichever thread."""
        driver = self.cupy.cuda.driver
        if not driver.ctxGetCurrent():
            # a thread whose first CUDA call this is (the caller's arrays came from another
            # thread): the runtime makes the device's primary context current, as CuPy's own
            # calls would have
            self.cupy.cuda.runtime.setDevice(self.device)
        launch = driver.launchKernel
        ptr = stream.ptr
        with self.lock:
            for d in self.driver:
                for i, name in d.slots:
                    d.blob[i] = buffers[name].data.ptr
                gx, gy = d.grid
                launch(d.fn, gx, gy, 1, d.block, 1, 1, d.shared, ptr, d.params_ptr, 0)


def _alloc(cupy: Any, shape: tuple[int, ...], allocator: Any) -> Any:
    if allocator is None:
        return cupy.empty(shape, dtype=cupy.uint64)
    nbytes = int(np.prod(shape)) * 8
    return cupy.ndarray(shape, dtype=cupy.uint64, memptr=allocator(nbytes))


class CudaNtt:
    """The NTT and H-step half of the CUDA backend (matches
    provetop.kernels.backend.KernelBackend)."""

    name = "cuda"

    def __init__(
        self,
        max_levels: int | None = None,
        tuning: KernelTuning = DEFAULT_TUNING,
        lowest_levels: int | None = None,
    ) -> None:
        # None: the measured rule per size (default_max_levels); a number pins every plan to it
        self.max_levels = max_levels
        # the transforms' pass over the lowest levels takes this many (plan_transform; 0: as
        # the others); None: default_lowest_levels when max_levels is None too, else 0, so a
        # pinned max_levels gives the plans it gave before the rule. The H step keeps its plans.
        if lowest_levels is not None and not 0 <= lowest_levels <= TILE_LOG:
            raise ValueError(f"lowest_levels must lie in 0..{TILE_LOG}, got {lowest_levels}")
        self.lowest_levels = lowest_levels
        self.tuning = tuning
        self._programs: dict[tuple[Any, ...], _Program] = {}
        self._cupy: Any = None  # the module, once a call has checked it is there

    def plan(
        self, k: int, *, inverse: bool, coset: bool, input_order: str, output_order: str
    ) -> list[Pass]:
        """The passes :meth:`ntt` runs for these arguments (this instance's options)."""
        return plan_ntt(
            k,
            inverse=inverse,
            coset=coset,
            input_order=input_order,
            output_order=output_order,
            max_levels=self.levels_for(k),
            small=True,
            lowest_levels=self.lowest_for(k),
        )

    def lowest_for(self, k: int) -> int:
        """The levels of the transforms' pass over the lowest levels at 2^k (0: as the others):
        the number this instance was given, else the rule (see ``__init__``)."""
        if self.lowest_levels is not None:
            return self.lowest_levels
        return default_lowest_levels(k) if self.max_levels is None else 0

    def levels_for(self, k: int, *, h_step: bool = False) -> int:
        """The most levels per pass (and the tile, 2^that, below 2^TILE_LOG) of this instance's
        plans at 2^k: the one it was given, else :func:`default_max_levels`."""
        if self.max_levels is not None:
            return self.max_levels
        return default_max_levels(k, h_step=h_step)

    def h_plan(self, k: int) -> list[Pass]:
        """The passes :meth:`h_step` runs at 2^k (this instance's options)."""
        return plan_h_step(k, self.levels_for(k, h_step=True), small=True)

    def h_key(self, k: int) -> tuple[Any, ...]:
        """The program-cache key of :meth:`h_plan` on the current device."""
        return ("h_step", require_cupy().cuda.runtime.getDevice(), k)

    def run_h_step(
        self,
        k: int,
        buffers: dict[str, Any],
        stream: Any,
        ready: Mapping[str, Any] | None = None,
    ) -> None:
        """The H step's passes on ``stream`` with the named buffers, part by part
        (:func:`plan_h_step_parts`); before the part that first reads input "a", "b" or "c"
        the stream waits for ``ready[name]`` (a CUDA event, e.g. the end of that input's
        copy) where one is given. Without events: one cached program of the whole plan."""
        waits = {name: ev for name, ev in (ready or {}).items() if ev is not None}
        if not waits:
            self.run_plan(self.h_plan(k), buffers, 1, stream, self.h_key(k))
            return
        parts = plan_h_step_parts(k, self.levels_for(k, h_step=True), small=True)
        for name, plans in parts:
            if name in waits:
                stream.wait_event(waits[name])
            self.run_plan(plans, buffers, 1, stream, (*self.h_key(k), name))

    def module(self) -> KernelModule:
        """ntt.cu with this instance's tuning, on the current device."""
        return module(self.tuning)

    # --- tables -----------------------------------------------------------------------------
    def twiddles(self, k: int, stream: Any = None) -> tuple[Any, int]:
        """The device's twiddle table covering 2^k (built, or rebuilt larger, on first need)."""
        cupy = require_cupy()
        st = _device_tables()
        if st.tw is None or st.tw_log < k:
            hi, lo, sb, count = twiddle_split(k)
            s = stream or cupy.cuda.get_current_stream()
            with s:
                tw = cupy.empty((count, 4), dtype=cupy.uint64)
                d_hi, d_lo = cupy.asarray(hi), cupy.asarray(lo)
                self.module().get_function("fr_build_powers")(
                    ((count + 255) // 256,),
                    (256,),
                    (tw, d_hi, d_lo, np.int32(sb), np.uint64(count)),
                )
                s.synchronize()
            st.tw, st.tw_log = tw, k
            st.generation += 1
        return st.tw, st.tw_log

    def release_twiddles(self) -> int:
        """Drop this device's twiddle table (rebuilt by the next transform, ~2 ms at 2^27); the
        bytes it held, which go back to CuPy's pool until that is trimmed. The H step in one or
        two slots (``provetop.kernels.cuda.h_streamed``) gives its 2 GiB to the MSMs this way on a
        card
        of 8 GiB."""
        st = _device_tables()
        if st.tw is None:
            return 0
        nbytes = int(st.tw.nbytes)
        st.tw, st.tw_log = None, 0
        st.generation += 1  # cached programs referring to it are stale
        self._programs.clear()  # and must not keep its memory alive
        return nbytes

    def table(self, kind: str, k: int, full: bool = False) -> tuple[Any, Any, int]:
        """The factor table ``kind`` of size 2^k on the current device (built on first need):
        split (hi, lo, sb), or with ``full`` (hi, f, k) where f[j] = hi[j >> sb] lo[j & mask]
        for every j < 2^k, built on the device from the split one (one multiplication per
        entry, in lo's form: the product of a Montgomery hi and lo keeps lo's form)."""
        cupy = require_cupy()
        st = _device_tables()
        key = (kind, k, full)
        if key not in st.tables:
            if full:
                hi, lo, sb = self.table(kind, k)
                f = cupy.empty((1 << k, 4), dtype=cupy.uint64)
                self.module().get_function("fr_build_powers")(
                    (((1 << k) + 255) // 256,), (256,), (f, hi, lo, np.int32(sb), np.uint64(1 << k))
                )
                st.tables[key] = (hi, f, k)
            else:
                hi, lo, sb = factor_table_values(kind, k)
                st.tables[key] = (cupy.asarray(hi), cupy.asarray(lo), sb)
            cupy.cuda.Device().synchronize()
        return st.tables[key]

    def pass_tables(self, p: Pass) -> tuple[tuple[Any, Any, int] | None, ...]:
        """The (pre, post) factor tables pass ``p`` reads (None where it reads none), built
        on first need: what a warm-up calls so that no table is built inside a timed run."""
        pre = self.table(p.pre, p.k, bool(p.flags & F_PRE_FULL)) if p.pre else None
        post = self.table(p.post, p.k, bool(p.flags & F_POST_FULL)) if p.post else None
        return pre, post

    def consts(self, k: int) -> Any:
        """[n^-1, Z(g)^-1] for n = 2^k on the current device (see :func:`const_values`)."""
        cupy = require_cupy()
        st = _device_tables()
        if k not in st.consts:
            st.consts[k] = cupy.asarray(const_values(k))
            cupy.cuda.Device().synchronize()
        return st.consts[k]

    # --- execution --------------------------------------------------------------------------
    def run_plan(
        self,
        plans: list[Pass],
        buffers: dict[str, Any],
        batch: int,
        stream: Any,
        key: tuple[Any, ...] | None = None,
    ) -> None:
        """Launch every pass of ``plans`` on ``stream`` with the named buffers; ``key`` (naming
        ``plans`` and ``batch`` uniquely) caches the resolved launches."""
        if not plans:
            return
        with stream:
            prog = self._program(plans, batch, key)
        prog.launch(buffers, stream)

    def _pass_args(
        self, p: Pass, mod: KernelModule, tw: Any, K: int, consts: Any
    ) -> tuple[Any, tuple[Any, ...], int]:
        """(kernel, argument tuple, dynamic shared bytes) of pass ``p`` as this instance runs
        it, with buffer names (str) where the caller's arrays go; unused table pointers point
        at ``consts`` (never read). Shared memory above 48 KiB raises the kernel's dynamic
        shared-memory limit (once per size)."""
        pre, post = self.pass_tables(p)
        pre_hi, pre_lo, pre_sb = pre or (consts, consts, 0)
        post_hi, post_lo, post_sb = post or (consts, consts, 0)
        fn = mod.get_function("ntt_pass_dit" if p.dit else "ntt_pass_dif")
        if (
            p.shared_bytes > DEFAULT_SHARED_BYTES
            and fn.max_dynamic_shared_size_bytes < p.shared_bytes
        ):
            fn.max_dynamic_shared_size_bytes = p.shared_bytes
        args = (
            p.dst, p.src, tw,
            np.int32(p.k), np.int32(p.s), np.int32(p.L), np.int32(p.log_c), np.int32(K),
            np.int32(int(p.inverse)), np.int32(p.flags), np.int32(pre_sb),
            np.int32(post_sb), pre_hi, pre_lo, post_hi, post_lo, consts,
            p.qa or consts, p.qb or consts,
        )  # fmt: skip
        return fn, args, p.shared_bytes

    def _program(
        self, plans: list[Pass], batch: int, key: tuple[Any, ...] | None = None
    ) -> _Program:
        """The launches of ``plans`` with everything but the caller's buffers resolved, cached
        under ``key`` (when given) until the device's twiddle table is rebuilt.

        Why: at 2^16 .. 2^20 a transform's kernels take 0.01 .. 0.25 ms, and the host work
        before the first launch (planning, table look-ups, building 19 arguments per pass) is
        on the critical path of every call: the GPU is idle until the first launch arrives."""
        cupy = require_cupy()
        st = _device_tables()
        if key is not None:
            prog = self._programs.get(key)
            if prog is not None and prog.generation == st.generation:
                return prog
        mod = self.module()
        k = plans[0].k
        tw, K = self.twiddles(k, cupy.cuda.get_current_stream())
        consts = self.consts(k)
        driver = []
        for p in plans:
            fn, args, shared = self._pass_args(p, mod, tw, K, consts)
            driver.append(_driver_launch(fn, p.grid(batch), p.block, shared, args))
        prog = _Program(st.generation, driver, cupy, cupy.cuda.runtime.getDevice())
        if key is not None:
            if len(self._programs) >= MAX_PROGRAMS:
                self._programs.clear()
            self._programs[key] = prog
        return prog

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
        out: Any = None,
    ) -> Any:
        """NTT of ``x`` ((n, 4) or (batch, n, 4) uint64 CuPy, Montgomery) into a new array of
        the same shape (or into ``out``, which must not overlap ``x``). ``allocator`` is unused
        (the transform needs no scratch) but accepted for the backend interface; the output
        comes from CuPy's current allocator."""
        # Why the order below: at 2^16 .. 2^20 everything before the first launch is GPU idle
        # time in every call (a 2^20 call took 19.7 us of host time before this order, 13.0
        # after it, bench/notes/ntt.md, 2026-12-03), so a cached program with ``out``
        # given touches no stream context and no allocator, and the checks compare against a
        # cached dtype.
        cupy = self._cupy or self._load_cupy()
        del allocator
        if x.dtype != _U64 or x.ndim not in (2, 3) or x.shape[-1] != 4:
            raise ValueError(f"expected (n, 4) or (batch, n, 4) uint64, got {x.shape} {x.dtype}")
        if not x.flags.c_contiguous:
            x = cupy.ascontiguousarray(x)
        n = x.shape[-2]
        batch = x.shape[0] if x.ndim == 3 else 1
        k = log2_size(n)
        s = stream or cupy.cuda.get_current_stream()
        if out is None:
            with s:
                out = cupy.empty_like(x)
        elif out.shape != x.shape or out.dtype != _U64 or not out.flags.c_contiguous:
            raise ValueError("out must be a C-contiguous array of x's shape and dtype")
        if k == 0:
            with s:
                out[...] = x
            return out
        dev = cupy.cuda.runtime.getDevice()
        key = (dev, k, inverse, coset, input_order, output_order, batch)
        prog = self._programs.get(key)
        tables = _tables.get(dev)
        if prog is None or tables is None or prog.generation != tables.generation:
            plans = self.plan(
                k,
                inverse=inverse,
                coset=coset,
                input_order=input_order,
                output_order=output_order,
            )
            with s:  # tables built on first need go on the caller's stream
                prog = self._program(plans, batch, key)
        prog.launch({"x": x, "out": out}, s)
        return out

    def _load_cupy(self) -> Any:
        self._cupy = require_cupy()
        return self._cupy

    def h_step(
        self,
        a: Any,
        b: Any,
        c: Any,
        *,
        stream: Any = None,
        allocator: Any = None,
        out: Any = None,
        ready: Mapping[str, Any] | None = None,
    ) -> Any:
        """H = (A B - C) / Z from natural evaluations a, b, c ((n, 4) Montgomery): the n-1
        coefficients h_0..h_{n-2}, canonical, natural order, as a ``(n - 1, 4)`` view of an
        n-row array (``out`` if given, (n, 4) C-contiguous). Scratch (2 n rows) comes from
        ``allocator``. ``ready``: CUDA events by input name that ``stream`` waits for before
        that input's part (:meth:`run_h_step`)."""
        cupy = require_cupy()
        n = a.shape[0]
        for v in (a, b, c):
            if v.shape != (n, 4) or v.dtype != cupy.uint64:
                raise ValueError(f"expected ({n}, 4) uint64 inputs, got {v.shape} {v.dtype}")
        k = log2_size(n)
        if k < 1:
            raise ValueError("the H step needs n >= 2")
        s = stream or cupy.cuda.get_current_stream()
        with s:
            a, b, c = (cupy.ascontiguousarray(v) for v in (a, b, c))
            if out is None:
                out = cupy.empty((n, 4), dtype=cupy.uint64)
            elif out.shape != (n, 4) or out.dtype != cupy.uint64 or not out.flags.c_contiguous:
                raise ValueError(f"out must be a C-contiguous ({n}, 4) uint64 array")
            wb = _alloc(cupy, (n, 4), allocator)
            wc = _alloc(cupy, (n, 4), allocator)
            bufs = {"a": a, "b": b, "c": c, "out": out, "wb": wb, "wc": wc}
            self.run_h_step(k, bufs, s, ready)
        return out[: n - 1]
