"""The engine as an object: build a run from an :class:`EngineConfig`, start it, watch it,
control it, stop it. ``provetop engine`` is a thin CLI around this class, ``provetop run``
uses it in-process, and the tests drive it directly.

Lifecycle: ``Engine(config, ...)`` checks everything that can be checked without work
(backend, listen address, token, recording path); ``start()`` opens the socket and the
recording, emits ``hello`` and returns at once; a run thread generates the SRS, starts the
workers and, when every proof is done, emits ``engine_state done``. ``wait()`` blocks until
then, ``stop()`` ends intake early (running partitions finish), ``close()`` tears everything
down (final samples, recording footer, socket removed).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from provetop.base.units import fmt_bytes
from provetop.base.version import __version__
from provetop.engine.devices.base import Device
from provetop.engine.devices.cuda import CudaDeviceError
from provetop.engine.devices.modeled import ModeledDevice
from provetop.engine.memory.allocator import footprint, make_policy, phantom_capacity
from provetop.engine.memory.plan import PlanError, choose_plan, minimum_capacity, reclaimable
from provetop.engine.memory.stream_plan import startup_plan_inputs
from provetop.engine.partition import cuda as partition_cuda
from provetop.engine.partition.faults import FaultInjector, FaultSpecError
from provetop.engine.partition.pipeline import DeviceGate, PartitionRunner, RunContext
from provetop.engine.run import cuda_run
from provetop.engine.run.heap import HeapTrimmer
from provetop.engine.run.workers import (
    Scheduler,
    Supervisor,
    WorkerSlot,
    lookahead_loop,
    worker_loop,
)
from provetop.engine.settings.config import DEFAULT_MODELED_MEMORY, SYNTH_LANE_BASE, EngineConfig
from provetop.engine.settings.tuning import Tuning
from provetop.engine.spec.srs import draw_srs, generate_srs
from provetop.engine.spec.workload import query_sizes
from provetop.engine.telemetry.bus import Bus, Clock, Subscription
from provetop.engine.telemetry.control import CommandError, Controls, acknowledge, refuse_bad_frame
from provetop.engine.telemetry.metrics import EngineMetrics
from provetop.engine.telemetry.progress import Progress, Stopped
from provetop.engine.telemetry.sampler import Sampler
from provetop.engine.telemetry.server import ListenError, TelemetryServer, parse_listen, read_token
from provetop.kernels.backend import KernelBackend
from provetop.kernels.backends import BackendUnavailable, get_backend
from provetop.recordings.errors import RecordingError
from provetop.recordings.prometheus.http_server import MetricsAddressError
from provetop.recordings.schema import SCHEMA_VERSION
from provetop.recordings.state import State
from provetop.recordings.writer import RecordingWriter


class EngineError(ValueError):
    """The engine cannot start with these settings; the message is one line."""


def _fault_injector(spec: str | None) -> FaultInjector | None:
    """Fault injection (``provetop.engine.partition.faults``); None unless asked for."""
    try:
        return FaultInjector.from_spec(spec)
    except FaultSpecError as exc:
        raise EngineError(str(exc)) from None


class Engine:
    """One proving run (see the module docstring).

    ``listen``: None/"unix" (a fresh private Unix socket), "unix:PATH", "tcp://127.0.0.1:PORT",
    or False for no socket at all (in-process use). ``token_file`` is required for TCP.
    ``record``: a path to write the recording to, or None for none. ``backend``: a
    ``KernelBackend`` instance to use instead of the one named by ``config.backend``.
    ``tuning``: the run's ``PROVETOP_*`` settings
    (``provetop.engine.settings.tuning.Tuning.from_env()`` in
    the
    CLI); None means the defaults, so an in-process run never depends on the environment.
    """

    def __init__(
        self,
        config: EngineConfig,
        *,
        listen: str | None | bool = None,
        token_file: str | None = None,
        read_only: bool = False,
        record: str | os.PathLike[str] | None = None,
        log: Callable[[str], None] | None = None,
        backend: KernelBackend | None = None,
        inject: str | None = None,
        tuning: Tuning | None = None,
        metrics: str | None = None,
    ) -> None:
        self.config = config.validate()
        # the defaults, not the environment, unless the caller read it (the CLI does, once)
        self.tuning = tuning if tuning is not None else Tuning()
        self.faults = _fault_injector(inject)
        self.read_only = read_only
        self.log = log or (lambda line: None)
        self._log_given = log is not None
        self.engine_id = uuid.uuid4().hex[:16]
        self.record_path = Path(record) if record is not None else None
        self.cuda_run: cuda_run.CudaRun | None = None  # on the cuda backend
        self.backend = backend if backend is not None else self._default_backend()
        self.sizes = query_sizes(config.domain_log)
        self.footprint = footprint(config.domain_log, self.sizes, config.prestage_margin)
        self.devices: list[Device] = self._build_devices()
        self.policy = make_policy(config.allocator)
        self.controls = Controls()
        self.clock = Clock()
        self.bus = Bus(self.clock)
        if self.faults is not None:
            self.faults.bind(self.bus.emit)
        if log is not None:
            self.bus.add_listener(self._log_event)
        self.scheduler = Scheduler(
            config.proofs, config.partitions, config.concurrency, config.duration_s
        )
        self.sampler = Sampler(self.bus, self.devices, config.sample_hz, config.nvml_interval)
        self.heap = HeapTrimmer(self.tuning.heap_trim_s)  # RSS flat over a long run
        self.metrics: EngineMetrics | None = self._build_metrics(metrics)
        self.metrics_url: str | None = None
        self.server: TelemetryServer | None = self._build_server(listen, token_file)
        self.recorder: RecordingWriter | None = None
        self.address: str | None = None
        self._run_thread: threading.Thread | None = None
        self._done = threading.Event()
        self._stop_requested = threading.Event()
        self._closed = False
        # counts, not a map per proof: an engine that runs for weeks keeps no per-proof record
        self.proofs_completed = 0
        self.proofs_failed = 0
        self.error: str | None = None
        self.record_error: str | None = None  # the recording's write error, once
        self._record_error_lock = threading.Lock()

    def _default_backend(self) -> KernelBackend:
        """The backend ``config.backend`` names (tests pass a wrapped one instead)."""
        try:
            return get_backend(self.config.backend, tuning=self.tuning.kernels)
        except BackendUnavailable as exc:
            raise EngineError(f"--backend {self.config.backend} is not available: {exc}") from None

    def _build_devices(self) -> list[Device]:
        """The run's devices, each refused before anything is made where no memory plan fits
        one partition (aware), and wrapped for fault injection when asked for."""
        devices = self._make_devices()
        if self.config.allocator == "aware":
            self._check_plans(devices)
        if self.faults is None:
            return devices
        self.faults.ntt_bytes = self.footprint.u
        return [self.faults.wrap_device(d) for d in devices]

    def _build_metrics(self, address: str | None) -> EngineMetrics | None:
        """``--metrics``: subscribed now, before hello, so the fold sees everything."""
        if address is None:
            return None
        try:
            return EngineMetrics(self.bus, address)
        except MetricsAddressError as exc:
            self.bus.close()
            raise EngineError(str(exc)) from None

    def _build_server(
        self, listen: str | None | bool, token_file: str | None
    ) -> TelemetryServer | None:
        """The telemetry socket (none with ``listen=False``); TCP needs a token file."""
        if listen is False:
            return None
        try:
            kind = listen if isinstance(listen, str) else None
            token = None
            if parse_listen(kind)[0] == "tcp":
                if not token_file:
                    raise ListenError("--listen tcp:// needs --token-file F")
                token = read_token(token_file)
            server = TelemetryServer(
                self.bus,
                self._serve_frame,
                self._on_bad_frame,
                listen=kind,
                token=token,
            )
        except ListenError as exc:
            self.bus.close()
            raise EngineError(str(exc)) from None
        server.faults = self.faults
        server.accept_rate = self.tuning.accept_rate
        return server

    # -- construction helpers -----------------------------------------------------------------

    def _make_devices(self) -> list[Device]:
        cfg = self.config
        if cfg.backend == "cuda":  # real pools (provetop.engine.devices.cuda); ballast for a cap
            try:
                return cuda_run.make_cuda_devices(cfg.devices, cfg.device_memory)
            except CudaDeviceError as exc:
                raise EngineError(str(exc)) from None
        capacity = cfg.device_memory
        physical = None
        if capacity is None and cfg.extra.get("phantom"):
            # the phantom's card is modeled at exactly this size, with no ballast: on a 16 GiB
            # card capped to it, its bar was ballast and the phantom a sliver no one could see
            capacity = physical = phantom_capacity(self.footprint, ModeledDevice(0, 1 << 30))
        if capacity is None:
            capacity = DEFAULT_MODELED_MEMORY
        if physical is None:
            physical = max(DEFAULT_MODELED_MEMORY, capacity)
        return [ModeledDevice(i, capacity, physical) for i in cfg.devices]

    def _check_plans(self, devices: list[Device]) -> None:
        """Refuse, before anything is made, a device on which no memory plan fits one
        partition (``provetop.engine.memory.plan``), naming the device memory that would."""
        cfg = self.config
        fp, z, tables = self.footprint, 0, 0
        if cfg.backend == "cuda":  # every query streamed: the smallest footprint
            chunk = cuda_run.host_chunk(self.backend)
            fp, z, tables = startup_plan_inputs(
                self.footprint, self.sizes, cfg.domain_log, chunk, self.tuning.kernels
            )
        for d in devices:
            free, total = d.mem_info()
            # the twiddle table is not built yet (the backend's warm-up makes it)
            free = reclaimable(free, d.sample()) - tables
            try:
                choose_plan(free, fp, z, tables, device=f"device {d.index}")
            except PlanError as exc:
                capacity = int(d.capacity or total)
                need = minimum_capacity(capacity, free, fp, z, tables)
                raise EngineError(
                    f"{exc}: use a device (or --device-memory) of at least {fmt_bytes(need)}"
                ) from None

    def hello_fields(self) -> dict[str, Any]:
        cfg = self.config.to_dict()
        cfg["query_sizes"] = self.sizes.as_dict()
        cfg["footprint"] = {
            "abc_each": self.footprint.u,
            "prestage": self.footprint.prestage,
            "msm_scratch": dict(self.footprint.msm),
            "margin": self.footprint.margin,
        }
        cfg["record"] = str(self.record_path) if self.record_path else None
        cfg["inject"] = self.faults.spec if self.faults is not None else None
        return {
            "schema": SCHEMA_VERSION,
            "engine_id": self.engine_id,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "version": __version__,
            "source": "provetop",
            "backend": self.config.backend,
            "modeled": all(d.modeled for d in self.devices),
            "devices": [d.describe() for d in self.devices],
            "config": cfg,
            "wall_ns": self.clock.wall_ns,
            "read_only": self.read_only,
            "tuning": self.tuning.as_dict(),
        }

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Engine:
        """Open the recording and the socket, emit ``hello``, start the run thread."""
        if self.record_path is not None:
            try:
                self.recorder = RecordingWriter(
                    self.record_path, exclusive=True, on_error=self._on_record_error
                )
            except Exception as exc:
                self.bus.close()
                raise EngineError(str(exc)) from None
            self.bus.add_recorder(self.recorder)
        if self.metrics is not None:
            try:
                self.metrics_url = self.metrics.start()
            except OSError as exc:
                self._abort_start()
                raise EngineError(f"--metrics {self.metrics.url}: {exc}") from None
        self.bus.emit("hello", **self.hello_fields())
        if self.server is not None:
            try:
                self.address = self.server.start()
            except (ListenError, OSError) as exc:
                self._abort_start()
                raise EngineError(str(exc)) from None
        self.bus.emit("engine_state", state="starting", reason="generating the SRS")
        self.sampler.sample_all()
        self.heap.start()
        self._run_thread = threading.Thread(target=self._run, name="engine-run", daemon=True)
        self._run_thread.start()
        return self

    def _on_record_error(self, message: str) -> None:
        """The recording cannot be written (disk full): say so at once, in one line on stderr
        (or the caller's log) and as a ``fault`` the dashboard shows, then apply the run's
        policy (``--on-record-error``). Called once, from the writer's flusher thread."""
        with self._record_error_lock:
            if self.record_error is not None:
                return
            self.record_error = message
        stop = self.config.on_record_error == "stop"
        then = (
            "stopping after the partitions in flight (--on-record-error stop)"
            if stop
            else "the run goes on without a recording (--on-record-error continue)"
        )
        line = f"recording failed: {message}; {then}"
        if not self._log_given:  # with a log, the fault event below reaches it
            try:
                print(f"provetop: {line}", file=sys.stderr, flush=True)
            except (OSError, ValueError):
                pass
        self.bus.emit("fault", kind="exception", site="recording", message=line)
        if stop:
            self.stop("the recording cannot be written")

    def _abort_start(self) -> None:
        """A start that failed leaves no recording: the file was created by this run (O_EXCL),
        holds only its header and hello, and would otherwise read as a complete, empty run."""
        self.bus.close()
        if self.metrics is not None:
            self.metrics.close()
        if self.recorder is not None:
            self.recorder.discard()

    def _run(self) -> None:
        try:
            import numpy as np

            rng = np.random.default_rng(None if self.config.seed is None else [self.config.seed])
            if (
                self.config.backend == "cuda"
            ):  # points made per device (provetop.engine.run.cuda_srs)
                srs = draw_srs(self.sizes, rng)
            else:
                total = sum(self.sizes.as_dict().values())
                progress = Progress(
                    self.bus.emit, "srs", "SRS", total, "points", stop=self.stopping
                )
                srs = generate_srs(self.backend, self.sizes, rng, progress)
            ctx = RunContext(
                config=self.config,
                backend=self.backend,
                srs=srs,
                sizes=self.sizes,
                footprint=self.footprint,
                policy=self.policy,
                bus=self.bus,
                controls=self.controls,
                sample=self.sampler.sample,
                faults=self.faults,
                tuning=self.tuning,
                stopping=self.stopping,
            )
            self.sampler.start()
            if not self.scheduler.paused:
                self.bus.emit("engine_state", state="running", reason="SRS ready, workers started")
            supervisor = Supervisor(self.scheduler, self._on_worker_died, self._on_proof_done)
            # Every device's context before any worker starts: a device that cannot be set up
            # (its SRS placement, the host check) fails the run here, and the teardown below
            # then frees no device SRS under a running neighbour's workers (which nothing
            # would join: supervisor.run() is never reached).
            dctxs = [(device, self._device_context(ctx, device)) for device in self.devices]
            for device, dctx in dctxs:
                mutex = threading.Lock()
                gate = DeviceGate()
                for w in range(self.config.workers_per_device):
                    target = self._worker_target(dctx, device, w, mutex, gate)
                    supervisor.add(f"worker-d{device.index}-w{w}", device.index, w, target)
            supervisor.run()  # replaces a worker thread that dies; its partition runs again
        except Stopped:  # stopped during a start-up step: no worker ever started
            pass
        except Exception as exc:  # the run cannot continue: say so, end cleanly
            self.error = f"{type(exc).__name__}: {exc}"
            self.bus.emit("fault", kind="exception", message=f"engine run failed: {self.error}")
        finally:
            self.sampler.stop()
            self.sampler.sample_all()
            if self.cuda_run is not None:  # SRS blocks freed, ballast given back, pools trimmed
                try:
                    self.cuda_run.close(self.devices)
                except Exception as exc:
                    self.bus.emit("fault", kind="exception", message=f"device close: {exc}")
            self.bus.emit("counters", **self.bus.counters())
            if self.scheduler.stopped and not self.scheduler.all_dispatched:
                reason = "stopped before every proof was done"
            elif self.error:
                reason = "failed"
            else:
                reason = "all proofs done"
            self.bus.emit("engine_state", state="done", reason=reason)
            self._done.set()

    def _worker_target(
        self, ctx: RunContext, device: Device, w: int, mutex: threading.Lock, gate: DeviceGate
    ) -> Callable[[WorkerSlot], None]:
        runner_cls: type[PartitionRunner] = PartitionRunner
        if self.cuda_run is not None:
            runner_cls = partition_cuda.CudaPartitionRunner

        def target(slot: WorkerSlot) -> None:
            try:
                runner = runner_cls(ctx, device, w, mutex, gate)
            except BaseException as exc:  # the worker cannot start: the supervisor decides
                slot.died = exc
                return
            on_done, on_error = self._on_proof_done, self._on_worker_error

            def prepare(proof: int, partition: int) -> Any:
                return runner.prepare(proof, partition, lane=SYNTH_LANE_BASE + w)

            def complete(prepared: Any) -> bool:
                result = runner.complete(prepared)
                return result.ok and result.verified is not False

            if self.config.synthesis_ahead:
                lookahead_loop(self.scheduler, prepare, complete, on_done, on_error, slot)
            else:
                worker_loop(self.scheduler, self._runner_fn(runner), on_done, on_error, slot)
            # a stopped worker's pinned pools are freed when the run closes; a dead one's are
            # not kept (its replacement pins its own: provetop.engine.memory.hostmem plans one set
            # per
            # worker)
            if self.cuda_run is not None and slot.exited:
                self.cuda_run.retire(runner)

        return target

    def _device_context(self, ctx: RunContext, device: Device) -> RunContext:
        """The context of ``device``'s workers: shared on the cpu backend; on cuda, the SRS
        placed on (or streamed to) this device, the backend bound to its streams and pools
        (``provetop.engine.run.cuda_run``)."""
        if self.config.backend != "cuda":
            if self.config.allocator != "aware":
                return ctx
            free = reclaimable(device.mem_info()[0], device.sample())
            plan = choose_plan(free, ctx.footprint, device=f"device {device.index}")
            cuda_run.emit_plan(self.bus, device, plan, ctx.footprint)
            return replace(ctx, plan=plan)
        if self.cuda_run is None:
            self.cuda_run = cuda_run.CudaRun(self.tuning.switch_interval_s)
        return self.cuda_run.context(ctx, device, self.config.workers_per_device)

    def _on_worker_died(self, slot: WorkerSlot, requeued: bool) -> None:
        exc = slot.died
        where: dict[str, Any] = {"device": slot.device, "worker": slot.worker}
        if slot.job is not None:
            where["proof"], where["partition"] = slot.job
        then = "its partition runs again on another worker" if requeued else "no partition lost"
        if slot.job is not None and not requeued:
            then = "its partition failed (it killed its worker too often)"
        if slot.ahead_requeued is not None:  # look-ahead: the next one it had claimed
            proof, part = slot.ahead_requeued
            then += f"; partition {proof}/{part}, claimed ahead and not started, is queued again"
        self.bus.emit(
            "fault",
            kind="worker_died",
            message=f"worker thread died ({type(exc).__name__}: {exc}); replaced, {then}",
            site=getattr(exc, "phase", None),
            injected=bool(getattr(exc, "injected", False)),
            **where,
        )

    def _runner_fn(self, runner: PartitionRunner) -> Callable[[int, int], bool]:
        def run(proof: int, partition: int) -> bool:
            result = runner.run(proof, partition)
            return result.ok and result.verified is not False

        return run

    def _log_event(self, e: dict[str, Any]) -> None:
        """Hand the lines an operator must not miss to ``log`` (state changes, faults)."""
        if e["k"] == "engine_state":
            reason = f" ({e['reason']})" if e.get("reason") else ""
            self.log(f"engine {e['state']}{reason}")
        elif e["k"] == "fault":
            where = f" proof {e['proof']} partition {e.get('partition')}" if "proof" in e else ""
            self.log(f"fault {e['kind']}{where}: {e['message']}")

    def _on_worker_error(self, proof: int, partition: int, exc: Exception) -> None:
        self.bus.emit(
            "fault",
            kind="exception",
            message=f"worker error: {type(exc).__name__}: {exc}",
            proof=proof,
            partition=partition,
        )

    def _on_proof_done(self, proof: int, ok: bool, wall_ms: float) -> None:
        self.proofs_completed += 1
        self.proofs_failed += not ok
        self.bus.emit("proof_done", proof=proof, ok=ok, wall_ms=wall_ms)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def ok(self) -> bool:
        """True when the run finished, every proof was completed and ok, and the recording
        (when there is one) was written."""
        return (
            self.done
            and self.error is None
            and self.record_error is None
            and self.proofs_completed == self.scheduler.proofs
            and self.proofs_failed == 0
        )

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every worker has finished; False on timeout."""
        return self._done.wait(timeout)

    def stopping(self) -> bool:
        """True once a stop was asked for (the start-up steps check it between chunks)."""
        return self._stop_requested.is_set()

    def wait_for_stop(self, timeout: float | None = None) -> bool:
        """Block until a ``stop`` (command or :meth:`stop`); False on timeout."""
        return self._stop_requested.wait(timeout)

    def stop(self, reason: str = "stop requested") -> None:
        """End intake; partitions already running finish. Idempotent."""
        if self._stop_requested.is_set():
            return
        self._stop_requested.set()
        self.scheduler.stop()
        if not self.done:
            self.bus.emit("engine_state", state="stopping", reason=reason)

    def close(self, timeout: float = 60.0) -> None:
        """Stop, wait for the workers, flush telemetry, finish the recording, remove the
        socket. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.stop("engine closing")
        if self._run_thread is not None:
            self._run_thread.join(timeout)
        self.heap.stop()
        self.bus.flush(10.0)
        if self.server is not None:
            self.server.close()
        self.bus.close()
        if self.metrics is not None:
            self.metrics.close()
        if self.recorder is not None:
            try:
                self.recorder.close()
            except RecordingError as exc:  # reported (once) and kept: no traceback at exit
                self._on_record_error(str(exc))

    def __enter__(self) -> Engine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- observing ----------------------------------------------------------------------------

    def subscribe(self, name: str = "in-process", maxlen: int | None = None) -> Subscription:
        """A subscription to the stream, exactly as a socket client gets it."""
        return self.bus.subscribe(name, maxlen)

    @property
    def state(self) -> State:
        """The live reducer state (``provetop.recordings.state.State``); read it after
        ``bus.flush()`` for a consistent picture."""
        return self.bus.state

    # -- control ------------------------------------------------------------------------------

    def command(
        self,
        cmd: str,
        args: dict[str, Any] | None = None,
        *,
        id: int = 0,
        client: str = "in-process",
    ) -> dict[str, Any]:
        """Run a control command in-process; returns the ``control`` acknowledgement."""
        frame = {"k": "command", "id": id, "cmd": cmd, "args": args or {}}
        return self._on_frame(frame, client)

    def _serve_frame(self, frame: Any, client: str) -> None:
        """A socket client's frame: the acknowledgement reaches it as an event."""
        self._on_frame(frame, client)

    def _on_frame(self, frame: Any, client: str) -> dict[str, Any]:
        read_only = "this engine is read-only (--read-only)" if self.read_only else None
        answer = acknowledge(self.bus, frame, client, read_only=read_only,
                             check=self._check_applicable)  # fmt: skip
        if isinstance(answer, dict):
            return answer
        ack, cmd, args = answer
        self._apply(cmd, args)
        return ack

    def _on_bad_frame(self, error: str, client: str) -> None:
        refuse_bad_frame(self.bus, error, client)

    def _check_applicable(self, cmd: str, args: dict[str, Any]) -> None:
        if cmd in ("pause", "resume") and (self._stop_requested.is_set() or self.done):
            # a stop cannot be undone: intake is closed for good, and saying "running" after
            # "stopping" would tell the operator something false
            why = "the run is done" if self.done else "the engine is stopping"
            raise CommandError(f"{cmd}: {why} (a stop cannot be undone)")
        known = {d.index for d in self.devices}
        device = args.get("device")
        if device is not None and device not in known:
            raise CommandError(f"{cmd}: no device {device} (devices: {sorted(known)})")

    def _apply(self, cmd: str, args: dict[str, Any]) -> None:
        if cmd == "force_fallback":
            self.controls.force(args["device"], args["on"])
        elif cmd == "pause":
            self.scheduler.pause()
            self.bus.emit("engine_state", state="paused", reason="paused by the operator")
        elif cmd == "resume":
            self.scheduler.resume()
            self.bus.emit("engine_state", state="running", reason="resumed by the operator")
        elif cmd == "trim":
            for d in self.devices:
                if args.get("device") in (None, d.index):
                    d.synchronize()
                    d.trim()
                    self.sampler.sample(d)
        elif cmd == "marker":
            self.bus.emit("marker", name=args["name"])
        elif cmd == "stop":
            self.stop("stop command")
