"""Heal requests across processes: one traced process needs memory another one's pools hold.

Why here and not in the libraries: a library knows its own process only. When an
allocation (plain, or stream-ordered from a pool that cannot grow) will not fit even with its
own pools trimmed, it asks (``KIND_HEAL_REQUEST``) and
its thread waits; the broker, which reads every traced process's samples, picks the processes
whose reserved-but-unused bytes on that GPU make the allocation fit
(``provetop.sources.trace.heal``),
has their libraries trim (``OP_TRIM``), waits for their answers, and answers the one that
asked (``OP_HEAL_DONE``). CUDA documents its implicit release of a pool's reserve for
allocations of the same process only; across processes nothing gives it back without this.

Each request is served on a thread of its own, so that no stream's reader waits on another
stream (the peers' answers arrive on their readers' threads).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from provetop.base.units import fmt_bytes
from provetop.sources.trace.events import TraceEvents
from provetop.sources.trace.heal import need_bytes, peers_to_trim
from provetop.sources.trace.records import OP_HEAL_DONE, OP_TRIM, Record, encode_command
from provetop.trace.listener import Stream

# How long the broker waits for the peers' trims: under the library's own wait for the answer
# (PROVETOP_TRACE_HEAL_WAIT_MS, 1000 by default), so the answer arrives while it still waits.
# A trim takes a few milliseconds plus up to one drain period (5 ms) of each library.
PEER_WAIT_S = 0.6

Emit = Callable[..., object]


class HealBroker:
    """See the module docstring. ``streams()`` lists the live streams with their events;
    ``emit(kind, **fields)`` publishes an event."""

    def __init__(
        self,
        streams: Callable[[], list[tuple[Stream, TraceEvents]]],
        emit: Emit,
        lane_of: Callable[[int, int], int],
    ) -> None:
        self.streams = streams
        self.emit = emit
        self.lane_of = lane_of
        self._ids = itertools.count(1 << 32)  # apart from the operator's command ids
        self._waiting: dict[int, threading.Event] = {}
        self._lock = threading.Lock()
        self.served = 0

    def new_command_id(self) -> int:
        return next(self._ids)

    def expect(self, command_id: int) -> threading.Event:
        """An event set when the HEAL record answering ``command_id`` is read."""
        done = threading.Event()
        with self._lock:
            self._waiting[command_id] = done
        return done

    def answered(self, command_id: int) -> None:
        """A HEAL record with this command id was read (any stream's reader thread)."""
        with self._lock:
            done = self._waiting.pop(command_id, None)
        if done is not None:
            done.set()

    def request(self, asker: Stream, events: TraceEvents, r: Record) -> None:
        """A library's HEAL_REQUEST: served on a thread of its own."""
        threading.Thread(
            target=self._serve, args=(asker, events, r), name="trace-heal", daemon=True
        ).start()

    def _serve(self, asker: Stream, events: TraceEvents, r: Record) -> None:
        request_id, asked, free = r.v[0], r.v[1], r.v[2]
        info = events.devices.get(r.device)
        peers: dict[int, tuple[Stream, int, int]] = {}  # pid -> (stream, ordinal, unused)
        if info is not None and info.pci_bus_id:
            for stream, other in self.streams():
                if stream is asker or stream.pid == asker.pid:
                    continue
                ordinal = other.ordinal_of(info.pci_bus_id)
                if ordinal is not None:
                    peers[stream.pid] = (stream, ordinal, other.unused(ordinal))
        chosen = peers_to_trim(asked, free, {pid: p[2] for pid, p in peers.items()})
        lane = self.lane_of(asker.pid, r.device)
        started = time.monotonic_ns()
        waits = []
        for pid in chosen:
            stream, ordinal, _ = peers[pid]
            cid = self.new_command_id()
            done = self.expect(cid)
            if stream.send(encode_command(OP_TRIM, ordinal, cid)):
                waits.append(done)
        deadline = time.monotonic() + PEER_WAIT_S
        answered = sum(done.wait(max(0.0, deadline - time.monotonic())) for done in waits)
        took_ns = time.monotonic_ns() - started
        unused = sum(peers[pid][2] for pid in chosen)
        asker.send(encode_command(OP_HEAL_DONE, r.device, request_id, unused))
        self.served += 1
        self.emit(
            "alloc",
            proof=-1,
            partition=-1,
            worker=-1,
            device=lane,
            cuda_device=r.device,
            site="heal",
            pool="sync",
            requested=asked,
            decision="trim" if chosen else "skip",
            free=free,
            reason=self._reason(asker.pid, asked, free, peers, chosen, answered, took_ns),
            pid=asker.pid,
            peers=[int(p) for p in chosen],
            took_ns=took_ns,
        )

    @staticmethod
    def _reason(
        pid: int,
        asked: int,
        free: int,
        peers: dict[int, tuple[Stream, int, int]],
        chosen: list[int],
        answered: int,
        took_ns: int,
    ) -> str:
        head = (
            f"pid {pid} needs {fmt_bytes(need_bytes(asked))} with {fmt_bytes(free)} free "
            "after its own pools"
        )
        if not peers:
            return f"{head}: no other traced process uses this GPU"
        if not chosen:
            held = fmt_bytes(sum(p[2] for p in peers.values()))
            return (
                f"{head}: the other traced processes hold {held} unused, not enough; "
                "nothing trimmed"
            )
        names = ", ".join(f"pid {p} ({fmt_bytes(peers[p][2])} unused)" for p in chosen)
        late = "" if answered == len(chosen) else f", {len(chosen) - answered} did not answer"
        return f"{head}: asked {names} to trim{late}, {took_ns / 1e6:.1f} ms"


def heal_command_id(event: dict[str, Any]) -> int | None:
    """The command id of an ``alloc`` event made from a library's HEAL record on command."""
    if event.get("k") != "alloc" or event.get("site") != "trim":
        return None
    cid = event.get("command_id")
    return cid if isinstance(cid, int) and cid else None
