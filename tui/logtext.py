"""The event log's lines: one per decision, sizes for humans, each with the events behind it.

The reducer writes one log line per event that matters (``State.log``). Several of those are
one decision seen from several places: a pre-stage fallback is the allocator's decision, the
fallback upload's own allocation and the partition's completion; an OOM is the fault and the
failed attempt that reports it. :class:`LogFolder` folds them into one :class:`Entry` per
decision (keyed by device, proof and partition) and keeps every event, so selecting the line
shows them all. Byte counts in engine messages ("from a budget of 17179766784") become
MiB/GiB here, at the edge, as everywhere on screen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from provetop.recordings.state import LogLine, phantom_bytes
from provetop.tui.style import size

# "2048 bytes", "free 512", "need 6144 + margin 512 + 180912" (the allocator's arithmetic on
# sizes), or a bare number of 7 digits or more (1 MB and up: only sizes are that large in
# engine messages) that is not a proof, partition, pid, engine or command number. Only a
# number that stands alone as a word is a size: never one inside a path or a name ("free 2.00
# GiB" is a size already; "/recordings/20261206-101500-e.pvtrec", "20261206.pvtrec",
# "host-20261206", "gpu0:12345678" keep their digits).
_ALONE_BEFORE = r"(?<![^\s(\[])"  # the word starts the text, or follows a space or a bracket
_ALONE_AFTER = r"(?=$|[\s),;\]]|[.:](?!\S))"  # it ends there, or before a space or a bracket
_BYTES = re.compile(
    _ALONE_BEFORE + r"(\d+) bytes\b"
    r"|(?:(?<=free )|(?<=need )|(?<=margin )|(?<=[-+<] )|(?<=>= ))(\d+)"
    + _ALONE_AFTER
    + "|"
    + _ALONE_BEFORE
    + r"(?<!proof )(?<!partition )(?<!engine )(?<!pid )(?<!#)(\d{7,})"
    + _ALONE_AFTER
)
RECENT = 200  # entries a later event may still fold into
# what folds lines into one entry: (decision, device, proof, partition)
DecisionKey = tuple[str, int | None, int, int | None]


def humanise(text: str) -> str:
    """``text`` with its byte counts as MiB/GiB (see ``_BYTES``)."""

    def one(match: re.Match[str]) -> str:
        return size(int(match.group(1) or match.group(2) or match.group(3)))

    return _BYTES.sub(one, text)


@dataclass
class Entry:
    """One line of the event log: a decision, its time, and the events it stands for."""

    t: int
    level: str  # "info", "warn", "error"
    text: str
    events: list[dict[str, Any]] = field(default_factory=list)
    version: int = 0  # bumped when the text changes (the widget wraps it again)


def _of_a_partition(e: dict[str, Any]) -> bool:
    """An event's proof, partition and worker are -1 when it belongs to the run, not to a
    partition (the SRS's ``alloc`` events on CUDA)."""
    proof = e.get("proof")
    return proof is not None and proof >= 0


def place_of(e: dict[str, Any], lane_stride: int = 0) -> str:
    """Where an event happened: ``gpu0 w1``; a traced process's lane as the memory panel names
    it, its GPU and its pid (``gpu0 pid 4242``: lanes of one GPU differ by ``lane_stride``)."""
    parts = []
    if e.get("device") is not None and isinstance(e.get("pid"), int) and lane_stride > 0:
        device = e["device"] % lane_stride if e["device"] >= 0 else e["device"]
        parts.append(f"gpu{device} pid {e['pid']}")
    elif e.get("device") is not None:
        worker = e.get("worker")
        mine = worker is not None and worker >= 0
        parts.append(f"gpu{e['device']}" + (f" w{worker}" if mine else ""))
    if _of_a_partition(e):
        parts.append(f"proof {e['proof']} partition {e.get('partition')}")
    return " ".join(parts)


def _key(kind: str, e: dict[str, Any]) -> DecisionKey | None:
    if not _of_a_partition(e):
        return None
    return (kind, e.get("device"), e["proof"], e.get("partition"))


def describe(line: LogLine, lane_stride: int = 0) -> tuple[str, str, DecisionKey | None, bool]:
    """(level, text, decision key, whether it only adds to an earlier line of that key);
    ``lane_stride``: a trace's (its hello's config), 0 for an engine."""
    e = line.event
    text = humanise(line.text)
    if not e:
        return line.level, text, None, False
    kind = e.get("k")
    if kind == "alloc" and e.get("decision") in ("skip", "fallback"):
        what = "pre-stage skipped" if e["decision"] == "skip" else "fallback"
        if e.get("site") not in (None, "prestage"):
            what += f" at {e['site']}"
        reason = humanise(str(e.get("reason") or "no reason given"))
        text = (
            f"{place_of(e, lane_stride)}: {what}: {reason} ({size(e.get('requested'))} requested)"
        )
        return line.level, text, _key("prestage", e), False
    if kind == "alloc" and e.get("site") == "handover":
        reason = humanise(str(e.get("reason") or ""))
        return (
            "info",
            f"{place_of(e, lane_stride)}: a handed over: {reason}",
            _key("prestage", e),
            True,
        )
    if kind == "alloc":
        return line.level, text, None, False
    if kind == "partition_done" and e.get("ok") and e.get("prestage") == "fallback":
        return line.level, text, _key("prestage", e), True
    if kind == "partition_done" and not e.get("ok"):
        return line.level, text, _key("failure", e), True
    if kind == "fault":
        pools = e.get("pools") or {}
        where = place_of(e, lane_stride)
        text = f"{str(e.get('kind', 'fault')).upper()} {where}: {humanise(str(e['message']))}"
        text = text.replace(" : ", ": ")
        if e.get("requested"):
            text += f"; {size(e['requested'])} requested"
        if pools:
            peers = e.get("peers_unused") or {}
            held = sum(v for v in peers.values() if isinstance(v, int))
            text += f"; phantom {size(phantom_bytes(pools))}" + (
                f" here, {size(held)} in other processes" if held else ""
            )
            text += f", driver free {size(pools.get('driver_free'))}"
        return line.level, text, _key("failure", e), False
    return line.level, text, None, False


class LogFolder:
    """Folds log lines into entries, one per decision (see the module docstring)."""

    def __init__(self, limit: int = 2000) -> None:
        self.entries: list[Entry] = []
        self.limit = limit
        self.dropped = 0  # entries dropped from the front (for the widget's bookkeeping)
        self._open: dict[DecisionKey, Entry] = {}
        self.lane_stride = 0  # a trace's hello sets it (its lanes' names)

    def add(self, line: LogLine) -> Entry | None:
        """Fold one line; the entry it created, or None when it joined an earlier one (whose
        ``version`` is bumped if its text changed)."""
        if line.event is not None and line.event.get("k") == "hello":
            stride = (line.event.get("config") or {}).get("lane_stride")
            self.lane_stride = stride if isinstance(stride, int) and stride > 0 else 0
        level, text, key, joins = describe(line, self.lane_stride)
        event = line.event
        earlier = self._open.get(key) if key is not None else None
        if key is not None and earlier is not None and (joins or key[0] == "prestage"):
            if event is not None:
                earlier.events.append(event)
            if event and event.get("k") == "alloc" and event.get("site") == "handover":
                suffix = " → a went up under the previous partition's MSM pass"
                if not earlier.text.endswith(suffix):
                    earlier.text += suffix
                    earlier.version += 1
            if key[0] == "failure" and event and event.get("will_retry"):
                suffix = " → retried on the fallback path"
                if not earlier.text.endswith(suffix):
                    earlier.text += suffix
                    earlier.version += 1
            return None
        entry = Entry(line.t, level, text, [event] if event is not None else [])
        self.entries.append(entry)
        if key is not None:
            self._open[key] = entry
        if len(self.entries) > self.limit:
            cut = len(self.entries) - self.limit
            gone = self.entries[:cut]
            del self.entries[:cut]
            self.dropped += cut
            self._forget(gone)
        if len(self._open) > RECENT:
            for k in list(self._open)[: len(self._open) - RECENT]:
                del self._open[k]
        return entry

    def _forget(self, gone: list[Entry]) -> None:
        ids = {id(e) for e in gone}
        for k in [k for k, v in self._open.items() if id(v) in ids]:
            del self._open[k]
