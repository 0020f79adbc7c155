"""The telemetry schema: the one place that says what an event is.

Every producer (the engine, the cuzk adapter) emits these events, every carrier (the socket
stream, recording files) moves them unchanged, and every consumer (the state reducer, and through
it the dashboard, ``summary``, ``export`` and replay) reads them. ``docs/telemetry.md`` documents
the same table; ``tests/recordings/test_schema.py`` checks that the two agree.

An event is a flat msgpack map with string keys. Two keys are always present:

- ``k``: the event kind (a key of :data:`EVENTS`),
- ``t``: monotonic nanoseconds since the producer started (``hello`` carries the wall-clock
  anchor ``wall_ns`` of t = 0).

Sizes are bytes, durations inside ``partition_done`` are milliseconds (floats), everything else
is nanoseconds. A field listed as optional may be absent or nil. Consumers ignore fields they do
not know, so adding an optional field does not change :data:`SCHEMA_VERSION`; renaming or
removing one does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeGuard

SCHEMA_VERSION = 1
MS = 1_000_000  # ns per ms: partition_done's durations are milliseconds, every other time ns
# The synthesis lanes' first worker number that our producers (the engine's look-ahead, the cuzk
# adapter's synthesis slots) send in hello.config.synth_worker_base ("Synthesis lanes" in
# docs/telemetry.md); a reader takes the number from the stream, never from here.
SYNTH_WORKER_BASE = 100

# ---------------------------------------------------------------------------------------------
# Phases of one partition, in pipeline order. ``group`` is what the dashboard colours and the
# summary totals; ``gpu`` marks work that runs while the worker holds the device mutex (the GPU
# lane is drawn from these); ``upload`` marks host-to-device transfers (the upload lane).


@dataclass(frozen=True)
class Phase:
    name: str
    group: str
    gpu: bool = False
    upload: bool = False


PHASES: dict[str, Phase] = {
    p.name: p
    for p in (
        Phase("synthesis", "host"),
        Phase("prestage", "prestage"),
        Phase("upload", "upload", upload=True),
        Phase("mutex_wait", "mutex_wait"),
        Phase("fallback_upload", "fallback", gpu=True, upload=True),
        # a checked partition's device-side sums, inside its own GPU region (CUDA runner):
        # A, B, C at tau before the H step overwrites a; h(tau) and <z, s^i> after the MSMs
        Phase("check_inputs", "check", gpu=True),
        Phase("h_step", "h_step", gpu=True),
        Phase("msm_h", "msm", gpu=True),
        Phase("msm_l", "msm", gpu=True),
        Phase("msm_a", "msm", gpu=True),
        Phase("msm_b_g1", "msm", gpu=True),
        # the streamed queries' MSMs in one pass, their chunks interleaved (H's sums hide the
        # copies of the others): replaces their msm_* phases where the memory plan allows it
        Phase("msm_interleaved", "msm", gpu=True),
        Phase("check_sums", "check", gpu=True),
        Phase("copy_back", "copy_back", gpu=True),
        Phase("verify", "host"),
        Phase("release", "host"),
        # Phases of a cuzk (supraseal-c2) partition as its CUZK_TIMING lines measure them; the
        # cuzk adapter (sources/cuzk, docs/cuzk.md) emits these instead of the finer ones above.
        Phase("ntt_msm_h", "h_step", gpu=True),  # NTT H step and the H MSM, timed together
        Phase("batch_add", "msm", gpu=True),  # batch additions of L, A, B-G1, B-G2
        Phase("tail_msm", "msm", gpu=True),  # tail MSMs of L, A, B-G1
        Phase("gpu_prove", "host"),  # the whole cuzk GPU call when no finer timing was logged
    )
}

# "none": the attempt never reached the pre-stage decision (its synthesis failed)
PRESTAGE_STATUSES = ("ok", "skip", "fallback", "none")
FAULT_KINDS = (
    "oom",
    "exception",
    "injected",
    "registration",
    "worker_died",
    "client_dropped",
    "source",  # the telemetry source failed (cuzk log unreadable, status endpoint down)
)
ENGINE_STATES = ("starting", "running", "paused", "stopping", "done")
CONTROL_COMMANDS = ("force_fallback", "pause", "resume", "trim", "marker", "stop")

# ---------------------------------------------------------------------------------------------
# Field specs. A spec is (python types accepted, required, meaning). ``t`` and ``k`` are implied.

INT = (int,)
NUM = (int, float)
STR = (str,)
BOOL = (bool,)
MAP = (dict,)
LIST = (list, tuple)


@dataclass(frozen=True)
class Field:
    types: tuple[type, ...]
    required: bool
    doc: str


def _f(types: tuple[type, ...], doc: str, required: bool = True) -> Field:
    return Field(types, required, doc)


def _opt(types: tuple[type, ...], doc: str) -> Field:
    return Field(types, False, doc)


_WHERE = {
    "proof": _f(INT, "proof number, from 0"),
    "partition": _f(INT, "partition index within the proof"),
    "worker": _f(INT, "worker index within its device"),
    "device": _f(INT, "device index (CUDA ordinal, or the modeled device's index)"),
}

# Phases are drawn on the lane of their worker, except a synthesis run ahead of its worker's
# turn (--synthesis-ahead), and the cuzk adapter's CPU synthesis slots: those are drawn from
# hello.config.synth_worker_base on.
_LANE = _f(INT, "worker index within its device, or synth_worker_base + N for synthesis lane N")

# The memory picture of one device. The same keys appear in ``memory`` events and, as the pool
# state at that instant, inside ``fault`` and ``alloc`` events (``pools``).
MEMORY_FIELDS: dict[str, Field] = {
    "sync_used": _f(INT, "bytes in use from the synchronous (cudaMalloc) caching pool"),
    "sync_cached": _f(INT, "bytes the synchronous pool holds but has free (its cache)"),
    "async_used": _f(INT, "bytes in use from the stream-ordered pool (UsedMemCurrent)"),
    "async_reserved": _f(INT, "bytes the stream-ordered pool reserves (ReservedMemCurrent)"),
    "async_high": _f(INT, "stream-ordered pool reserved high-water mark (ReservedMemHigh)"),
    "pinned_host": _f(INT, "host bytes pinned or registered for uploads"),
    "ballast": _f(INT, "bytes held so the card looks like a smaller one (--device-memory)"),
    "driver_free": _f(INT, "free bytes as cudaMemGetInfo reports them"),
    "driver_total": _f(INT, "total bytes as cudaMemGetInfo reports them"),
    "largest_alloc": _opt(INT, "largest cudaMalloc that would succeed now, if known"),
    "nvml_used": _opt(INT, "NVML v2 used bytes (the nvidia-smi view)"),
    "nvml_free": _opt(INT, "NVML v2 free bytes"),
    "nvml_total": _opt(INT, "NVML v2 total bytes"),
    "process_used": _opt(INT, "this process's usage as NVML reports it"),
    "modeled": _f(BOOL, "true when the figures come from the cpu backend's memory model"),
}

# What NVML says about one device besides its memory, about once a second (``gpu`` events).
# Every field is optional: a GPU that does not report one (no fan on a passively cooled card,
# no ECC on a consumer card) leaves it out. The cpu backend has no NVML and sends no ``gpu``.
GPU_FIELDS: dict[str, Field] = {
    "sm_util_pct": _opt(INT, "percent of the last sample period a kernel ran (NVML gpu)"),
    "mem_util_pct": _opt(
        INT, "percent of the last sample period device memory was read or written"
    ),
    "power_mw": _opt(INT, "power draw, milliwatts"),
    "power_limit_mw": _opt(INT, "enforced power limit, milliwatts"),
    "temp_c": _opt(INT, "GPU die temperature, degrees Celsius"),
    "sm_clock_mhz": _opt(INT, "SM clock, MHz"),
    "mem_clock_mhz": _opt(INT, "memory clock, MHz"),
    "pcie_rx_bytes_s": _opt(INT, "PCIe receive throughput (host to device), bytes per second"),
    "pcie_tx_bytes_s": _opt(INT, "PCIe transmit throughput (device to host), bytes per second"),
    "fan_pct": _opt(INT, "fan speed, percent of its maximum"),
    "ecc_corrected": _opt(INT, "corrected ECC errors since the driver loaded (volatile)"),
    "ecc_uncorrected": _opt(INT, "uncorrected ECC errors since the driver loaded (volatile)"),
    "retired_pages": _opt(INT, "memory pages retired or pending retirement (all causes)"),
    "mem_used": _opt(INT, "device memory used, bytes (NVML v2: the nvidia-smi view)"),
    "mem_total": _opt(INT, "device memory, bytes (NVML v2)"),
    "xid_count": _opt(
        INT,
        "XID critical errors NVML reported since the reader began watching (absent: the GPU "
        "or driver does not report XID events, shown as n/a)",
    ),
    "xid_last": _opt(INT, "the code of the last XID counted (absent until one is seen)"),
    "processes": _opt(
        LIST,
        "compute processes on the GPU: {pid, used (bytes, absent when NVML cannot say), user, "
        "command (absent when /proc does not say); from provetop top also cpu_pct, mem_pct, "
        "rss, run_s (from /proc) and provetop (the subcommand of a provetop process)}; pids as "
        "NVML reports them (host pids)",
    ),
}

EVENTS: dict[str, dict[str, Field]] = {
    "hello": {
        "schema": _f(INT, "SCHEMA_VERSION of the producer"),
        "engine_id": _f(STR, "unique id of this engine run"),
        "host": _f(STR, "host name"),
        "pid": _opt(INT, "engine process id"),
        "version": _f(STR, "producer version"),
        "source": _f(
            STR,
            "'provetop' for our engine, 'cuzk' for the cuzk adapter, 'trace' for provetop trace",
        ),
        "backend": _f(STR, "'cpu' (memory modeled) or 'cuda'"),
        "modeled": _f(BOOL, "true when device memory is modeled, not real"),
        "devices": _f(LIST, "list of {index, name, capacity, modeled}"),
        "config": _f(MAP, "the run's configuration (workload, allocator, workers...)"),
        "wall_ns": _f(INT, "wall-clock time (ns since the epoch) at t = 0"),
        "read_only": _f(BOOL, "true when the producer refuses control commands"),
        "tuning": _opt(
            MAP,
            "the run's settings from its PROVETOP_ variables (engine/settings/tuning.py), "
            "the kernels' "
            "under 'kernels'; absent in older recordings",
        ),
    },
    "engine_state": {
        "state": _f(STR, "one of ENGINE_STATES"),
        "reason": _opt(STR, "why the state changed"),
    },
    "phase_begin": {**_WHERE, "worker": _LANE, "phase": _f(STR, "a key of PHASES")},
    "phase_end": {
        **_WHERE,
        "worker": _LANE,
        "phase": _f(STR, "a key of PHASES"),
        "ok": _f(BOOL, "false when the phase failed"),
        "gpu_ms": _opt(
            NUM,
            "device time of the phase from CUDA events, if measured: the kernel phases "
            "(`h_step`, the MSMs) on the worker's compute stream; for `upload` and "
            "`fallback_upload`, the copies' own time on its upload stream",
        ),
    },
    "mutex": {
        **_WHERE,
        "wait_ns": _f(INT, "time waited for the device mutex"),
        "hold_ns": _f(INT, "time the mutex was held (0 on acquire)"),
        "action": _f(STR, "'acquire' or 'release'"),
    },
    "alloc": {
        **_WHERE,
        "site": _f(
            STR,
            "'prestage', 'handover' (a copied into the previous partition's H block), "
            "'h_slots', 'msm_scratch', 'msm_scalars', 'ntt_scratch', 'srs', 'host_register', "
            "'plan' (the device's memory plan, once per run); from provetop trace: the driver "
            "call's name, 'heal' (pools trimmed before a plain allocation) and 'trim' (pools "
            "trimmed on a command)",
        ),
        "pool": _f(STR, "'sync', 'async' or 'host'"),
        "requested": _f(INT, "bytes asked for"),
        "decision": _f(STR, "'ok', 'skip', 'fallback' or 'trim'"),
        "reason": _opt(STR, "why, in words"),
        "free": _opt(INT, "free bytes the decision was based on"),
        "margin": _opt(INT, "safety margin applied"),
        "pools": _opt(MAP, "the device's MEMORY_FIELDS at that instant"),
    },
    "memory": {"device": _f(INT, "device index"), **MEMORY_FIELDS},
    "gpu": {"device": _f(INT, "device index"), **GPU_FIELDS},
    "partition_done": {
        **_WHERE,
        "attempt": _f(INT, "0 for the first try, 1 for the retry on the fallback path"),
        "ok": _f(BOOL, "false when the partition failed"),
        "phases_ms": _f(MAP, "phase name -> milliseconds"),
        "gpu_total_ms": _f(NUM, "time holding the device mutex (the GPU region), ms"),
        "mutex_wait_ms": _f(NUM, "time waiting for the device mutex, ms"),
        "prestage": _f(STR, "one of PRESTAGE_STATUSES"),
        "prestage_reason": _opt(STR, "why pre-staging was skipped or fell back"),
        "forced": _opt(BOOL, "true when the operator forced the fallback"),
        "verified": _opt(BOOL, "true/false when checked; nil when verification was sampled out"),
        "failure": _opt(STR, "why the partition failed, when ok is false"),
        "will_retry": _opt(BOOL, "true when a failed attempt is retried"),
    },
    "proof_done": {
        "proof": _f(INT, "proof number"),
        "ok": _f(BOOL, "true when every partition completed"),
        "wall_ms": _f(NUM, "wall time from the proof's first phase to its last, ms"),
    },
    "fault": {
        "kind": _f(STR, "one of FAULT_KINDS"),
        "message": _f(STR, "what happened, in words"),
        "device": _opt(INT, "device index"),
        "worker": _opt(INT, "worker index"),
        "proof": _opt(INT, "proof number"),
        "partition": _opt(INT, "partition index"),
        "site": _opt(STR, "allocation site or phase"),
        "requested": _opt(INT, "bytes requested (OOM)"),
        "pools": _opt(MAP, "the device's MEMORY_FIELDS at that instant (OOM)"),
        "injected": _opt(BOOL, "true when produced by fault injection"),
    },
    "control": {
        "id": _f(INT, "the client's command id"),
        "cmd": _f(STR, "one of CONTROL_COMMANDS"),
        "args": _f(MAP, "the command's arguments"),
        "ok": _f(BOOL, "whether the engine accepted it"),
        "error": _opt(STR, "why it was refused"),
        "client": _opt(STR, "who sent it"),
    },
    "progress": {
        "task": _f(STR, "the step: 'srs', 'host_srs', 'device_srs', 'warmup' or 'pin_witness'"),
        "label": _f(STR, "the step in words, as the engine's stderr and the header show it"),
        "done": _f(INT, "units done so far (at most total; never decreases within a step)"),
        "total": _f(INT, "units in the whole step"),
        "unit": _f(STR, "'points' or 'bytes'"),
        "elapsed_s": _f(NUM, "seconds since the step began"),
        "rate": _opt(NUM, "units per second over the step so far"),
        "eta_s": _opt(NUM, "seconds left at that rate"),
        "device": _opt(INT, "device index, for a step on one device"),
        "worker": _opt(INT, "worker index, for a step of one worker"),
    },
    "marker": {"name": _f(STR, "the marker's label")},
    "lag": {"missed": _f(INT, "events this client missed because it read too slowly")},
    "snapshot": {
        "state": _f(
            MAP, "provetop.recordings.state.State.snapshot(): the current state, no history"
        ),
    },
    "counters": {
        "events": _f(INT, "events emitted so far"),
        "clients": _f(INT, "clients attached"),
        "dropped_clients": _f(INT, "clients dropped for lagging too far"),
        "lagged_events": _f(INT, "events skipped for slow clients, all clients together"),
        # the telemetry listener's (absent where the engine listens on nothing)
        "refused_clients": _opt(INT, "connections closed at accept: too many clients"),
        "evicted_handshakes": _opt(INT, "unauthenticated connections closed to make room"),
        "auth_failures": _opt(INT, "connections that failed the token handshake"),
        "accept_errors": _opt(INT, "accept() calls that failed (file descriptors exhausted...)"),
        "paced_accepts": _opt(INT, "accepts that waited for the accept pace"),
        "evicted_idle": _opt(INT, "idle connections closed to make room at the connection cap"),
        "paced_commands": _opt(
            INT, "commands that waited for their turn in the shared command budget"
        ),
        "hung_up_dropped": _opt(
            INT,
            "connections dropped while a command waited for its turn: the sender had hung up, "
            "and what it left queued went with it",
        ),
        "reader_threads": _opt(INT, "threads serving connections, busy or idle"),
    },
}


def is_integer(value: Any) -> TypeGuard[int]:
    """An integer as the schema means one: ``bool`` is not one (:func:`validate`)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> TypeGuard[int | float]:
    """An int or a float as the schema means one: ``bool`` is not one (:func:`validate`)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


class SchemaError(ValueError):
    """An event that does not follow the schema: the message names the kind and the field."""


def validate(event: Any) -> dict[str, Any]:
    """Check one decoded event; return it unchanged or raise :class:`SchemaError`.

    Unknown kinds are rejected, unknown fields are allowed (newer producers may add optional
    fields), ``bool`` is not accepted where an int is meant."""
    if not isinstance(event, dict):
        raise SchemaError(f"event is a {type(event).__name__}, not a map")
    kind = event.get("k")
    if not isinstance(kind, str) or kind not in EVENTS:
        raise SchemaError(f"unknown event kind {kind!r}")
    t = event.get("t")
    if not isinstance(t, int) or isinstance(t, bool):
        raise SchemaError(f"{kind}: field 't' must be an integer, got {t!r}")
    for name, spec in EVENTS[kind].items():
        value = event.get(name)
        if value is None:
            if spec.required:
                raise SchemaError(f"{kind}: missing field '{name}'")
            continue
        if isinstance(value, bool) and bool not in spec.types:
            raise SchemaError(f"{kind}: field '{name}' must be {_names(spec.types)}, got a bool")
        if not isinstance(value, spec.types):
            raise SchemaError(
                f"{kind}: field '{name}' must be {_names(spec.types)}, got {type(value).__name__}"
            )
    if kind in ("phase_begin", "phase_end") and event["phase"] not in PHASES:
        raise SchemaError(f"{kind}: unknown phase {event['phase']!r}")
    return event


def _names(types: tuple[type, ...]) -> str:
    return " or ".join(t.__name__ for t in types)


def make(kind: str, t: int, /, **fields: Any) -> dict[str, Any]:
    """Build an event map; validated, so a producer bug shows where it happens."""
    event = {"k": kind, "t": t, **fields}
    return validate(event)


def markdown_tables() -> str:
    """The field tables of ``docs/telemetry.md``, generated from :data:`EVENTS` so the document
    cannot drift from the code (a test compares them)."""
    out: list[str] = []
    for kind, fields in EVENTS.items():
        out.append(f"### `{kind}`\n")
        out.append("| field | type | required | meaning |")
        out.append("| --- | --- | --- | --- |")
        for name, spec in fields.items():
            req = "yes" if spec.required else "no"
            out.append(f"| `{name}` | {_names(spec.types)} | {req} | {spec.doc} |")
        out.append("")
    out.append("### Phases\n")
    out.append("| phase | group | on the GPU lane | on the upload lane |")
    out.append("| --- | --- | --- | --- |")
    for p in PHASES.values():
        out.append(
            f"| `{p.name}` | {p.group} | {'yes' if p.gpu else ''} | {'yes' if p.upload else ''} |"
        )
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(markdown_tables(), end="")
