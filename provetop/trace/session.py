"""One ``provetop trace`` run: the program, its processes' streams, and the engine's carriers.

Everything downstream is the engine's: the events go on a
:class:`~provetop.engine.telemetry.bus.Bus`
(the one reducer folds them), to the telemetry socket (``watch`` and ``top`` attach to it as
to an engine, discovery included), to a recording and to /metrics. What is the trace's own:

- every process of the program that initialises CUDA connects to :class:`TraceListener`; its
  records become events through :class:`provetop.sources.trace.events.TraceEvents`, all on the bus's
  clock (the library's timestamps are CLOCK_MONOTONIC, the bus's too), each process's devices
  on lanes of their own (:mod:`provetop.trace.lanes`);
- NVML, read here once a second per GPU (``gpu`` events) and with every memory sample (the
  nvidia-smi view and the process's own usage beside the pools);
- control: ``trim`` has the libraries trim their pools (one device's lane, or all), ``marker``
  is recorded, ``stop`` sends SIGTERM to the program; ``pause``, ``resume`` and
  ``force_fallback`` are refused (a traced program has no intake and no pre-stage of ours);
- ``--heal``: each library trims its own pools before a plain allocation that would not fit,
  and asks, through :class:`~provetop.trace.broker.HealBroker`, the other traced processes on
  the same GPU when its own are not enough.
"""

from __future__ import annotations

import os
import shlex
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provetop.base import nvml
from provetop.base.units import fmt_bytes
from provetop.base.version import __version__
from provetop.engine.telemetry.bus import Bus, Clock
from provetop.engine.telemetry.control import CommandError, acknowledge, refuse_bad_frame
from provetop.engine.telemetry.metrics import EngineMetrics
from provetop.engine.telemetry.server import TelemetryServer, parse_listen, read_token
from provetop.recordings.schema import SCHEMA_VERSION, SYNTH_WORKER_BASE
from provetop.recordings.writer import RecordingWriter
from provetop.sources.trace.events import TraceEvents
from provetop.sources.trace.heal import verdict
from provetop.sources.trace.records import OP_HEAL_DONE, OP_TRIM, Record, encode_command
from provetop.trace.broker import HealBroker, heal_command_id
from provetop.trace.child import Child, traced_env
from provetop.trace.cuzk_log import CuzkLog
from provetop.trace.lanes import LANE_STRIDE, LaneMap
from provetop.trace.listener import Stream, TraceListener

NVML_INTERVAL_S = 1.0  # the engine's own default (--nvml-interval)
# After the program exited, how long its processes' libraries get to flush: the library's exit
# flush waits at most 2 s for its reader (writer.h, EXIT_WAIT_MS), and a child process the
# program left running may still be writing.
STREAMS_GRACE_S = 5.0
NOT_APPLICABLE = {
    "pause": "a traced program cannot be paused by provetop (it has no intake of ours)",
    "resume": "a traced program cannot be paused by provetop (it has no intake of ours)",
    "force_fallback": "a traced program has no pre-stage of provetop's to force",
}


class TraceError(RuntimeError):
    """The trace cannot start (one line for the CLI)."""


@dataclass
class TraceOptions:
    command: Sequence[str]
    library: Path
    listen: str | None | bool = None  # None: a fresh private Unix socket; False: none
    token_file: str | None = None
    record: str | None = None
    metrics: str | None = None
    heal: bool = False
    interval_ms: int = 100
    nvml_interval: float = NVML_INTERVAL_S
    cuzk_log: str | None = None
    workers_per_device: int = 2
    read_only: bool = False


