"""cuzk log lines and ``/status`` snapshots in, provetop telemetry events out.

cuzk tells its story in three voices that do not share identifiers (``docs/cuzk.md`` has the
source of every format):

- ``TIMELINE`` lines name the job, the partition and the worker, with milliseconds since the
  engine started. They give this converter its clock: event ``t`` is that offset in nanoseconds.
- ``CUZK_TIMING`` lines carry the GPU-region timings and pre-staging decisions, but no job, no
  worker and no time. They are attributed in order: a line goes to the oldest GPU call (between
  ``GPU_START`` and ``GPU_END``) that has not yet received a line of its kind. That is exact with
  one call in the C++ code at a time and a good guess with two workers per GPU, because the
  per-GPU mutex makes the GPU-region lines of one call contiguous.
- ``tracing`` lines report failures (and the number of partitions of a job).

Because GPU-region lines have no time, the phases of a GPU call are laid out when the call's
``gpu_total_ms`` line arrives: the mutex is acquired at ``max(call ready, previous holder's
release on that device)`` (or after ``mutex_wait_ms`` when cuzk logs it), then ``ntt_msm_h``,
``batch_add`` and ``tail_msm`` follow with their logged durations. Those events lie in the past
of lines already read, so every event goes through a small reorder buffer and is released only
once nothing earlier can still come (the *watermark*: the clock minus a slack, held back by the
oldest unfinished GPU call). Output times never go backwards, as recordings and the reducer
require; an event that still arrives late is clamped forward and counted.

What one call's own lines say (its pre-stage outcome, the layout of its region) is rebuilt in
``sources/cuzk/calls.py``; which ``CUZK_TIMING`` line is which, in ``sources/cuzk/timing.py``.

The converter is a plain object with no threads and no I/O: ``feed_line``, ``feed_status`` and
``feed_status_error`` return the events now releasable, ``flush`` releases the rest. Lines it
does not understand are counted (``stats``) and sampled (``unknown_samples``), never fatal.
"""

from __future__ import annotations

import heapq
import socket
from collections import Counter, deque
from collections.abc import Iterable
from typing import Any

from provetop.base.version import __version__
from provetop.recordings.schema import (
    MS,
    SCHEMA_VERSION,
    SYNTH_WORKER_BASE,
    is_integer,
    is_number,
    make,
)
from provetop.sources.cuzk.calls import (
    MIB,
    PRESTAGE_MARGIN,
    Attempt,
    Job,
    is_oom,
    lay_out_region,
    ms_to_ns,
    prestage_outcome,
)
from provetop.sources.cuzk.parse import (
    Malformed,
    PanicLine,
    TimelineLine,
    TimingLine,
    TraceLine,
    parse_line,
)
from provetop.sources.cuzk.timing import (
    AFTER_KEYS,
    CALL_KEYS,
    PHASE_MS,
    PRESTAGE_FOLLOWS,
    PRESTAGE_SLOTS,
    REGION_KEYS,
    REGION_SLOTS,
    timing_slot,
)

__all__ = ["MS", "SYNTH_WORKER_BASE", "Converter"]

# Synthesis slots are drawn as workers SYNTH_WORKER_BASE (100), 101, ... of device 0: the lanes
# the engine's look-ahead uses (a test keeps the engine's equal); the number is sent in
# hello.config.synth_worker_base, so the dashboard reads it from the stream.
SYNTH_LANES = 8  # at most this many synthesis lanes (cuzk may synthesize dozens at once)
SLACK_NS = 100 * MS  # TIMELINE lines of different threads may print slightly out of order
STALE_NS = 120 * 1_000_000_000  # an unfinished GPU call stops holding the watermark after this
SAMPLES = 20
TRACE_AHEAD_NS = 10 * 1_000_000_000  # a tracing time never runs further ahead of the clock


