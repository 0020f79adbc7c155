"""The state reducer: ``state.apply(event)`` folds telemetry into the picture everyone draws.

One reducer serves the dashboard (live and replay), ``provetop summary``, the Perfetto export,
the full state a late-joining client is sent, and the snapshots in recordings. Keeping it in one
place means the numbers an operator sees on screen, in a summary and in an export cannot
disagree.

Two kinds of state live here:

- *current* state (partition rows, counters, the latest memory sample, open phases, faults):
  small, and what :meth:`State.snapshot` captures so a replay can seek without reading
  everything before;
- *history* (finished timeline segments and memory series): grows with the run, rebuilt by
  folding events, never put into snapshots.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from provetop.base.units import fmt_bytes
from provetop.recordings.progress import progress_line
from provetop.recordings.schema import MEMORY_FIELDS, PHASES

SERIES_FIELDS = tuple(name for name in MEMORY_FIELDS if name != "modeled")
LOG_LIMIT = 2000  # event-log lines kept; the recording keeps everything
TRIMMED_KEYS = (
    "partitions",
    "partitions_ok",
    "partitions_failed",
    "partitions_verified",
    "proofs_ok",
    "proofs_failed",
    "faults",
    "ooms",
    "controls",
    "markers",
)


@dataclass(frozen=True)
class Window:
    """What a live engine's state keeps (:meth:`State.trim`); everything else is only in the
    recording. ``rows``: finished partition rows and attempts, the newest; ``history_ns``:
    timeline segments and memory samples this recent; ``items``: faults, markers, controls
    and completed proofs, the newest."""

    rows: int = 1000
    history_ns: int = 60 * 10**9
    items: int = 500


GPU_HISTORY = 3600  # ``gpu`` samples kept per device: an hour at the engine's 1 Hz, the
# timeline's widest window; older samples live in the recording
TRIM_EVERY = 1000  # events between two trims of a live state (amortised)

# What a GPU worker is doing, from the phases it has open; with several open the last of
# these wins (a worker synthesising ahead while its GPU region runs is on the GPU).
WORKER_STATES = ("idle", "synthesis", "prestage", "waiting", "gpu", "finishing")
_STATE_OF_GROUP = {
    "host": "finishing",
    "prestage": "prestage",
    "upload": "prestage",
    "mutex_wait": "waiting",
}


_RANK = {state: i for i, state in enumerate(WORKER_STATES)}

# A timeline lane, in the order :meth:`State.lanes` gives them: ("worker", device, worker),
# ("gpu", device) or ("upload", device). Its device and worker are an event's fields as
# decoded (a snapshot's lanes, read back, are whatever the recording holds).
Lane = tuple[Any, ...]


def worker_state(phase: str) -> str:
    """The state a worker is in while ``phase`` runs."""
    if phase in ("synthesis", "gpu_prove"):
        return "synthesis" if phase == "synthesis" else "gpu"
    spec = PHASES.get(phase)
    if spec is None:
        return "finishing"
    if spec.gpu:
        return "gpu"
    return _STATE_OF_GROUP.get(spec.group, "finishing")


@dataclass
class Segment:
    """A span on one timeline lane. ``end`` is None while the phase is still running."""

    lane: Lane
    phase: str
    start: int
    end: int | None = None
    proof: int | None = None
    partition: int | None = None
    ok: bool = True


@dataclass
class PartitionRow:
    proof: int
    partition: int
    worker: int | None = None
    device: int | None = None
    attempt: int = 0
    ok: bool | None = None  # None while running
    prestage: str | None = None
    prestage_reason: str | None = None
    forced: bool = False
    phases_ms: dict[str, float] = field(default_factory=dict)
    gpu_total_ms: float | None = None
    mutex_wait_ms: float | None = None
    verified: bool | None = None
    failure: str | None = None
    retried: bool = False
    t_done: int | None = None

    def group_ms(self, group: str) -> float:
        """Milliseconds spent in one phase group (for example all four MSMs)."""
        return sum(ms for name, ms in self.phases_ms.items() if _group(name) == group)


def _group(phase: str) -> str:
    spec = PHASES.get(phase)
    return spec.group if spec else phase


class MemorySeries:
    """Columnar history of one device's memory samples (compact: one int64 array per field)."""

    def __init__(self) -> None:
        self.t = array("q")
        self.columns: dict[str, array[int]] = {name: array("q") for name in SERIES_FIELDS}

    def append(self, t: int, sample: dict[str, Any]) -> None:
        self.t.append(t)
        for name, column in self.columns.items():
            value = sample.get(name)
            column.append(-1 if value is None else int(value))

    def __len__(self) -> int:
        return len(self.t)