class TraceSession:
    def __init__(self, options: TraceOptions) -> None:
        self.options = options
        self.engine_id = f"trace-{uuid.uuid4().hex[:12]}"
        self.clock = Clock()
        self.bus = Bus(self.clock)
        self.lanes = LaneMap()
        self.listener = TraceListener(
            self._on_header, self._on_records, self._on_close, self._on_error
        )
        self.broker = HealBroker(self._live_streams, self._emit_heal, self.lanes.lane)
        self.events: dict[int, TraceEvents] = {}  # by stream number
        self._events_lock = threading.Lock()
        self.server: TelemetryServer | None = None
        self.metrics: EngineMetrics | None = None
        self.metrics_url: str | None = None
        self.recorder: RecordingWriter | None = None
        self.address: str | None = None
        self.child: Child | None = None
        self.cuzk: CuzkLog | None = None
        self.exit_code: int | None = None
        self.ooms = 0
        self.heals = 0
        self.processes = 0
        self._stop = threading.Event()
        self._nvml_thread: threading.Thread | None = None
        self._memory_nvml: dict[int, tuple[float, dict[str, int]]] = {}

    # -- start ----------------------------------------------------------------------------

    def start(self) -> int:
        """Open the recording, the sockets and /metrics, send hello, start the program; its
        pid. TraceError when any of them cannot be had (nothing is left behind then)."""
        o = self.options
        try:
            self._open_carriers()
        except (OSError, ValueError) as exc:
            self._close_carriers(discard=True)
            raise TraceError(str(exc)) from None
        socket_path = self.listener.start()
        env = traced_env(os.environ, o.library, socket_path, interval_ms=o.interval_ms, heal=o.heal)
        self.child = Child(o.command, env)
        started_wall = time.time_ns()
        try:
            pid = self.child.start()
        except OSError as exc:
            self.listener.close()
            self._close_carriers(discard=True)
            raise TraceError(f"cannot run {o.command[0]!r}: {exc.strerror or exc}") from None
        self.bus.emit("engine_state", state="running", reason=f"tracing pid {pid}: {self.line}")
        if o.cuzk_log:
            self.cuzk = CuzkLog(
                o.cuzk_log,
                self.bus.publish,
                trace_wall_ns=self.clock.wall_ns,
                started_wall_ns=started_wall,
                workers_per_device=o.workers_per_device,
            )
            self.cuzk.start()
        self._nvml_thread = threading.Thread(target=self._nvml_loop, name="trace-nvml", daemon=True)
        self._nvml_thread.start()
        return pid

    @property
    def line(self) -> str:
        return shlex.join(self.options.command)

    def _open_carriers(self) -> None:
        o = self.options
        if o.listen is not False:
            kind = o.listen if isinstance(o.listen, str) else None
            token = None
            if parse_listen(kind)[0] == "tcp":
                if not o.token_file:
                    raise ValueError("--listen tcp:// needs --token-file F")
                token = read_token(o.token_file)
            self.server = TelemetryServer(
                self.bus, self._on_frame, self._on_bad_frame, listen=kind, token=token
            )
        if o.metrics:
            self.metrics = EngineMetrics(self.bus, o.metrics)
        if o.record:
            self.recorder = RecordingWriter(o.record, exclusive=True)
            self.bus.add_recorder(self.recorder)
        if self.metrics is not None:
            self.metrics_url = self.metrics.start()
        self.bus.emit("hello", **self.hello_fields())
        if self.server is not None:
            self.address = self.server.start()

    def hello_fields(self) -> dict[str, Any]:
        o = self.options
        config: dict[str, Any] = {
            "adapter": "trace",
            "command": list(o.command),
            "command_line": self.line,
            "heal": o.heal,
            "interval_ms": o.interval_ms,
            "library": str(o.library),
            "record": o.record,
            "cuzk_log": o.cuzk_log,
            "lane_stride": LANE_STRIDE,
        }
        if o.cuzk_log:
            config["synth_worker_base"] = SYNTH_WORKER_BASE
            config["workers_per_device"] = o.workers_per_device
        devices = [
            {
                "index": int(g["index"]),
                "name": str(g.get("name", "GPU")),
                "capacity": int(g.get("capacity", 0)),
                "modeled": False,
                "pci_bus_id": str(g.get("pci_bus_id", "")),
            }
            for g in self.lanes.gpus
        ]
        return {
            "schema": SCHEMA_VERSION,
            "engine_id": self.engine_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "version": __version__,
            "source": "trace",
            "backend": "cuda",
            "modeled": False,
            "devices": devices,
            "config": config,
            "wall_ns": self.clock.wall_ns,
            "read_only": o.read_only,
        }

    # -- the streams ----------------------------------------------------------------------

    def _emit_heal(self, kind: str, **fields: Any) -> object:
        """The broker's own events (a request served): counted with the libraries' heals."""
        self.heals += 1
        return self.bus.emit(kind, **fields)

    def _live_streams(self) -> list[tuple[Stream, TraceEvents]]:
        with self._events_lock:
            return [
                (s, self.events[s.number]) for s in self.listener.live() if s.number in self.events
            ]

    def _on_header(self, stream: Stream) -> None:
        assert stream.header is not None
        events = TraceEvents(stream.header, origin_ns=self.clock.t0, lanes=self.lanes)
        with self._events_lock:
            self.events[stream.number] = events
            self.processes += 1
        h = stream.header
        note = "" if h.subscribed else " (CUPTI refused: nothing is traced in it)"
        self.bus.emit("marker", name=f"trace: pid {h.pid} (parent {h.ppid}) connected{note}")

    def _on_records(self, stream: Stream, records: list[Record]) -> None:
        events = self.events[stream.number]
        out = events.feed(records)
        for e in out:
            if e["k"] == "fault" and e.get("kind") == "oom" and "cuda_device" in e:
                self._peers_phantom(stream, events, e)
        self._publish(out)
        for r in events.take_requests():
            if self.options.heal:
                self.broker.request(stream, events, r)
            else:  # (a library asks only with --heal's variable) never let it wait for nothing
                stream.send(encode_command(OP_HEAL_DONE, r.device, r.v[0], 0))

    def _peers_phantom(self, stream: Stream, events: TraceEvents, fault: dict[str, Any]) -> None:
        """An OOM of one process beside another traced process's reserve on the same GPU: the
        phantom is the other's (CUDA releases a pool's reserve implicitly only for its own
        process), so the fault names it, and the rule's case counts it."""
        info = events.devices.get(int(fault["cuda_device"]))
        if info is None or not info.pci_bus_id:
            return
        held: dict[int, int] = {}
        for other_stream, other in self._live_streams():
            if other_stream is stream:
                continue
            ordinal = other.ordinal_of(info.pci_bus_id)
            if ordinal is not None and other.unused(ordinal) > 0:
                held[other_stream.pid] = other.unused(ordinal)
        if not held:
            return
        fault["peers_unused"] = {str(pid): n for pid, n in held.items()}
        pools = fault.get("pools") or {}
        own = int(fault.get("phantom") or 0)
        v = verdict(
            int(fault.get("requested") or 0),
            int(pools.get("driver_free", 0)),
            own + sum(held.values()),
        )
        fault["case"] = v.case
        names = ", ".join(f"pid {pid} holds {fmt_bytes(n)}" for pid, n in held.items())
        head = str(fault["message"]).split(": ", 1)[0]
        fit = (
            "with them trimmed it would have fitted (--heal asks them)"
            if v.heal
            else "even with them trimmed it would not have fitted"
        )
        fault["message"] = f"{head}: on this GPU {names} reserved and unused; {fit}"

    def _on_close(self, stream: Stream) -> None:
        events = self.events[stream.number]
        self._publish(events.close())
        if not events.exited:
            self.bus.emit(
                "fault",
                kind="source",
                message=f"trace: pid {stream.pid}'s stream ended without its exit record "
                "(the process was killed or crashed); its events up to then are kept",
                pid=stream.pid,
            )
        else:
            self.bus.emit("marker", name=f"trace: pid {stream.pid} exited")

    def _on_error(self, stream: Stream, message: str) -> None:
        self.bus.emit(
            "fault",
            kind="source",
            message=f"trace: connection {stream.number}: {message}; that stream is ignored",
        )

    def _publish(self, events: list[dict[str, Any]]) -> None:
        for e in events:
            k = e["k"]
            if k == "memory":
                e.update(self._nvml_memory(e))
            elif k == "fault" and e.get("kind") == "oom":
                self.ooms += 1
            elif k == "alloc" and e.get("site") in ("heal", "trim"):
                self.heals += e.get("site") == "heal"  # a library's own (its process's pools)
                cid = heal_command_id(e)
                if cid is not None:
                    self.broker.answered(cid)
            self.bus.publish(e)

    def _nvml_memory(self, e: dict[str, Any]) -> dict[str, int]:
        """The nvidia-smi view of the lane's GPU and the process's own usage, read at most
        once per sampling interval per lane (NVML's process list costs ~1 ms)."""
        lane = self.lanes.get(int(e["device"]))
        if lane is None or lane.nvml is None:
            return {}
        now = time.monotonic()
        cached = self._memory_nvml.get(lane.index)
        if cached is not None and now - cached[0] < self.options.interval_ms / 2000:
            return cached[1]
        fields = lane.nvml.memory(pid=lane.pid)
        self._memory_nvml[lane.index] = (now, fields)
        return fields

    def _nvml_loop(self) -> None:
        """``gpu`` events once per interval: every GPU at its own index, and again for every
        further lane on it, so each memory panel has its nvidia-smi view beside it."""
        devices = {
            int(g["index"]): nvml.NvmlDevice(pci_bus_id=g.get("pci_bus_id"))
            for g in self.lanes.gpus
            if g.get("pci_bus_id")
        }
        while not self._stop.wait(self.options.nvml_interval):
            for index, dev in devices.items():
                fields = dev.gpu()
                if not fields:
                    continue
                self.bus.emit("gpu", device=index, **fields)
                for lane in self.lanes.lanes():
                    if lane.gpu == index and lane.index != index:
                        self.bus.emit("gpu", device=lane.index, **fields)

    # -- control --------------------------------------------------------------------------

    def _on_frame(self, frame: Any, client: str) -> dict[str, Any]:
        targets: list[tuple[Stream, int]] = []

        def check(cmd: str, args: dict[str, Any]) -> None:
            if cmd in NOT_APPLICABLE:
                raise CommandError(f"{cmd}: {NOT_APPLICABLE[cmd]}")
            if cmd == "trim":
                targets.extend(self._trim_targets(args.get("device")))

        read_only = "this trace is read-only (--read-only)" if self.options.read_only else None
        answer = acknowledge(self.bus, frame, client, read_only=read_only, check=check)
        if isinstance(answer, dict):
            return answer
        ack, cmd, args = answer
        if cmd == "trim":
            for stream, ordinal in targets:
                stream.send(encode_command(OP_TRIM, ordinal, self.broker.new_command_id()))
        elif cmd == "marker":
            self.bus.emit("marker", name=args["name"])
        elif cmd == "stop" and self.child is not None:
            self.child.terminate()
        return ack

    def command(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """A control command in-process (tests); the ``control`` acknowledgement."""
        return self._on_frame({"k": "command", "id": 0, "cmd": cmd, "args": args or {}}, "local")

    def _trim_targets(self, device: int | None) -> list[tuple[Stream, int]]:
        """(stream, CUDA ordinal or -1) for a trim of lane ``device`` (None: every lane)."""
        streams = dict((s.pid, s) for s, _ in self._live_streams())
        if device is None:
            if not streams:
                raise CommandError("trim: no traced process is connected")
            return [(s, -1) for s in streams.values()]
        lane = self.lanes.get(device)
        if lane is None or lane.pid not in streams:
            known = sorted(lane.index for lane in self.lanes.lanes() if lane.pid in streams)
            raise CommandError(f"trim: no traced process on device {device} (lanes: {known})")
        return [(streams[lane.pid], lane.ordinal)]

    def _on_bad_frame(self, error: str, client: str) -> None:
        refuse_bad_frame(self.bus, error, client)

    # -- end ------------------------------------------------------------------------------

    def wait(self) -> int:
        """Wait for the program; then for its processes' streams to end; its exit code."""
        assert self.child is not None
        rc = None
        while rc is None:
            rc = self.child.wait(timeout=0.5)
        self.exit_code = rc
        self.child.restore_signals()
        if not self.listener.wait_streams(STREAMS_GRACE_S):
            self.bus.emit(
                "marker",
                name="trace: a process of the program still runs after it "
                "exited; its stream is cut here",
            )
        return rc

    def close(self) -> None:
        """Stop reading, send ``engine_state done``, close every carrier. Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self.cuzk is not None:
            self.cuzk.stop()
        self.listener.close()
        if self._nvml_thread is not None:
            self._nvml_thread.join(timeout=5)
        reason = (
            f"the program exited with code {self.exit_code}"
            if self.exit_code is not None
            else "the trace stopped"
        )
        self.bus.emit("engine_state", state="done", reason=reason)
        self._close_carriers(discard=False)

    def _close_carriers(self, discard: bool) -> None:
        self.bus.flush(timeout=10)
        if self.server is not None:
            self.server.close()
        self.bus.close()
        if self.metrics is not None:
            self.metrics.close()
        if self.recorder is not None:
            if discard:
                self.recorder.discard()
            else:
                self.recorder.close()

    def summary(self) -> dict[str, Any]:
        state = self.bus.state
        peaks = {
            device: {
                "async_high": int(last.get("async_high", 0)),
                "pid": int(last.get("pid", -1)),
                # the lane's GPU as nvidia-smi numbers it (lanes of one GPU differ by pid), as
                # the dashboard's memory panel labels it
                "gpu": device % LANE_STRIDE,
            }
            for device, last in state.memory.items()
        }
        return {
            "exit_code": self.exit_code,
            "processes": self.processes,
            "ooms": self.ooms,
            "heals": self.heals,
            "lanes": peaks,
            "recording": self.options.record,
        }
