"""Which optional capabilities of ``sources/protocol.py`` each source has: the dashboard asks
with ``isinstance``, so a source that lost (or never had) a member would change what the
screen shows without an error anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from provetop.recordings.writer import RecordingWriter
from provetop.sources.cuzk.source import CuzkSource
from provetop.sources.feed import FeedSource
from provetop.sources.live import LiveSource
from provetop.sources.nvml import NvmlSource
from provetop.sources.protocol import (
    Connects,
    EventSource,
    KeepsEvents,
    MachineMonitor,
    Prepares,
    Reconnecting,
)
from provetop.sources.replay import FileReplaySource, open_replay
from provetop.sources.replay_memory import ReplaySource
from provetop.sources.synthetic import generate

CAPABILITIES = (Connects, Reconnecting, KeepsEvents, Prepares, MachineMonitor)


def _recording(tmp_path: Path) -> Path:
    path = tmp_path / "run.pvtrec"
    writer = RecordingWriter(path, snapshot_every_s=3)
    for event in generate(devices=1, duration_s=8, seed=1):
        writer.write(event)
    writer.close()
    return path


def _has(source: object) -> set[str]:
    return {cap.__name__ for cap in CAPABILITIES if isinstance(source, cap)}


def test_each_source_has_the_capabilities_the_dashboard_asks_about(tmp_path: Path):
    live = LiveSource(f"unix:{tmp_path / 'none.sock'}")
    assert isinstance(live, EventSource)
    assert _has(live) == {"Connects", "Reconnecting", "KeepsEvents"}
    assert (live.failures, live.retry_at) == (0, None)
    assert str(live.address) == f"unix:{tmp_path / 'none.sock'}"

    nvml = NvmlSource()
    assert isinstance(nvml, EventSource)
    assert _has(nvml) == {"MachineMonitor"} and nvml.monitor is True

    file_replay = open_replay(_recording(tmp_path))
    try:
        assert isinstance(file_replay, FileReplaySource)
        assert isinstance(file_replay, EventSource)
        assert _has(file_replay) == {"Prepares"}
    finally:
        file_replay.close()

    for source in (
        FeedSource([]),
        ReplaySource([]),
        CuzkSource(str(tmp_path / "cuzk.log")),  # not started: no thread to stop
    ):
        assert isinstance(source, EventSource)
        assert _has(source) == set(), type(source).__name__


@pytest.mark.parametrize("indexed", [True, False])
def test_both_replays_count_their_events(tmp_path: Path, indexed: bool):
    path = _recording(tmp_path)
    if not indexed:  # cut short: no index, read whole
        path.write_bytes(path.read_bytes()[:-64])
    source = open_replay(path)
    try:
        assert isinstance(source, FileReplaySource) == indexed
        if indexed:
            assert source.event_count == len(ReplaySource.open(path).events)
        else:
            assert isinstance(source, ReplaySource)
            assert source.event_count == len(source.events) > 0
    finally:
        source.close()
