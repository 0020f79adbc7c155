"""In-process engines for tests: one run to its end without a socket (its events read from the
bus), or one serving its socket on the cpu backend for the tests of its clients."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def run_engine(cfg: Any, timeout: float = 60, **kw: Any) -> tuple[Any, list[dict[str, Any]]]:
    """(the closed engine, every event it emitted); ``kw`` goes to ``Engine``."""
    from provetop.engine.run.runner import Engine

    engine = Engine(cfg, listen=False, **kw)
    sub = engine.subscribe("test")
    engine.start()
    assert engine.wait(timeout), "the engine did not finish"
    engine.close()
    return engine, sub.drain()


@contextmanager
def serving_engine(proofs: int = 100_000, **overrides: Any) -> Iterator[Any]:
    """A started cpu engine of the ``ci`` preset listening on a private Unix socket (its
    ``address``), stopped and closed afterwards. The default proof count outlasts any test."""
    from provetop.engine.run.runner import Engine
    from provetop.engine.settings.config import from_preset

    engine = Engine(
        from_preset("ci", backend="cpu", proofs=proofs, **overrides), listen=None, record=None
    )
    engine.start()
    try:
        yield engine
    finally:
        engine.stop("test over")
        engine.close()
