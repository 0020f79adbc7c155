"""The machine's GPUs from NVML as an event source: what ``provetop top`` watches with no engine.

Why a source and not a widget reading NVML: the dashboard draws only what the state reducer
folded, so the local GPUs arrive as the engine's own ``gpu`` events (the same fields, read by
the same :func:`provetop.base.nvml.read_gpu`) and the health panel draws them the one way it draws
an engine's. Where NVML is unavailable (no driver, no ``nvidia-ml-py``, a container without the
library) the ``hello`` lists no device and says why in ``config.nvml_error``; no ``gpu`` event
follows, so no figure is ever invented.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from typing import Any

from provetop.base import nvml
from provetop.base.version import __version__
from provetop.recordings.schema import SCHEMA_VERSION, make
from provetop.sources.errors import SourceError
from provetop.sources.procstat import ProcStat
from provetop.sources.protocol import Sink, names_its_thread

__all__ = ["NvmlSource"]


class NvmlSource:
    """Every local GPU, one ``gpu`` event each per ``interval`` seconds, until :meth:`close`.
    Read-only. ``monitor`` (:class:`provetop.sources.protocol.MachineMonitor`) tells the dashboard
    this
    view is the machine's, not an engine's."""

    monitor = True

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = float(interval)
        self.label = f"gpus@{socket.gethostname()}"
        self.read_only = True
        self.error: str | None = None  # why NVML is unavailable, once run() asked
        self._closed = threading.Event()
        self._xids: nvml.XidWatch | None = None

    @names_its_thread
    def run(self, sink: Sink) -> None:
        start = time.monotonic_ns()
        nv = nvml.module()
        devices = nvml.local_devices(nv) if nv is not None else []
        if nv is None:
            self.error = nvml.error() or "NVML unavailable"
        elif not devices:
            self.error = "NVML lists no GPU"
        config: dict[str, Any] = {"monitor": "nvml", "interval_s": self.interval}
        if self.error:
            config["nvml_error"] = self.error
        elif nvml.driver_version(nv):
            config["driver"] = nvml.driver_version(nv)
        hello = make(
            "hello",
            0,
            schema=SCHEMA_VERSION,
            engine_id=f"nvml-{uuid.uuid4().hex[:8]}",
            host=socket.gethostname(),
            pid=os.getpid(),
            version=__version__,
            source="nvml",
            backend="nvml",
            modeled=False,
            devices=[
                {k: d[k] for k in ("index", "name", "capacity") if k in d} | {"modeled": False}
                for d in devices
            ],
            config=config,
            wall_ns=time.time_ns(),
            read_only=True,
        )
        sink.status(self, "connected", "info")
        state = make("engine_state", 0, state="running", reason="monitoring the local GPUs")
        sink.events(self, [hello, state])
        if not devices:
            self._closed.wait()
            return
        self._xids = nvml.XidWatch(nv, {d["index"]: d["handle"] for d in devices})
        procs = ProcStat()
        try:
            while not self._closed.is_set():
                t = time.monotonic_ns() - start
                batch = [sample(nv, d, t, self._xids, procs) for d in devices]
                sink.events(self, batch)
                self._closed.wait(self.interval)
        finally:
            self._xids.close()

    def send(self, cmd: str, args: dict[str, Any]) -> int:
        raise SourceError("the local GPU monitor is read-only")

    def close(self) -> None:
        self._closed.set()


def sample(
    nv: Any, device: dict[str, Any], t: int, xids: nvml.XidWatch | None, procs: ProcStat
) -> dict[str, Any]:
    """One ``gpu`` event of ``device``: NVML's figures, and each compute process's host
    figures (%CPU, %MEM, run time; provetop's own named) from ``/proc``."""
    fields = nvml.read_gpu(nv, device["handle"], xids, device["index"])
    if "processes" in fields:
        fields["processes"] = procs.enrich(fields["processes"])
    return make("gpu", t, device=device["index"], **fields)
