"""Fixtures of the recordings tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from provetop.engine.run.runner import Engine
from provetop.engine.settings.config import from_preset

# faults of every kind the engine injects, on two workers (worker 0 killed, its partitions
# handed to worker 1): lanes overlap, OOMs are retried on the fallback path
FAULTS = "alloc:prestage:2,alloc:prestage:7,raise:h_step:1,delay:msm_h:20ms,kill:worker:0"


@pytest.fixture(scope="session")
def fault_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recording of a cpu engine run (ci preset, 2 proofs of 4 partitions) with FAULTS."""
    path = tmp_path_factory.mktemp("faults") / "faults.pvtrec"
    cfg = from_preset("ci", partitions=4, proofs=2, workers_per_device=2)
    engine = Engine(cfg, listen=None, record=path, inject=FAULTS)  # its socket: listener counters
    engine.start()
    assert engine.wait(60), "the engine did not finish"
    engine.close()
    return path
