"""What the cuzk converter knows of one job and one GPU call, and what it rebuilds from a call
alone: the pre-stage outcome of its lines and the layout of its GPU region.

Why apart from the converter: these need nothing but the call's own lines (and, for the
layout, when the device's mutex was last released), so they are plain functions of an
:class:`Attempt`; the converter (``sources/cuzk/convert.py``) decides which call a line belongs
to and when the events go out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from provetop.recordings.schema import MS, is_number
from provetop.sources.cuzk.parse import Value
from provetop.sources.cuzk.timing import PHASE_MS, REGION_KEYS

MIB = 1 << 20
PRESTAGE_MARGIN = 512 * MIB  # cuzk's SAFETY_MARGIN in groth16_cuda.cu
CUDA_ERRORS = {
    1: "cudaErrorInvalidValue",
    2: "cudaErrorMemoryAllocation",
    3: "cudaErrorInitializationError",
    100: "cudaErrorNoDevice",
    201: "cudaErrorDeviceUninitialized",
    700: "cudaErrorIllegalAddress",
    712: "cudaErrorHostMemoryAlreadyRegistered",
    999: "cudaErrorUnknown",
}
OOM_WORDS = ("out of memory", "memoryallocation", "memory allocation", "oom")
# the timed phases of a GPU region, in the order cuzk runs them: (CUZK_TIMING key, phase)
REGION_PHASES = tuple((key, PHASE_MS[key]) for key in REGION_KEYS if key in PHASE_MS)


def cuda_error(code: Value) -> str:
    """``2`` -> ``cudaErrorMemoryAllocation (2)``."""
    if isinstance(code, int) and code in CUDA_ERRORS:
        return f"{CUDA_ERRORS[code]} ({code})"
    return f"CUDA error {code}"


def is_oom(text: str) -> bool:
    """Whether an error text says the device ran out of memory."""
    low = text.lower().replace("_", " ")
    return any(word in low for word in OOM_WORDS) or "cudaerrormemoryallocation" in low


def ms_to_ns(ms: object) -> int:
    """Milliseconds as logged (a number, or anything else: 0) in nanoseconds."""
    return int(round(float(ms) * MS)) if is_number(ms) else 0


@dataclass
class Attempt:
    """One partition of one job, from synthesis to the end of its GPU call."""

    job: str
    partition: int
    proof: int
    synth_start: int | None = None
    synth_end: int | None = None
    synth_ms: float | None = None
    synth_slot: int | None = None
    queued: int | None = None
    pickup: int | None = None
    start: int | None = None  # GPU_START (entry of the C++ call)
    end: int | None = None
    gworker: int | None = None  # cuzk's global worker id
    gpu_ms: float | None = None
    timing: dict[str, Value] = field(default_factory=dict)
    slots: set[str] = field(default_factory=set)
    region_closed: bool = False
    region_emitted: bool = False
    finished: bool = False
    mutex_wait_ms: float = 0.0
    hold_ms: float = 0.0
    anonymous: bool = False
    number: int = 0  # 0, then 1, 2... each time cuzk starts the partition's GPU work again
    # the call's pre-stage lines in order: ("vram"|"ok"|"skip_vram"|"fallback"|"host_register",
    # err or None)
    prestage_lines: list[tuple[str, Value]] = field(default_factory=list)
    region_end: int | None = None  # the latest time of an event laid out for the call


@dataclass
class Job:
    """One cuzk job: a provetop proof, and the latest attempt of each of its partitions."""

    job_id: str
    proof: int
    first_t: int
    total: int | None = None
    kind: str | None = None
    attempts: dict[int, Attempt] = field(default_factory=dict)
    done_ok: set[int] = field(default_factory=set)
    failed: bool = False
    proof_sent: bool = False
    last_t: int = 0


def prestage_outcome(a: Attempt) -> tuple[str, str | None, bool]:
    """(status, reason, out of memory) of an attempt's pre-staging, from every pre-stage
    line its call printed: a fallback (of the setup or of ``cudaHostRegister``) decides
    the call whatever came before it, then ``ok``, then ``skip_vram``."""
    tm = a.timing
    kinds = [kind for kind, _ in a.prestage_lines]
    need, usable, free = (tm.get(f"vram_{k}") for k in ("total_mib", "usable_mib", "free_mib"))
    skip_reason = f"needs {need} MiB, {usable} MiB usable ({free} MiB free less the 512 MiB margin)"
    reasons: list[str] = []
    oom = False
    for kind, err in a.prestage_lines:
        if kind == "host_register":
            reasons.append(
                f"cudaHostRegister of a/b/c failed ({cuda_error(err)}); "
                "a/b/c uploaded inside the mutex"
            )
        elif kind == "fallback":
            reasons.append(f"pre-stage setup failed: {cuda_error(err)}")
            oom = oom or err == 2
        elif kind == "skip_vram":
            reasons.append(f"skip_vram: {skip_reason}")
    if "fallback" in kinds or "host_register" in kinds:
        return "fallback", "; then ".join(reasons), oom
    if "ok" in kinds:
        return "ok", None, False
    if "skip_vram" in kinds:
        return "skip", skip_reason, False
    if "vram" in kinds:
        return (
            "fallback",
            f"cudaMalloc of {need} MiB failed (out of memory) with {free} MiB reported "
            "free; no prestage_setup line",
            True,
        )
    if not tm:
        if a.start is None:
            return "skip", None, False  # never reached the GPU
        return "skip", "unknown: no CUZK_TIMING lines for this call", False
    return "skip", "not pre-staged: no pre-stage lines (build before Phase 9?)", False


@dataclass(frozen=True)
class Region:
    """A GPU call's region laid out: waiting for the mutex from ``ready``, holding it from
    ``acquire`` to ``release``, and the phases it ran then (name, start, end, ok)."""

    ready: int
    acquire: int
    release: int
    spans: list[tuple[str, int, int, bool]]


def lay_out_region(a: Attempt, clock: int, mutex_free: int, fail_t: int | None) -> Region:
    """Lay out the GPU call's phases from its CUZK_TIMING durations (``convert``'s module
    docstring); ``mutex_free``: when the device's mutex was last released, ``fail_t``: when
    the call failed (None: it did not).

    With the ``gpu_total_ms`` line the region ends ``gpu_total_ms`` after the mutex was
    acquired and ``tail_msm`` ends it, ``batch_add`` right before (the gap, cuzk's barrier
    wait for the CPU preprocessing, goes after ``ntt_msm_h``). Without it (a failure, a lost
    line) the known phases follow each other and a failed call ends in a failed phase."""
    tm = a.timing
    start = next((x for x in (a.start, a.pickup) if x is not None), clock)
    ready = start + ms_to_ns(tm.get("setup_to_split_ms"))
    if is_number(tm.get("mutex_wait_ms")):
        acquire = ready + ms_to_ns(tm["mutex_wait_ms"])
    else:
        acquire = max(ready, mutex_free)
    present = [(name, ms_to_ns(tm[key])) for key, name in REGION_PHASES if is_number(tm.get(key))]
    if a.region_closed:
        release, spans = _packed(a, acquire, present)
    else:
        release, spans = _in_order(acquire, present, fail_t)
    if a.end is not None and release > a.end:  # the call ended by its GPU_END: move the
        back = min(release - a.end, max(0, acquire - ready))  # region earlier, within its
        acquire, release = acquire - back, release - back  # wait, and cut what is left
        spans = [(n, min(t0 - back, a.end), min(t1 - back, a.end), ok)
                 for n, t0, t1, ok in spans]  # fmt: skip
        release = min(release, a.end)
        acquire = min(acquire, release)
    return Region(ready, acquire, release, spans)


def _packed(
    a: Attempt, acquire: int, present: list[tuple[str, int]]
) -> tuple[int, list[tuple[str, int, int, bool]]]:
    """A closed region: it lasts ``gpu_total_ms``, the phases packed from its end,
    ``ntt_msm_h`` from its start."""
    tm = a.timing
    total = max(ms_to_ns(tm.get("gpu_total_ms")), ms_to_ns(tm.get("mutex_held_ms")))
    release = acquire + max(total, sum(d for _, d in present))
    spans: list[tuple[str, int, int, bool]] = []
    cursor = release
    for name, d in reversed(present):
        t0 = acquire if name == "ntt_msm_h" else cursor - d
        spans.insert(0, (name, t0, t0 + d, True))
        cursor = t0
    return release, spans


def _in_order(
    acquire: int, present: list[tuple[str, int]], fail_t: int | None
) -> tuple[int, list[tuple[str, int, int, bool]]]:
    """A region without its last line: the known phases one after the other, then (a failed
    call) the first phase not logged, failed, up to the failure."""
    spans: list[tuple[str, int, int, bool]] = []
    cursor = acquire
    for name, d in present:
        spans.append((name, cursor, cursor + d, True))
        cursor += d
    if fail_t is not None:
        done = {name for name, _ in present}
        failing = next((p for _, p in REGION_PHASES if p not in done), "tail_msm")
        spans.append((failing, cursor, max(cursor, fail_t), False))
        cursor = max(cursor, fail_t)
    return cursor, spans