@dataclass
class LogLine:
    t: int
    level: str  # "info", "warn", "error"
    text: str
    event: dict[str, Any] | None = field(default=None, repr=False, compare=False)  # its source


class State:
    """Everything known about one engine run, built only from its events."""

    def __init__(self) -> None:
        self.hello: dict[str, Any] | None = None
        self.engine_state = "starting"
        self.t = 0
        self.events = 0
        self.partitions: dict[tuple[int, int], PartitionRow] = {}
        self.attempts: list[PartitionRow] = []  # every finished attempt, in order
        # (device, worker, phase) of a worker's phase, or a GPU or upload lane -> open segment
        self.open: dict[tuple[Any, ...], Segment] = {}
        self.segments: dict[Lane, list[Segment]] = {}  # lane -> finished segments
        self._active: dict[tuple[str, int], int] = {}  # ("gpu"|"upload", device) -> running phases
        self.memory: dict[int, dict[str, Any]] = {}
        self.series: dict[int, MemorySeries] = {}
        self.gpu: dict[int, dict[str, Any]] = {}  # latest ``gpu`` event per device
        self.gpu_history: dict[int, deque[dict[str, Any]]] = {}  # bounded, oldest first
        self.faults: list[dict[str, Any]] = []
        self.markers: list[tuple[int, str]] = []
        self.controls: list[dict[str, Any]] = []
        self.forced_fallback: dict[int, bool] = {}
        self.proofs_done: list[tuple[int, int, bool, float]] = []  # (t, proof, ok, wall_ms)
        self.first_t: int | None = None
        self.lagged = 0
        self.counters: dict[str, int] = {}
        # running start-up steps (``progress`` events), by (task, device, worker): the latest
        # event of each, dropped when the step ends or the engine is done
        self.progress: dict[tuple[str, int | None, int | None], dict[str, Any]] = {}
        # each device's memory plan (the ``alloc`` event with site ``plan``): its reason
        self.plans: dict[int, str] = {}
        # per-attempt tallies kept incrementally so snapshots stay small; the pre-stage
        # outcomes count every attempt, failed ones included (a run that lost every partition
        # still decided a pre-stage for each attempt, as its rows and /metrics say)
        self.tally: dict[str, int] = {
            "attempts": 0,
            "fallbacks": 0,
            "prestage_ok": 0,
            "prestage_skip": 0,  # attempts whose pre-stage the policy declined
            "retries": 0,
        }
        self.log: deque[LogLine] = deque(maxlen=LOG_LIMIT)
        # what :meth:`trim` let go of, still counted by :meth:`totals` (zero unless trimmed)
        self.trimmed: dict[str, int] = dict.fromkeys(TRIMMED_KEYS, 0)

    # -- folding ------------------------------------------------------------------------------

    def apply(self, event: dict[str, Any]) -> None:
        """Fold one (validated) event into the state. Unknown kinds are ignored."""
        self.events += 1
        t = event.get("t", self.t)
        if isinstance(t, int):
            self.t = max(self.t, t)
        handler = getattr(self, "_on_" + str(event.get("k")), None)
        if handler is not None:
            log = self.log
            last = log[-1] if log else None
            handler(event)
            if log and log[-1] is not last and log is self.log:
                log[-1].event = event  # the line's event, for a reader that shows it whole

    def fold(self, events: Iterable[dict[str, Any]]) -> State:
        for event in events:
            self.apply(event)
        return self

    def _on_hello(self, e: dict[str, Any]) -> None:
        self.hello = e
        self.log.append(LogLine(e["t"], "info", f"engine {e['engine_id']} on {e['host']}"))

    def _on_engine_state(self, e: dict[str, Any]) -> None:
        self.engine_state = e["state"]
        if e["state"] == "done":  # a step stopped part-way never sends its last event
            self.progress.clear()
        reason = f" ({e['reason']})" if e.get("reason") else ""
        self.log.append(LogLine(e["t"], "info", f"engine {e['state']}{reason}"))

    def _on_phase_begin(self, e: dict[str, Any]) -> None:
        if self.first_t is None:
            self.first_t = e["t"]
        key = (e["device"], e["worker"], e["phase"])
        lane = ("worker", e["device"], e["worker"])
        self.open[key] = Segment(lane, e["phase"], e["t"], None, e["proof"], e["partition"])
        row = self.partitions.get((e["proof"], e["partition"]))
        if row is None or row.ok is not None:  # a new partition or a retry of a finished one
            attempt = 0 if row is None else row.attempt + 1
            row = PartitionRow(e["proof"], e["partition"], attempt=attempt, retried=attempt > 0)
            self.partitions[(e["proof"], e["partition"])] = row
        if self.synth_lane(e["worker"]) is None:  # the GPU worker is known at its first phase
            row.worker = e["worker"]
        elif row.ok is None:  # (re)synthesised ahead: no GPU worker yet, not a dead one's
            row.worker = None
        row.device = e["device"]
        spec = PHASES.get(e["phase"])
        for kind, flag in (("gpu", spec and spec.gpu), ("upload", spec and spec.upload)):
            if flag:
                lane_key = (kind, e["device"])
                self._active[lane_key] = self._active.get(lane_key, 0) + 1
                if self._active[lane_key] == 1:
                    self.open[lane_key] = Segment(lane_key, kind, e["t"])

    def synth_lane(self, worker: Any) -> int | None:
        """N when ``worker`` is synthesis lane N (hello.config.synth_worker_base on), else
        None (a GPU worker)."""
        base = ((self.hello or {}).get("config") or {}).get("synth_worker_base")
        if isinstance(base, int) and isinstance(worker, int) and worker >= base:
            return worker - base
        return None

    def worker_states(self) -> dict[tuple[int, int], str]:
        """(device, worker) -> :func:`worker_state` of every GPU worker with a phase open, the
        last in :data:`WORKER_STATES` where several are; a worker not listed is idle."""
        out: dict[tuple[int, int], str] = {}
        for key in self.open:
            if len(key) != 3 or self.synth_lane(key[1]) is not None:
                continue  # a GPU or upload lane, or a synthesis lane: not a GPU worker
            state = worker_state(key[2])
            current = out.get(key[:2])
            if current is None or _RANK[state] > _RANK[current]:
                out[key[:2]] = state
        return out

    def _on_phase_end(self, e: dict[str, Any]) -> None:
        key = (e["device"], e["worker"], e["phase"])
        seg = self.open.pop(key, None)
        if seg is None:  # joined mid-phase: draw from the first time we know of
            seg = Segment(("worker", e["device"], e["worker"]), e["phase"], e["t"])
            seg.proof, seg.partition = e["proof"], e["partition"]
        seg.end, seg.ok = e["t"], bool(e["ok"])
        self.segments.setdefault(seg.lane, []).append(seg)
        spec = PHASES.get(e["phase"])
        for kind, flag in (("gpu", spec and spec.gpu), ("upload", spec and spec.upload)):
            lane_key = (kind, e["device"])
            if flag and self._active.get(lane_key, 0) > 0:
                self._active[lane_key] -= 1
                if self._active[lane_key] == 0:
                    lane_seg = self.open.pop(lane_key, None)
                    if lane_seg is not None:
                        lane_seg.end = e["t"]
                        self.segments.setdefault(lane_key, []).append(lane_seg)

    def _on_alloc(self, e: dict[str, Any]) -> None:
        if e["site"] == "plan":  # once per device and run: a fact of the run, not a warning
            self.plans[e["device"]] = str(e.get("reason") or "")
            self.log.append(LogLine(e["t"], "info", f"gpu{e['device']} {self.plans[e['device']]}"))
            return
        if e["site"] == "handover":  # a went up under the previous partition's pass
            # attempts that started with a in the previous partition's H block (a key only
            # once one did: snapshots of runs without any keep their size)
            self.tally["handovers"] = self.tally.get("handovers", 0) + 1
            self.log.append(
                LogLine(
                    e["t"],
                    "info",
                    f"gpu{e['device']} w{e['worker']} handover {e['decision']} "
                    f"({fmt_bytes(e['requested'])}): {e.get('reason') or ''}",
                )
            )
            return
        if e["decision"] in ("skip", "fallback", "trim"):
            level = "info" if e["decision"] == "trim" else "warn"
            why = f": {e['reason']}" if e.get("reason") else ""
            self.log.append(
                LogLine(
                    e["t"],
                    level,
                    f"gpu{e['device']} w{e['worker']} {e['site']} {e['decision']} "
                    f"({fmt_bytes(e['requested'])} requested){why}",
                )
            )

    def _on_memory(self, e: dict[str, Any]) -> None:
        device = e["device"]
        self.memory[device] = e
        series = self.series.get(device)
        if series is None:  # not setdefault: that would build a MemorySeries per sample
            series = self.series[device] = MemorySeries()
        series.append(e["t"], e)

    def _on_gpu(self, e: dict[str, Any]) -> None:
        self.gpu[e["device"]] = e
        history = self.gpu_history.get(e["device"])
        if history is None:
            history = self.gpu_history[e["device"]] = deque(maxlen=GPU_HISTORY)
        history.append(e)

    def _on_partition_done(self, e: dict[str, Any]) -> None:
        key = (e["proof"], e["partition"])
        row = self.partitions.get(key)
        if row is None or (row.ok is not None and row.attempt != e["attempt"]):
            row = PartitionRow(e["proof"], e["partition"])
            self.partitions[key] = row
        row.worker, row.device, row.attempt = e["worker"], e["device"], e["attempt"]
        row.retried = row.retried or e["attempt"] > 0
        row.ok = bool(e["ok"])
        row.prestage = e["prestage"]
        row.prestage_reason = e.get("prestage_reason")
        row.forced = bool(e.get("forced"))
        row.phases_ms = dict(e["phases_ms"])
        row.gpu_total_ms = float(e["gpu_total_ms"])
        row.mutex_wait_ms = float(e["mutex_wait_ms"])
        row.verified = e.get("verified")
        row.failure = e.get("failure")
        row.t_done = e["t"]
        self.attempts.append(PartitionRow(**_fields(row)))
        self.tally["attempts"] += 1
        self.tally["retries"] += e["attempt"] > 0
        if row.prestage in ("fallback", "ok", "skip"):
            key_of = {"fallback": "fallbacks", "ok": "prestage_ok", "skip": "prestage_skip"}
            self.tally[key_of[row.prestage]] += 1
        if not row.ok:
            retry = " (will retry on the fallback path)" if e.get("will_retry") else ""
            self.log.append(
                LogLine(
                    e["t"],
                    "error",
                    f"proof {row.proof} partition {row.partition} failed: {row.failure}{retry}",
                )
            )
        elif row.prestage == "fallback":
            forced = "forced, " if row.forced else ""
            self.log.append(
                LogLine(
                    e["t"],
                    "warn",
                    f"proof {row.proof} partition {row.partition} used the fallback "
                    f"({forced}{row.prestage_reason or 'no reason given'})",
                )
            )

    def _on_proof_done(self, e: dict[str, Any]) -> None:
        self.proofs_done.append((e["t"], e["proof"], bool(e["ok"]), float(e["wall_ms"])))

    def _on_fault(self, e: dict[str, Any]) -> None:
        self.faults.append(e)
        where = ""
        if e.get("proof") is not None and e["proof"] >= 0:  # -1: the run's, not a partition's
            where = f" proof {e['proof']} partition {e.get('partition')}"
        size = f", {fmt_bytes(e['requested'])} requested" if e.get("requested") else ""
        pools = e.get("pools") or {}
        state = ""
        if pools:
            free = fmt_bytes(pools.get("driver_free", 0))
            state = f"; phantom {fmt_bytes(phantom_bytes(pools))}, driver free {free}"
        self.log.append(
            LogLine(e["t"], "error", f"{e['kind']}{where}: {e['message']}{size}{state}")
        )

    def _on_control(self, e: dict[str, Any]) -> None:
        self.controls.append(e)
        if e["ok"] and e["cmd"] == "force_fallback":
            self.forced_fallback[int(e["args"].get("device", 0))] = bool(e["args"].get("on", True))
        if e["ok"] and e["cmd"] in ("pause", "resume"):
            self.engine_state = "paused" if e["cmd"] == "pause" else "running"
        outcome = "ok" if e["ok"] else f"refused: {e.get('error')}"
        self.log.append(LogLine(e["t"], "info", f"control {e['cmd']} {e['args']} {outcome}"))

    def _on_progress(self, e: dict[str, Any]) -> None:
        key = (e["task"], e.get("device"), e.get("worker"))
        if e["done"] >= e["total"]:  # the step ended: one log line, not one per report
            self.progress.pop(key, None)
            self.log.append(LogLine(e["t"], "info", progress_line(e)))
        else:
            self.progress[key] = e

    def _on_marker(self, e: dict[str, Any]) -> None:
        self.markers.append((e["t"], e["name"]))
        self.log.append(LogLine(e["t"], "info", f"marker: {e['name']}"))

    def _on_lag(self, e: dict[str, Any]) -> None:
        self.lagged += int(e["missed"])
        self.log.append(LogLine(e["t"], "warn", f"this client lagged: {e['missed']} events missed"))

    def _on_snapshot(self, e: dict[str, Any]) -> None:
        """Adopt a snapshot's current state; history already folded here is kept."""
        fresh = State.from_snapshot(e["state"])
        history = (self.segments, self.series, self.log, self.attempts, self.gpu_history)
        gpu = self.gpu
        self.__dict__.update(fresh.__dict__)
        self.segments, self.series, self.log, self.attempts, self.gpu_history = history
        self.gpu = gpu
        self.events += 1

    def _on_counters(self, e: dict[str, Any]) -> None:
        self.counters = {k: v for k, v in e.items() if k not in ("k", "t")}

    # -- derived figures ----------------------------------------------------------------------

    def totals(self) -> dict[str, Any]:
        """Run totals as ``summary`` prints them (what :meth:`trim` let go of included)."""
        gone = self.trimmed
        proofs_ok, proofs_failed = self.proof_counts()
        return {
            "proofs_done": proofs_ok,
            "proofs_failed": proofs_failed,
            "partitions": len(self.partitions) + gone["partitions"],
            "partitions_ok": sum(1 for r in self.partitions.values() if r.ok)
            + gone["partitions_ok"],
            "partitions_failed": sum(1 for r in self.partitions.values() if r.ok is False)
            + gone["partitions_failed"],
            "partitions_verified": sum(1 for r in self.partitions.values() if r.verified)
            + gone["partitions_verified"],
            **self.tally,
            "ooms": sum(1 for f in self.faults if f["kind"] == "oom") + gone["ooms"],
            "faults": len(self.faults) + gone["faults"],
            "s_per_proof": self.s_per_proof(),
            # only where a device had a plan (aware), so other totals read exactly as before
            **({"memory_plans": {str(d): r for d, r in self.plans.items()}} if self.plans else {}),
        }

    def proof_counts(self) -> tuple[int, int]:
        """(completed, failed) proofs of the whole run, what :meth:`trim` let go of included."""
        ok = sum(1 for p in self.proofs_done if p[2])
        failed = len(self.proofs_done) - ok
        return ok + self.trimmed["proofs_ok"], failed + self.trimmed["proofs_failed"]

    def s_per_proof(self) -> float | None:
        """Seconds per proof over the whole run: wall span from the first phase to the last
        completed proof, divided by the proofs completed."""
        done = [p for p in self.proofs_done if p[2]]
        if not done or self.first_t is None:
            return None
        return (done[-1][0] - self.first_t) / 1e9 / (len(done) + self.trimmed["proofs_ok"])

    # -- the live window ----------------------------------------------------------------------

    def trim(self, window: Window) -> None:
        """Forget what left ``window``, keeping its count in :attr:`trimmed` so the totals stay
        exact. Only a live engine calls this (its state must not grow with the run); replay,
        summary and export fold whole recordings and never do. Amortised: rows are sorted
        only once their number passed the window by a quarter."""
        gone = self.trimmed
        finished = len(self.partitions) - sum(1 for r in self.partitions.values() if r.ok is None)
        if finished > window.rows * 5 // 4:
            rows = sorted(
                (r.t_done or 0, key) for key, r in self.partitions.items() if r.ok is not None
            )
            for _t, key in rows[: finished - window.rows]:
                row = self.partitions.pop(key)
                gone["partitions"] += 1
                gone["partitions_ok"] += bool(row.ok)
                gone["partitions_failed"] += row.ok is False
                gone["partitions_verified"] += bool(row.verified)
        if len(self.attempts) > window.rows * 5 // 4:
            del self.attempts[: len(self.attempts) - window.rows]
        old = self.t - window.history_ns
        for lane, segs in self.segments.items():
            if segs and segs[0].end is not None and segs[0].end < old:
                keep = next((i for i, g in enumerate(segs) if (g.end or 0) >= old), len(segs))
                self.segments[lane] = segs[keep:]
        for series in self.series.values():
            cut = next((i for i, t in enumerate(series.t) if t >= old), len(series.t))
            if cut:
                del series.t[:cut]
                for column in series.columns.values():
                    del column[:cut]
        limit = window.items * 5 // 4
        if len(self.faults) > limit:
            dropped = self.faults[: len(self.faults) - window.items]
            gone["faults"] += len(dropped)
            gone["ooms"] += sum(1 for f in dropped if f["kind"] == "oom")
            del self.faults[: len(dropped)]
        if len(self.proofs_done) > limit:
            dropped_proofs = self.proofs_done[: len(self.proofs_done) - window.items]
            gone["proofs_ok"] += sum(1 for p in dropped_proofs if p[2])
            gone["proofs_failed"] += sum(1 for p in dropped_proofs if not p[2])
            del self.proofs_done[: len(dropped_proofs)]
        for name, items in (("controls", self.controls), ("markers", self.markers)):
            if len(items) > limit:
                gone[name] += len(items) - window.items
                del items[: len(items) - window.items]

    def rolling_s_per_proof(self, last: int = 5) -> float | None:
        """Seconds per proof from the spacing of the last completions (steady-state rate)."""
        times = [p[0] for p in self.proofs_done if p[2]][-(last + 1) :]
        if len(times) < 2:
            return self.s_per_proof()
        return (times[-1] - times[0]) / 1e9 / (len(times) - 1)

    def lanes(self) -> list[Lane]:
        """Timeline lanes in display order: per device, workers, then GPU, then upload."""
        keys = set(self.segments) | {s.lane for s in self.open.values()}
        devices = sorted({k[1] for k in keys})
        out: list[Lane] = []
        for d in devices:
            out += sorted(k for k in keys if k[0] == "worker" and k[1] == d)
            out += [k for k in (("gpu", d), ("upload", d)) if k in keys]
        return out

    def busy_fraction(self, device: int, start: int, end: int) -> float:
        """Fraction of [start, end) during which any GPU phase ran on the device."""
        if end <= start:
            return 0.0
        busy = 0
        spans = list(self.segments.get(("gpu", device), []))
        if ("gpu", device) in self.open:
            spans.append(self.open[("gpu", device)])
        for seg in spans:
            s, e = max(seg.start, start), min(seg.end if seg.end is not None else self.t, end)
            busy += max(0, e - s)
        return busy / (end - start)

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The current state as plain msgpack-able data (no history)."""
        return {
            "hello": self.hello,
            "engine_state": self.engine_state,
            "t": self.t,
            "events": self.events,
            "first_t": self.first_t,
            "partitions": [_fields(r) for r in self.partitions.values()],
            "open": [_fields(s) for s in self.open.values()],
            "active": [[list(k), v] for k, v in self._active.items()],
            "memory": list(self.memory.values()),
            "faults": self.faults,
            "markers": [list(m) for m in self.markers],
            "controls": self.controls,
            "forced_fallback": [[d, on] for d, on in self.forced_fallback.items()],
            "proofs_done": [list(p) for p in self.proofs_done],
            "counters": self.counters,
            "lagged": self.lagged,
            "tally": self.tally,
            # only while a step runs, so a state with none snapshots exactly as before
            **({"progress": list(self.progress.values())} if self.progress else {}),
            **({"plans": [[d, r] for d, r in self.plans.items()]} if self.plans else {}),
            # only once something was trimmed (a live engine's window), so a whole-run state
            # snapshots exactly as before
            **({"trimmed": dict(self.trimmed)} if any(self.trimmed.values()) else {}),
        }

    @classmethod
    def from_snapshot(cls, snap: dict[str, Any]) -> State:
        """Rebuild current state from :meth:`snapshot` output (history starts empty)."""
        s = cls()
        s.hello = snap.get("hello")
        s.engine_state = snap.get("engine_state", "starting")
        s.t = snap.get("t", 0)
        s.events = snap.get("events", 0)
        s.first_t = snap.get("first_t")
        for r in snap.get("partitions", []):
            row = PartitionRow(**r)
            s.partitions[(row.proof, row.partition)] = row
        for raw in snap.get("open", []):
            seg = Segment(**{**raw, "lane": tuple(raw["lane"])})
            if seg.lane[0] == "worker":
                s.open[(seg.lane[1], seg.lane[2], seg.phase)] = seg
            else:
                s.open[seg.lane] = seg
        s._active = {tuple(k): v for k, v in snap.get("active", [])}
        for m in snap.get("memory", []):
            s.memory[m["device"]] = m
        s.faults = list(snap.get("faults", []))
        s.markers = [(t, n) for t, n in snap.get("markers", [])]
        s.controls = list(snap.get("controls", []))
        s.forced_fallback = {d: on for d, on in snap.get("forced_fallback", [])}
        s.proofs_done = [tuple(p) for p in snap.get("proofs_done", [])]
        for e in snap.get("progress", []):
            s.progress[(e["task"], e.get("device"), e.get("worker"))] = e
        s.plans = {d: r for d, r in snap.get("plans", [])}
        s.counters = dict(snap.get("counters", {}))
        s.lagged = snap.get("lagged", 0)
        s.tally.update(snap.get("tally", {}))
        trimmed = snap.get("trimmed")
        if isinstance(trimmed, dict):
            s.trimmed.update({k: int(trimmed.get(k, 0)) for k in TRIMMED_KEYS})
        return s


def _fields(obj: PartitionRow | Segment) -> dict[str, Any]:
    """``dataclasses.asdict`` for these flat records without its recursive deep copy (10x
    faster; snapshots of long runs hold thousands of rows): scalars and tuples are immutable,
    the one nested dict (phases_ms) is copied."""
    return {k: dict(v) if isinstance(v, dict) else v for k, v in vars(obj).items()}


def async_cached(pools: dict[str, Any]) -> int:
    """The stream-ordered pool's reserved-but-unused bytes: its cache, usable by it alone."""
    return max(0, int(pools.get("async_reserved", 0)) - int(pools.get("async_used", 0)))


def phantom_bytes(pools: dict[str, Any]) -> int:
    """Memory free inside one pool that the other allocator cannot use: the stream-ordered
    pool's reserved-but-unused bytes plus the synchronous pool's cache."""
    return async_cached(pools) + max(0, int(pools.get("sync_cached", 0)))
