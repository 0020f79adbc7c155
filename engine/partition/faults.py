"""Fault injection: make the engine fail on purpose, at named places, to prove it recovers.

Why built in: the seed's one OOM poisoned every later partition. The recovery paths (retry on
the fallback path, trim, a replacement worker, a dropped client) only run when something goes
wrong, so a test or an operator must be able to make exactly that thing go wrong, on the real
engine, and read what happened in the recording. Off unless ``--inject SPEC`` (or the
``PROVETOP_INJECT`` environment variable of ``provetop engine`` / ``provetop run``, read with
the other settings by ``provetop.engine.settings.tuning``) is given.

SPEC is a comma-separated list of items; counts are 1-based and count over the whole run (all
devices and workers together):

- ``alloc:SITE:K``: the K-th allocation at SITE is refused as an OOM. SITE is ``prestage``,
  ``msm_scratch``, ``ntt_scratch`` (counted per H step: its NTT scratch is taken as the phase
  starts) or ``host_register`` (counted per pin call; reported as a ``registration`` fault).
- ``raise:PHASE:K``: an exception is raised as PHASE starts for the K-th time.
- ``delay:PHASE:DUR[:K]``: PHASE sleeps DUR (``200ms``, ``1.5s``, ``500us``) each time it
  starts, or only the K-th time.
- ``kill:worker:N[:PHASE]``: worker thread N (its index within its device) dies the first time
  it starts PHASE (default ``h_step``); the engine notices, starts a replacement thread and
  hands the partition out again.
- ``drop:client:K``: the K-th client to connect is disconnected after its initial events.

Example: ``alloc:prestage:2,raise:h_step:1,delay:msm_h:200ms,kill:worker:0,drop:client:1``.
Every injected failure reaches the recording as a ``fault`` event with ``injected: true``.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from provetop.engine.devices.base import Block, Device, DeviceOOM, PhaseTimer
from provetop.engine.devices.cuda import CudaDevice
from provetop.engine.partition.context import Emit
from provetop.engine.partition.pipeline import PartitionFailed
from provetop.recordings.schema import PHASES

ALLOC_SITES = ("prestage", "msm_scratch", "ntt_scratch", "host_register")
MAX_DELAY_S = 600.0
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(us|ms|s)$")
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


class FaultSpecError(ValueError):
    """An --inject value that cannot be parsed; the message is one line for the CLI."""


class InjectedFault(RuntimeError):
    """The exception ``raise:PHASE:K`` raises; ``injected`` marks its fault event."""

    injected = True


class WorkerKilled(BaseException):
    """Unwinds a worker thread (``kill:worker:N``). A BaseException, so the pipeline's
    ``except Exception`` recovery does not swallow it: the thread really ends, its ``finally``
    blocks give memory and the mutex back, and the supervisor must notice and replace it."""

    injected = True

    def __init__(self, worker: int, phase: str) -> None:
        super().__init__(f"worker {worker} killed in {phase} (injected)")
        self.worker = worker
        self.phase = phase


@dataclass(frozen=True)
class Fault:
    """One parsed item of a spec."""

    kind: str  # alloc | raise | delay | kill | drop
    target: str  # site, phase, "worker" or "client"
    count: int | None  # K (1-based) or the worker index N; None: every time (delay only)
    delay_s: float = 0.0
    phase: str = "h_step"  # kill only

    def __str__(self) -> str:
        if self.kind == "delay":
            k = "" if self.count is None else f":{self.count}"
            return f"delay:{self.target}:{self.delay_s * 1e3:g}ms{k}"
        if self.kind == "kill":
            return f"kill:worker:{self.count}:{self.phase}"
        return f"{self.kind}:{self.target}:{self.count}"


def _positive(text: str, item: str, what: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise FaultSpecError(f"--inject {item!r}: {what} must be a positive integer, got {text!r}")
    return int(text)


def _duration(text: str, item: str) -> float:
    m = _DURATION.match(text)
    if not m:
        raise FaultSpecError(f"--inject {item!r}: expected a duration like 200ms, got {text!r}")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if seconds > MAX_DELAY_S:
        raise FaultSpecError(f"--inject {item!r}: delays are limited to {MAX_DELAY_S:g} s")
    return seconds


def parse_spec(spec: str) -> list[Fault]:
    """Parse SPEC (see the module docstring); :class:`FaultSpecError` names the bad item."""
    faults: list[Fault] = []
    if not spec or not spec.strip():
        raise FaultSpecError("--inject needs a spec like raise:h_step:1")
    for raw in spec.split(","):
        item = raw.strip()
        parts = item.split(":")
        kind = parts[0]
        if kind == "alloc":
            if len(parts) != 3 or parts[1] not in ALLOC_SITES:
                raise FaultSpecError(
                    f"--inject {item!r}: expected alloc:SITE:K with SITE one of "
                    f"{', '.join(ALLOC_SITES)}"
                )
            faults.append(Fault("alloc", parts[1], _positive(parts[2], item, "K")))
        elif kind in ("raise", "delay"):
            if len(parts) < 3 or parts[1] not in PHASES or (kind == "raise" and len(parts) != 3):
                form = "raise:PHASE:K" if kind == "raise" else "delay:PHASE:DUR[:K]"
                raise FaultSpecError(
                    f"--inject {item!r}: expected {form} with PHASE one of {', '.join(PHASES)}"
                )
            if kind == "raise":
                faults.append(Fault("raise", parts[1], _positive(parts[2], item, "K")))
            else:
                if len(parts) > 4:
                    raise FaultSpecError(f"--inject {item!r}: expected delay:PHASE:DUR[:K]")
                count = _positive(parts[3], item, "K") if len(parts) == 4 else None
                faults.append(Fault("delay", parts[1], count, delay_s=_duration(parts[2], item)))
        elif kind == "kill":
            if len(parts) not in (3, 4) or parts[1] != "worker":
                raise FaultSpecError(f"--inject {item!r}: expected kill:worker:N[:PHASE]")
            if not parts[2].isdigit():
                raise FaultSpecError(f"--inject {item!r}: the worker index must be an integer")
            phase = parts[3] if len(parts) == 4 else "h_step"
            if phase not in PHASES:
                raise FaultSpecError(f"--inject {item!r}: unknown phase {phase!r}")
            faults.append(Fault("kill", "worker", int(parts[2]), phase=phase))
        elif kind == "drop":
            if len(parts) != 3 or parts[1] != "client":
                raise FaultSpecError(f"--inject {item!r}: expected drop:client:K")
            faults.append(Fault("drop", "client", _positive(parts[2], item, "K")))
        else:
            raise FaultSpecError(
                f"--inject {item!r}: unknown fault {kind!r} (expected alloc, raise, delay, kill "
                "or drop)"
            )
    return faults


class FaultInjector:
    """Decides, at each hook, whether an injected fault fires; thread-safe. ``emit`` (set by
    :meth:`bind`) sends the ``fault`` events that no other code path emits (delays)."""

    def __init__(self, faults: list[Fault], spec: str = "") -> None:
        self.faults = list(faults)
        self.spec = spec or ",".join(str(f) for f in faults)
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}
        self._killed: set[int] = set()
        self.fired: list[str] = []  # what fired, in order (for tests and the final report)
        self._emit: Emit | None = None
        self.ntt_bytes = 0  # what the H step's NTT scratch would ask for (set by the engine)

    @classmethod
    def from_spec(cls, spec: str | None) -> FaultInjector | None:
        """None when ``spec`` is None or empty (injection off)."""
        if spec is None:
            return None
        return cls(parse_spec(spec), spec.strip())

    def bind(self, emit: Emit) -> None:
        """``emit(kind, **fields)``: the bus's emit."""
        self._emit = emit

    def _tick(self, kind: str, target: str) -> int:
        with self._lock:
            n = self._counts.get((kind, target), 0) + 1
            self._counts[(kind, target)] = n
            return n

    def _record(self, what: str) -> None:
        with self._lock:
            self.fired.append(what)

    # -- hooks --------------------------------------------------------------------------------

    def on_alloc(self, device: Device, nbytes: int, pool: str, site: str) -> None:
        """Before an allocation at ``site``: raise an injected :class:`DeviceOOM` when due."""
        wanted = [f for f in self.faults if f.kind == "alloc" and f.target == site]
        if not wanted:
            return
        n = self._tick("alloc", site)
        if any(f.count == n for f in wanted):
            self._record(f"alloc:{site}:{n}")
            exc = DeviceOOM(int(nbytes), pool, site, device.sample())
            exc.injected = True
            exc.args = (f"{exc} (injected: allocation {n} at {site})",)
            raise exc

    def on_phase(self, phase: str, device: Device, where: dict[str, int]) -> None:
        """As ``phase`` starts (``where``: proof, partition, worker, device)."""
        for f in self.faults:
            if f.kind != "kill" or f.count is None:
                continue
            if f.phase == phase and where.get("worker") == f.count:
                with self._lock:
                    if f.count in self._killed:
                        continue
                    self._killed.add(f.count)
                self._record(f"kill:worker:{f.count}:{phase}")
                raise WorkerKilled(f.count, phase)
        if phase == "h_step":
            self.on_alloc(device, self.ntt_bytes, "async", "ntt_scratch")
        n = None
        for f in self.faults:
            if f.target != phase or f.kind not in ("raise", "delay"):
                continue
            if n is None:
                n = self._tick("phase", phase)
            if f.kind == "delay" and (f.count is None or f.count == n):
                self._record(f"delay:{phase}:{n}")
                if self._emit is not None:
                    self._emit(
                        "fault",
                        kind="injected",
                        message=f"{phase} delayed by {f.delay_s * 1e3:g} ms (injected)",
                        site=phase,
                        injected=True,
                        **where,
                    )
                threading.Event().wait(f.delay_s)
            elif f.kind == "raise" and f.count == n:
                self._record(f"raise:{phase}:{n}")
                exc = InjectedFault(f"injected exception in {phase} (occurrence {n})")
                if phase == "synthesis" and self._emit is not None:
                    # synthesis sits outside the attempt's recovery: fail the partition the
                    # way a synthesis error does (fault, then partition_done with the reason)
                    message = f"{type(exc).__name__}: {exc}"
                    self._emit("fault", kind="exception", message=message, injected=True, **where)
                    raise PartitionFailed(f"synthesis: {message}", False)
                raise exc

    def drop_client(self) -> bool:
        """Called once per accepted client; True when this one is to be dropped."""
        wanted = [f for f in self.faults if f.kind == "drop"]
        if not wanted:
            return False
        n = self._tick("drop", "client")
        if any(f.count == n for f in wanted):
            self._record(f"drop:client:{n}")
            return True
        return False

    def wrap_device(self, device: Device) -> FaultyDevice:
        return FaultyDevice(device, self)


