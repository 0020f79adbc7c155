"""What the dashboard keeps per watched engine (:class:`EngineView`) and per replay
(:class:`ReplayState`), and the small readings of a source the app and its header share.

Why apart from the app: they are plain data and pure functions of a source; the app
(:mod:`provetop.tui.app`) drives them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from provetop.recordings.state import State
from provetop.sources.protocol import EventSource, MachineMonitor, Reconnecting
from provetop.sources.replay import FileReplaySource
from provetop.sources.replay_memory import ReplaySource


def reason_of(text: str) -> str:
    """The reason inside a status text ``state (reason)``."""
    return text.partition(" (")[2].removesuffix(")") or text


def conn_text(view: EngineView) -> str:
    """The header's connection state of a view: while a source waits to retry, how many
    attempts failed and when the next one is."""
    source = view.source
    if not isinstance(source, Reconnecting):
        return view.conn
    retry_at = source.retry_at
    if view.conn in ("unreachable", "reconnecting", "disconnected") and retry_at is not None:
        left = max(0.0, retry_at - time.monotonic())
        return f"{view.conn}, {source.failures} tries, next in {left:.0f} s"
    return view.conn


def retry_waiting(source: EventSource) -> bool:
    """Whether ``source`` waits to retry a connection (the header counts down)."""
    return isinstance(source, Reconnecting) and bool(source.retry_at)


def is_monitor(source: EventSource) -> bool:
    """Whether ``source`` is the machine's view (its GPUs), not an engine's."""
    return isinstance(source, MachineMonitor) and source.monitor


@dataclass
class EngineView:
    """One watched engine: its source, its reduced state and its connection."""

    source: EventSource
    state: State = field(default_factory=State)
    conn: str = "connecting"
    last_event_at: float = 0.0  # time.monotonic() of the last batch
    pending: dict[int, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    sessions: int = 0
    discovered: str | None = None  # the socket path, for an engine attached by discovery


@dataclass
class ReplayState:
    source: FileReplaySource | ReplaySource
    position: int = 0
    index: int = 0
    speed: float = 1.0
    playing: bool = False
    window: int = 0  # history folded at the last seek
