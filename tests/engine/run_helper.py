"""Run an in-process engine (no socket) to its end, for tests that read its events."""

from __future__ import annotations

from typing import Any


def run_engine(cfg: Any, timeout: float = 60, **kw: Any) -> tuple[Any, list[dict[str, Any]]]:
    """(the closed engine, every event it emitted); ``kw`` goes to ``Engine``."""
    from engine.runner import Engine

    engine = Engine(cfg, listen=False, **kw)
    sub = engine.subscribe("test")
    engine.start()
    assert engine.wait(timeout), "the engine did not finish"
    engine.close()
    return engine, sub.drain()