class FaultyDevice(Device):
    """A device whose ``malloc`` and ``pin`` pass through the injector first; everything else
    is the wrapped device's (so the pool counters stay the real ones): the interface's members
    by name, and any other attribute (a CUDA device's NVML handle) through ``__getattr__``."""

    def __init__(self, inner: Device, injector: FaultInjector) -> None:
        self._inner = inner
        self._injector = injector

    def malloc(self, nbytes: int, pool: str, site: str) -> Block:
        self._injector.on_alloc(self._inner, nbytes, pool, site)
        return self._inner.malloc(nbytes, pool, site)

    def pin(self, nbytes: int) -> None:
        self._injector.on_alloc(self._inner, nbytes, "host", "host_register")
        self._inner.pin(nbytes)

    def unpin(self, nbytes: int) -> None:
        self._inner.unpin(nbytes)

    def free(self, block: Block) -> None:
        self._inner.free(block)

    def synchronize(self) -> None:
        self._inner.synchronize()

    def trim(self, pools: tuple[str, ...] = ("async", "sync")) -> int:
        return self._inner.trim(pools)

    def mem_info(self) -> tuple[int, int]:
        return self._inner.mem_info()

    def sample(self) -> dict[str, Any]:
        return self._inner.sample()

    def upload(
        self,
        host: Any,
        block: Block,
        *,
        offset: int = 0,
        chunk: int | None = None,
        pinned: bool = False,
    ) -> Any:
        return self._inner.upload(host, block, offset=offset, chunk=chunk, pinned=pinned)

    def download(self, array: Any) -> Any:
        return self._inner.download(array)

    def round(self, nbytes: int) -> int:
        return self._inner.round(nbytes)

    def describe(self) -> dict[str, Any]:
        return self._inner.describe()

    @property
    def cuda(self) -> CudaDevice | None:
        return self._inner.cuda

    def gpu_timer(self) -> PhaseTimer | None:
        return self._inner.gpu_timer()

    def copy_timer(self) -> PhaseTimer | None:
        return self._inner.copy_timer()

    def close(self) -> None:
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