class Converter:
    """Stateful cuzk -> provetop translation (see the module docstring)."""

    def __init__(
        self,
        *,
        workers_per_device: int = 2,
        wall_ns: int | None = None,
        host: str | None = None,
        config: dict[str, Any] | None = None,
        synth_lanes: int = SYNTH_LANES,
        status_drives: bool | None = None,
    ) -> None:
        self.workers_per_device = max(1, int(workers_per_device))
        self.default_wall_ns = wall_ns
        self.host = host or socket.gethostname()
        self.config = dict(config or {})
        self.synth_lanes = max(0, int(synth_lanes))  # most synthesis lanes drawn
        self.status_drives = status_drives  # None: only until a TIMELINE line is seen
        self.stats: Counter[str] = Counter()
        self.unknown_samples: deque[str] = deque(maxlen=SAMPLES)
        self.clock = 0
        self.timeline_seen = False
        self.jobs: dict[str, Job] = {}
        self.in_call: list[Attempt] = []  # GPU calls in GPU_START order, not yet finished
        self.ended: deque[Attempt] = deque(maxlen=16)  # for lines printed after GPU_END
        self.last_release: dict[int, int] = {}
        self.worker_map: dict[int, tuple[int, int]] = {}  # global id -> (device, index)
        self.synth_busy: set[int] = set()
        self.latest_status: dict[str, Any] | None = None
        self.status_state = "unknown"  # "up", "down"
        self._status_parts: dict[tuple[str, int], dict[str, Any]] = {}
        self._heap: list[tuple[int, int, dict[str, Any]]] = []
        self._seq = 0
        self._last_t = 0
        self._hello_sent = False
        self._wall_anchor: int | None = None
        self._anon = 0
        self._last_prestage_need: int | None = None
        self._prestage_last: Attempt | None = None  # the call of the last pre-stage line
        self._starts_logged = False

    # -- public API ---------------------------------------------------------------------------

    def feed_line(self, line: str, *, truncated: bool = False) -> list[dict[str, Any]]:
        """One log line (without its newline). ``truncated``: a last line cut short (never
        trusted: a cut number would be a wrong number), only counted."""
        self.stats["lines"] += 1
        if truncated:
            self.stats["truncated"] += 1
            self._sample("truncated", line)
            return self.drain()
        record = parse_line(line)
        if record is None:
            if line.strip():
                self.stats["unknown"] += 1
                self._sample("unknown", line)
            else:
                self.stats["blank"] += 1
        elif isinstance(record, Malformed):
            self.stats["malformed"] += 1
            self._sample(f"malformed {record.kind}: {record.reason}", line)
        elif isinstance(record, TimelineLine):
            self.stats["timeline"] += 1
            self._on_timeline(record)
        elif isinstance(record, TimingLine):
            self.stats["timing"] += 1
            self._on_timing(record)
        elif isinstance(record, TraceLine):
            self.stats["trace"] += 1
            self._on_trace(record)
        elif isinstance(record, PanicLine):
            self.stats["panic"] += 1
            self._push(
                make(
                    "fault",
                    self.clock,
                    kind="exception",
                    message=f"panic in thread '{record.thread}' at {record.where}",
                )
            )
        return self.drain()

    def feed_status(self, snapshot: Any) -> list[dict[str, Any]]:
        """One decoded ``GET /status`` body."""
        if not isinstance(snapshot, dict):
            return self.feed_status_error(
                f"status is a {type(snapshot).__name__}, not a JSON object"
            )
        self.stats["status_ok"] += 1
        if self.status_state == "down":
            self._push(
                make(
                    "engine_state",
                    self.clock,
                    state="running",
                    reason="cuzk status endpoint answers again",
                )
            )
        self.status_state = "up"
        self.learn_status(snapshot)
        self.latest_status = snapshot
        drives = self.status_drives
        if drives or (drives is None and not self.timeline_seen):  # no log: status drives
            uptime = snapshot.get("uptime_secs")
            if isinstance(uptime, int | float) and not isinstance(uptime, bool) and uptime >= 0:
                self._advance(int(uptime * 1e9))
            self._status_drive(snapshot)
        return self.drain()

    def feed_status_error(self, message: str) -> list[dict[str, Any]]:
        """The status endpoint is down or answered something that is not a status; reported
        once per outage as a ``source`` fault."""
        self.stats["status_errors"] += 1
        if self.status_state != "down":
            self._push(
                make("fault", self.clock, kind="source", message=f"cuzk status endpoint: {message}")
            )
        self.status_state = "down"
        return self.drain()

    def learn_status(self, snapshot: dict[str, Any]) -> None:
        """Take the worker -> GPU map and job sizes from a status snapshot (no events)."""
        workers = snapshot.get("gpu_workers")
        if isinstance(workers, list):
            by_gpu: dict[int, list[int]] = {}
            for w in workers:
                if isinstance(w, dict) and is_integer(w.get("worker_id")):
                    gpu = w.get("gpu_ordinal")
                    by_gpu.setdefault(gpu if is_integer(gpu) else 0, []).append(w["worker_id"])
            for gpu, ids in by_gpu.items():
                for index, wid in enumerate(sorted(ids)):
                    self.worker_map[wid] = (gpu, index)
        for pipe in snapshot.get("pipelines") or []:
            if isinstance(pipe, dict) and isinstance(pipe.get("job_id"), str):
                job = self.jobs.get(pipe["job_id"])
                if job is not None:
                    if is_integer(pipe.get("total_partitions")) and pipe["total_partitions"] > 0:
                        job.total = pipe["total_partitions"]
                    if isinstance(pipe.get("proof_kind"), str):
                        job.kind = pipe["proof_kind"]

    def advance(self, t: int) -> list[dict[str, Any]]:
        """Move the clock (live sources estimate it from wall time while the log is quiet)."""
        self._advance(int(t))
        return self.drain()

    def begin(self) -> list[dict[str, Any]]:
        """``hello`` now, before any line (a live source announces itself at once); later
        calls return nothing."""
        return [] if self._hello_sent else self._hello()

    def drain(self) -> list[dict[str, Any]]:
        """Events that nothing earlier can still precede."""
        return self._release(self._watermark())

    def flush(self, *, final: bool = True) -> list[dict[str, Any]]:
        """End of input: release everything. ``final`` also completes proofs whose partitions
        all succeeded (when the total was never logged) and ends with ``engine_state done``."""
        if final:
            for job in self.jobs.values():
                if job.proof_sent or job.failed or not job.attempts:
                    continue
                if job.total is None and all(a.finished for a in job.attempts.values()):
                    if len(job.done_ok) == len(job.attempts):
                        self._proof_done(job, job.last_t, ok=True)
            self._push(make("engine_state", self.clock, state="done", reason="end of the cuzk log"))
        return self._release(None)

    @property
    def wall_anchor_ns(self) -> int | None:
        """The wall time (ns since the epoch) of t = 0 in use: the tracing lines' bound once
        one came, else the ``wall_ns`` given; what a reader that puts these events on another
        clock (``provetop trace --cuzk-log``) shifts them by."""
        return self._wall_anchor if self._wall_anchor is not None else self.default_wall_ns

    @property
    def proofs(self) -> dict[str, int]:
        """cuzk job id -> provetop proof number."""
        return {job_id: job.proof for job_id, job in self.jobs.items()}

    # -- clock, buffer, hello -----------------------------------------------------------------

    def _advance(self, t: int) -> None:
        if t > self.clock:
            self.clock = t

    def _watermark(self) -> int:
        mark = self.clock - SLACK_NS if self.timeline_seen else self.clock
        for a in self.in_call:
            if a.region_emitted:
                continue
            since = a.start if a.start is not None else a.pickup
            if since is not None and self.clock - since < STALE_NS:
                mark = min(mark, since)
        return mark

    def _push(self, event: dict[str, Any]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (event["t"], self._seq, event))

    def _release(self, mark: int | None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if not self._hello_sent and (self._heap and (mark is None or self._heap[0][0] <= mark)):
            out += self._hello()
        while self._heap and (mark is None or self._heap[0][0] <= mark):
            _, _, event = heapq.heappop(self._heap)
            if event["t"] < self._last_t:
                event = {**event, "t": self._last_t}
                self.stats["clamped"] += 1
            self._last_t = event["t"]
            out.append(event)
        for event in out:
            wide = _clamp_wide_ints(event)
            if wide:
                # msgpack (the recording, the wire) has no integers wider than 64 bits: such a
                # value (a garbled log number) is clamped and counted, never the end of a run
                self.stats["malformed"] += 1
                self.unknown_samples.append(
                    f"malformed value: integer wider than 64 bits in {event['k']} "
                    f"({', '.join(wide)}), clamped"
                )
        self.stats["events"] += len(out)
        return out

    def _hello(self) -> list[dict[str, Any]]:
        self._hello_sent = True
        wall = self._wall_anchor if self._wall_anchor is not None else self.default_wall_ns
        devices = sorted({d for d, _ in self.worker_map.values()} | {0})
        hello = make(
            "hello",
            0,
            schema=SCHEMA_VERSION,
            engine_id=f"cuzk-{self.host}-{(wall or 0) // 1_000_000_000}",
            host=self.host,
            version=_version(),
            source="cuzk",
            backend="cuda",
            modeled=False,
            devices=[
                {"index": d, "name": f"cuzk GPU {d}", "capacity": 0, "modeled": False}
                for d in devices
            ],
            config={
                "adapter": "cuzk",
                "workers_per_device": self.workers_per_device,
                "synth_worker_base": SYNTH_WORKER_BASE,
                **self.config,
            },
            wall_ns=int(wall or 0),
            read_only=True,
        )
        return [hello, make("engine_state", 0, state="running", reason="following cuzk")]

    def _sample(self, why: str, line: str) -> None:
        self.unknown_samples.append(f"{why}: {line[:200]}")

    # -- identities -----------------------------------------------------------------------------

    def _job(self, job_id: str, t: int) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            job = Job(job_id, len(self.jobs), t, last_t=t)
            self.jobs[job_id] = job
            self._push(make("marker", t, name=f"cuzk job {job_id} = proof {job.proof}"))
            if self.latest_status is not None:
                self.learn_status(self.latest_status)
        job.last_t = max(job.last_t, t)
        return job

    def _attempt(self, job: Job, partition: int) -> Attempt:
        a = job.attempts.get(partition)
        if a is None:
            a = Attempt(job.job_id, partition, job.proof)
            job.attempts[partition] = a
        return a

    def _again(self, job: Job, done: Attempt) -> Attempt:
        """A new attempt of a partition whose last one has finished: only cuzk starting the
        partition's GPU work again (GPU_PICKUP, GPU_START) makes one; pre-stage outcomes,
        fallbacks included, belong to the call that prints them."""
        a = Attempt(job.job_id, done.partition, job.proof, number=done.number + 1)
        a.synth_ms, a.synth_end = done.synth_ms, done.synth_end
        job.attempts[done.partition] = a
        job.done_ok.discard(done.partition)
        return a

    def _where(self, a: Attempt) -> tuple[int, int]:
        """(device, worker index within the device) of an attempt's GPU worker."""
        g = a.gworker if a.gworker is not None else 0
        if g in self.worker_map:
            return self.worker_map[g]
        return divmod(g, self.workers_per_device)

    def _ids(self, a: Attempt) -> dict[str, int]:
        device, worker = self._where(a)
        return {"proof": a.proof, "partition": a.partition, "worker": worker, "device": device}

    # -- TIMELINE -------------------------------------------------------------------------------

    def _on_timeline(self, rec: TimelineLine) -> None:
        self.timeline_seen = True
        t = rec.offset_ms * MS
        self._advance(t)
        job = self._job(rec.job_id, t)
        partition = rec.int_detail("partition")
        a = self._attempt(job, partition if partition is not None else 0)
        worker = rec.int_detail("worker")
        if rec.event in ("GPU_PICKUP", "GPU_START") and a.finished:
            a = self._again(job, a)  # cuzk starts the partition's GPU work again
        if rec.event == "SYNTH_START":
            a.synth_start = t
            self._begin_synthesis(a, t)
        elif rec.event == "SYNTH_END":
            a.synth_end = t
            ms = rec.int_detail("synth_ms")
            a.synth_ms = float(ms) if ms is not None else _ms(a.synth_start, t)
            self._end_synthesis(a, t, ok=True)
        elif rec.event == "GPU_QUEUE":
            a.queued = t
        elif rec.event == "GPU_PICKUP":
            a.pickup = t
            a.gworker = worker if worker is not None else a.gworker
            for other in list(self.in_call):  # that worker dropped its previous pickup
                if not self._starts_logged:  # (builds without GPU_START lines: no inference)
                    break
                if other is not a and other.gworker == a.gworker and other.start is None:
                    reason = "skipped: picked up but never started (the job had failed?)"
                    self._finish(other, t, ok=False, failure=reason, fault=False)
            if a not in self.in_call:
                self.in_call.append(a)
        elif rec.event == "GPU_START":
            self._starts_logged = True
            a.start = t
            a.gworker = worker if worker is not None else a.gworker
            if a not in self.in_call:
                self.in_call.append(a)
        elif rec.event == "GPU_END":
            a.end = t
            a.gworker = worker if worker is not None else a.gworker
            gpu_ms = rec.int_detail("gpu_ms")
            a.gpu_ms = float(gpu_ms) if gpu_ms is not None else None
            if a.start is None:
                a.start = a.pickup if a.pickup is not None else t
            self._finish(a, t, ok=True)
        else:
            self.stats["timeline_other"] += 1

    def _begin_synthesis(self, a: Attempt, t: int) -> None:
        """Open a synthesis phase on the lowest free synthesis lane (none free: no phase, the
        duration still reaches ``phases_ms``)."""
        free = [slot for slot in range(self.synth_lanes) if slot not in self.synth_busy]
        if not free:
            return
        self.synth_busy.add(free[0])
        a.synth_slot = free[0]
        self._push(make("phase_begin", t, **self._synth_ids(a), phase="synthesis"))

    def _synth_ids(self, a: Attempt) -> dict[str, int]:
        return {
            "proof": a.proof,
            "partition": a.partition,
            "worker": SYNTH_WORKER_BASE + (a.synth_slot or 0),
            "device": 0,
        }

    def _end_synthesis(self, a: Attempt, t: int, ok: bool) -> None:
        if a.synth_slot is None:
            return
        self._push(make("phase_end", t, **self._synth_ids(a), phase="synthesis", ok=ok))
        self.synth_busy.discard(a.synth_slot)
        a.synth_slot = None

    # -- CUZK_TIMING ----------------------------------------------------------------------------

    def _on_timing(self, rec: TimingLine) -> None:
        slot = timing_slot(rec)
        if slot is None:
            self.stats["timing_unmapped"] += 1
            return
        if slot in AFTER_KEYS:
            for a in self.ended:
                if slot not in a.slots:
                    a.slots.add(slot)
                    a.timing.update(rec.fields)
                    return
            self.stats["timing_unattributed"] += 1
            return
        if slot in PRESTAGE_SLOTS:
            self._on_prestage_line(slot, rec)
            return
        region = slot not in CALL_KEYS
        target = None
        for a in self.in_call:
            if slot in a.slots or (region and a.region_closed):
                continue
            target = a
            break
        if target is None:
            if self.timeline_seen:
                self.stats["timing_unattributed"] += 1
                return
            target = self._anonymous()
        target.slots.add(slot)
        target.timing.update(rec.fields)
        if slot == "tail_msm_ms":
            target.region_closed = True
            self._emit_region(target)
            if target.anonymous:
                self._advance(self.last_release.get(self._where(target)[0], self.clock))
                self._finish(target, self.clock, ok=True)

    def _on_prestage_line(self, slot: str, rec: TimingLine) -> None:
        """A pre-stage outcome (``PRESTAGE_FOLLOWS``): it continues the call of the last
        pre-stage line when it may follow that line there, else it is the first pre-stage line
        of the oldest call in flight that has none (``host_register``, printed right after its
        call's split line: the newest such call that has that line)."""
        if slot == "prestage_vram":
            kind: str = "vram"
        elif slot == "host_register":
            kind = "host_register"
        else:
            kind = str(rec.fields.get("prestage_setup"))
        last = self._prestage_last
        target = None
        if (
            last is not None
            and last in self.in_call
            and not last.region_closed
            and last.prestage_lines
            and kind in PRESTAGE_FOLLOWS.get(last.prestage_lines[-1][0], ())
        ):
            target = last
        if target is None and slot == "host_register":
            for a in reversed(self.in_call):
                if "split_vectors_ms" in a.slots and not a.slots & REGION_SLOTS:
                    if not a.prestage_lines:
                        target = a
                        break
        if target is None:
            target = next(
                (a for a in self.in_call if not a.prestage_lines and not a.region_closed), None
            )
        if target is None:
            if self.timeline_seen:
                self.stats["timing_unattributed"] += 1
                return
            target = self._anonymous()
        self._prestage_last = target
        target.slots.add(slot)
        target.prestage_lines.append((kind, rec.fields.get("err")))
        if slot == "prestage_vram":
            target.timing["prestage_vram"] = 1
            for key, value in rec.fields.items():
                target.timing[f"vram_{key}"] = value
        else:
            target.timing.update(rec.fields)

    def _anonymous(self) -> Attempt:
        """A GPU call seen only through CUZK_TIMING lines (a log without TIMELINE lines): each
        becomes a partition of proof 0 on worker 0, laid out back to back in synthetic time."""
        job = self._job("(no TIMELINE lines)", self.clock)
        a = self._attempt(job, self._anon)
        self._anon += 1
        a.anonymous = True
        a.gworker = 0
        a.start = max(self.clock, self.last_release.get(0, 0))
        self.in_call.append(a)
        return a

    # -- tracing ------------------------------------------------------------------------------

    def _trace_time(self, rec: TraceLine) -> int:
        """A tracing line's time on the TIMELINE clock. Each line bounds the wall time of t = 0
        from above (the clock never runs ahead of cuzk's), so the smallest bound is kept; the
        line's time is then never later than the truth and never earlier than the clock."""
        if rec.wall_ns is None:
            return self.clock
        bound = rec.wall_ns - self.clock
        if self._wall_anchor is None or bound < self._wall_anchor:
            self._wall_anchor = bound
        return min(max(self.clock, rec.wall_ns - self._wall_anchor), self.clock + TRACE_AHEAD_NS)

    def _on_trace(self, rec: TraceLine) -> None:
        now = self._trace_time(rec)
        msg = rec.message
        job_id = rec.get("job_id")
        job = self.jobs.get(job_id) if isinstance(job_id, str) else None
        partition = rec.get("partition")
        error = rec.get("error")
        error_text = str(error) if error is not None else msg
        total = rec.fields.get("num_partitions")
        if is_integer(total) and isinstance(job_id, str):
            self._job(job_id, now).total = total
            return
        if "self-check FAILED" in msg or "self-check error" in msg:
            if job is not None:
                self._push(
                    make(
                        "fault",
                        now,
                        kind="exception",
                        message=f"cuzk proof self-check failed for job {job.job_id}",
                        proof=job.proof,
                    )
                )
                self._fail_job(job, now)
            return
        if "all partitions complete, proof assembled" in msg and job is not None:
            self._proof_done(job, now, ok=True)
            return
        if msg.startswith("skipping GPU prove for failed") and job is not None:
            if is_integer(partition):
                a = self._attempt(job, partition)
                self._finish(a, now, ok=False, failure="skipped: the job had failed", fault=False)
            return
        gpu_fail = msg.startswith(("partition GPU proving", "GPU prove start", "GPU proving"))
        synth_fail = msg.startswith(("partition synthesis failed", "partition synthesis task"))
        if rec.level == "ERROR" and (gpu_fail or synth_fail) and job is not None:
            if is_integer(partition):
                a = self._attempt(job, partition)
                if synth_fail:
                    self._end_synthesis(a, now, ok=False)
                self._finish(a, now, ok=False, failure=error_text, oom=is_oom(error_text))
            else:
                self._fail_job(job, now, failure=error_text)
            return
        if rec.level == "ERROR":
            self.stats["trace_errors"] += 1
            fault = {"proof": job.proof} if job is not None else {}
            text = msg if error is None else f"{msg}: {error}"
            kind = "oom" if is_oom(text) else "exception"
            self._push(make("fault", now, kind=kind, message=f"cuzk: {text}", **fault))

    def _fail_job(self, job: Job, t: int, failure: str | None = None) -> None:
        """A job-level failure: every unfinished partition fails with it."""
        for a in list(job.attempts.values()):
            if not a.finished and (a.start is not None or failure is not None):
                self._finish(a, t, ok=False, failure=failure or "the job failed")
        self._proof_done(job, t, ok=False)

    # -- GPU call reconstruction ---------------------------------------------------------------

    def _emit_region(self, a: Attempt, fail_t: int | None = None) -> None:
        """The GPU call's phases, laid out from its CUZK_TIMING durations (``lay_out_region``),
        with its mutex and pre-stage events."""
        if a.region_emitted:
            return
        a.region_emitted = True
        ids = self._ids(a)
        device = ids["device"]
        region = lay_out_region(a, self.clock, self.last_release.get(device, 0), fail_t)
        ready, acquire, release = region.ready, region.acquire, region.release
        a.region_end = release
        self.last_release[device] = max(self.last_release.get(device, 0), release)
        a.mutex_wait_ms = (acquire - ready) / MS
        a.hold_ms = (release - acquire) / MS

        self._push(make("phase_begin", ready, **ids, phase="mutex_wait"))
        self._push(make("phase_end", acquire, **ids, phase="mutex_wait", ok=True))
        self._push(
            make("mutex", acquire, **ids, wait_ns=acquire - ready, hold_ns=0, action="acquire")
        )
        self._prestage_events(a, ids, acquire)
        for name, t0, t1, ok in region.spans:
            self._push(make("phase_begin", t0, **ids, phase=name))
            self._push(make("phase_end", t1, **ids, phase=name, ok=ok))
        self._push(
            make(
                "mutex", release, **ids, wait_ns=acquire - ready, hold_ns=release - acquire,
                action="release",
            )
        )  # fmt: skip

    def _prestage_events(self, a: Attempt, ids: dict[str, int], t: int) -> None:
        tm = a.timing
        status, reason, oom = prestage_outcome(a)
        need, domain = tm.get("vram_total_mib"), tm.get("domain")
        if is_integer(need):
            requested = need * MIB
            self._last_prestage_need = requested
        elif is_integer(domain):
            requested = domain * 32 * (3 if tm.get("lot_of_memory") else 2)
        else:
            requested = self._last_prestage_need or 0
        if "host_register" in tm:
            self._push(
                make(
                    "alloc", a.start if a.start is not None else t, **ids, site="host_register",
                    pool="host", requested=requested, decision="fallback", reason=reason,
                )
            )  # fmt: skip
        elif "prestage_vram" in tm or "prestage_setup" in tm:
            extra: dict[str, Any] = {}
            free = tm.get("vram_free_mib")
            if is_integer(free):
                extra = {"free": free * MIB, "margin": PRESTAGE_MARGIN}
            self._push(
                make(
                    "alloc", t, **ids, site="prestage", pool="sync", requested=requested,
                    decision=status, **({"reason": reason} if reason else {}), **extra,
                )
            )  # fmt: skip
        if oom:
            self._push(
                make(
                    "fault", t, kind="oom", message=reason or "pre-stage out of memory",
                    site="prestage", requested=requested, **ids,
                )
            )  # fmt: skip

    def _finish(
        self,
        a: Attempt,
        t: int,
        *,
        ok: bool,
        failure: str | None = None,
        oom: bool = False,
        fault: bool = True,
    ) -> None:
        """End an attempt: its phases (if not laid out yet) and its ``partition_done``."""
        if a.finished:
            return
        a.finished = True
        job = self.jobs[a.job]
        job.last_t = max(job.last_t, t)
        if a in self.in_call:
            self.in_call.remove(a)
        self.ended.appendleft(a)
        ids = self._ids(a)
        if a.synth_slot is not None:
            self._end_synthesis(a, t, ok=ok)
        # a call that logged only its pre-stage outcome is one gpu_prove phase from GPU_START to
        # GPU_END, like a call that logged nothing; a failed one is laid out to its failure
        timed = bool(a.slots & (REGION_SLOTS if not ok else frozenset(REGION_KEYS)))
        if timed:
            self._emit_region(a, fail_t=None if ok else t)
        elif a.start is not None and not a.region_emitted:
            a.region_emitted = True
            if a.prestage_lines:
                self._prestage_events(a, ids, a.start)
            self._push(make("phase_begin", a.start, **ids, phase="gpu_prove"))
            self._push(make("phase_end", t, **ids, phase="gpu_prove", ok=ok))
        if not ok and fault:
            self._push(
                make(
                    "fault", t, kind="oom" if oom else "exception",
                    message=failure or "partition failed", **ids,
                )
            )  # fmt: skip
        status, reason, _ = prestage_outcome(a)
        phases_ms: dict[str, float] = {}
        if a.synth_ms is not None:
            phases_ms["synthesis"] = float(a.synth_ms)
        if a.synth_end is not None and a.pickup is not None and a.pickup >= a.synth_end:
            phases_ms["queue_wait"] = (a.pickup - a.synth_end) / MS
        if a.region_emitted and a.start is not None and timed:
            phases_ms["mutex_wait"] = a.mutex_wait_ms
        for key, name in PHASE_MS.items():
            ms = a.timing.get(key)
            if is_number(ms):
                phases_ms[name] = float(ms)
        gpu_total = a.timing.get("gpu_total_ms")
        if not is_number(gpu_total):  # no region line: the GPU call's own time, from GPU_END
            gpu_total = a.gpu_ms if a.gpu_ms is not None else (a.hold_ms if timed else 0.0)
        fields: dict[str, Any] = {}
        if reason:
            fields["prestage_reason"] = reason
        if not ok:
            fields["failure"] = failure or "partition failed"
            fields["will_retry"] = False
        if a.region_end is not None and a.region_end > t:  # never before its own phases
            t = a.region_end
        self._push(
            make(
                "partition_done", t, **ids, attempt=a.number, ok=ok, phases_ms=phases_ms,
                gpu_total_ms=float(gpu_total), mutex_wait_ms=float(a.mutex_wait_ms),
                prestage=status, **fields,
            )
        )  # fmt: skip
        if ok:
            job.done_ok.add(a.partition)
            if job.total is not None and len(job.done_ok) >= job.total:
                self._proof_done(job, t, ok=True)
        elif not job.failed:
            job.failed = True
            self._proof_done(job, t, ok=False)

    def _proof_done(self, job: Job, t: int, *, ok: bool) -> None:
        if job.proof_sent:
            return
        job.proof_sent = True
        self._push(make("proof_done", t, proof=job.proof, ok=ok, wall_ms=(t - job.first_t) / MS))

    # -- status-only mode -----------------------------------------------------------------------

    def _status_drive(self, snap: dict[str, Any]) -> None:
        """Without TIMELINE lines, partition state changes seen between polls become phases."""
        t = self.clock
        workers: dict[tuple[str, int], int] = {}
        for w in snap.get("gpu_workers") or []:
            if isinstance(w, dict) and isinstance(w.get("current_job"), str):
                if is_integer(w.get("current_partition")) and is_integer(w.get("worker_id")):
                    workers[(w["current_job"], w["current_partition"])] = w["worker_id"]
        for pipe in snap.get("pipelines") or []:
            if not (isinstance(pipe, dict) and isinstance(pipe.get("job_id"), str)):
                continue
            job = self._job(pipe["job_id"], t)
            if is_integer(pipe.get("total_partitions")) and pipe["total_partitions"] > 0:
                job.total = pipe["total_partitions"]
            for p in pipe.get("partitions") or []:
                if isinstance(p, dict) and is_integer(p.get("index")):
                    self._status_partition(job, p, workers.get((job.job_id, p["index"])), t)

    def _status_partition(self, job: Job, p: dict[str, Any], gworker: int | None, t: int) -> None:
        a = self._attempt(job, p["index"])
        if a.finished:
            return
        state = p.get("state")
        synth_ms = p.get("synth_ms") if is_number(p.get("synth_ms")) else None
        gpu_ms = p.get("gpu_ms") if is_number(p.get("gpu_ms")) else None
        if state == "synthesizing" and a.synth_start is None:
            a.synth_start = t - ms_to_ns(synth_ms)
            self._begin_synthesis(a, a.synth_start)
        if state in ("synth_done", "gpu", "done", "failed") and synth_ms is not None:
            a.synth_ms = float(synth_ms)
            if a.synth_slot is not None:
                self._end_synthesis(
                    a, (a.synth_start or t) + ms_to_ns(synth_ms), ok=state != "failed"
                )
        if gworker is not None:
            a.gworker = gworker
        if state == "gpu" and a.start is None:
            a.start = t - ms_to_ns(gpu_ms)
            a.pickup = a.start
        if state == "done":
            a.gpu_ms = float(gpu_ms) if gpu_ms is not None else None
            end = (a.start + ms_to_ns(gpu_ms)) if a.start is not None else t
            self._finish(a, end, ok=True)
        elif state == "failed":
            self._finish(a, t, ok=False, failure="failed (reported by the status endpoint)")


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def _clamp_wide_ints(obj: dict[str, Any] | list[Any], path: str = "") -> list[str]:
    """Clamp, in place, every integer of ``obj`` (nested dicts and lists) that does not fit in
    64 bits to the int64 range; the dotted paths of those clamped."""
    wide: list[str] = []
    # a dict's keys or a list's indexes: Any, as no one key type indexes both containers
    items: Iterable[tuple[Any, object]] = obj.items() if isinstance(obj, dict) else enumerate(obj)
    for key, value in list(items):
        where = f"{path}.{key}" if path else str(key)
        if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
            obj[key] = INT64_MAX if value > 0 else INT64_MIN
            wide.append(where)
        elif isinstance(value, dict | list):
            wide += _clamp_wide_ints(value, where)
    return wide


def _ms(start: int | None, end: int) -> float | None:
    return (end - start) / MS if start is not None else None


def _version() -> str:
    return f"provetop {__version__} cuzk adapter"
