"""A stop cannot be undone: ``resume`` (or ``pause``) after ``stop`` is refused with the reason,
and the engine keeps stopping."""

from __future__ import annotations

from provetop.engine.partition.testing import GatedBackend
from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset
from provetop.kernels.backends import get_backend
from provetop.sources.client import EngineClient


def test_resume_after_stop_is_refused_with_a_reason(tmp_path):
    backend = GatedBackend(get_backend("cpu"))
    backend.hold()
    cfg = from_preset("ci", partitions=4, workers_per_device=1)
    engine = Engine(cfg, backend=backend, record=tmp_path / "c.pvtrec")
    engine.start()
    try:
        assert backend.wait_entered(1)
        with EngineClient(engine.address) as client:
            acks = {}
            for cmd in ("stop", "resume", "pause"):
                cid = client.command(cmd)
                while cid not in acks:
                    e = client.next_event(timeout=10)
                    assert e is not None
                    if e["k"] == "control":
                        acks[e["id"]] = e
        stop, resume, pause = (acks[i] for i in sorted(acks))
        assert stop["ok"]
        assert not resume["ok"] and "stopping" in resume["error"]
        assert "cannot be undone" in resume["error"]
        assert not pause["ok"] and "stopping" in pause["error"]
        engine.bus.flush()
        assert engine.state.engine_state == "stopping"
        backend.release()
        assert engine.wait(60)
        assert engine.command("resume")["ok"] is False  # nor once the run is done
        engine.bus.flush()
        assert engine.state.engine_state == "done"
    finally:
        backend.release()
        engine.close()
