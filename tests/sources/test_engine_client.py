"""A live engine read through the sources package over a real socket: the one client
(:class:`provetop.sources.client.EngineClient`) and the dashboard's live source on top of it,
against
an in-process engine on the cpu backend."""

from __future__ import annotations

import threading
import time

import pytest

from provetop.recordings.address import AddressError
from provetop.recordings.state import State
from provetop.sources.client import EngineClient
from provetop.sources.cuzk.convert import SYNTH_WORKER_BASE
from provetop.sources.live import LiveSource
from tests.engine.run_helper import serving_engine
from tests.sources.helpers import Collect


@pytest.fixture
def engine():
    with serving_engine(proofs=2) as eng:
        yield eng


def test_client_reads_the_engine_and_sends_a_command(engine):
    with EngineClient(engine.address, timeout=30) as client:
        first = client.next_event()
        assert first is not None and first["k"] == "hello"
        cid = client.command("marker", {"name": "from-a-script"})
        state = State()
        state.apply(first)
        acked = False
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (acked and engine.wait(0)):
            frames = client.read(0.2)
            assert frames is not None, "the engine closed the connection"
            for event in frames:
                state.apply(event)
                acked |= event["k"] == "control" and event["id"] == cid and event["ok"]
        assert acked
        assert any(name == "from-a-script" for _, name in state.markers)


def test_live_source_folds_a_whole_run(engine):
    source = LiveSource(engine.address, reconnect=False)
    sink = Collect()
    reader = threading.Thread(target=source.run, args=(sink,), daemon=True)
    reader.start()
    try:
        assert engine.wait(60), "the engine did not finish"
        deadline = time.monotonic() + 30
        state = State()
        while time.monotonic() < deadline:
            state = State().fold(sink.flat())
            if state.totals()["partitions_ok"] == engine.config.proofs * engine.config.partitions:
                break
            time.sleep(0.1)
    finally:
        source.close()
        reader.join(10)
    assert not reader.is_alive()
    assert state.hello is not None and state.hello["engine_id"] in source.label
    assert state.totals()["partitions_ok"] == engine.config.proofs * engine.config.partitions
    assert sink.statuses[0] == "connected" and sink.statuses[-1] == "closed"
    assert source.invalid_events == 0


def test_client_refuses_the_default_address_and_bad_ones():
    with pytest.raises(ValueError, match="names no socket"):
        EngineClient("unix")
    with pytest.raises(AddressError, match="unsupported address"):
        EngineClient("http://127.0.0.1:1")


def test_cuzk_synthesis_lanes_are_the_engines():
    from provetop.engine.settings.config import SYNTH_LANE_BASE

    assert SYNTH_WORKER_BASE == SYNTH_LANE_BASE
