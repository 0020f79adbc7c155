"""The run's one tuning record: every ``PROVETOP_*`` setting, read and checked once.

The command line builds it with :meth:`Tuning.from_env` before anything starts (a bad value is
one line and exit code 2), and passes it to :class:`provetop.engine.run.runner.Engine`, which hands
the
kernel part to the backend and writes :meth:`Tuning.as_dict` into the run's ``hello`` event, so
an A/B run records differently from a default one. ``engine/README.md``'s table of variables
is :func:`markdown_table`'s output; ``tests/engine/test_tuning.py`` compares them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from provetop.kernels.tuning import SETTINGS as KERNEL_SETTINGS
from provetop.kernels.tuning import KernelTuning, Setting, SettingError, read
from provetop.kernels.tuning import markdown_table as _markdown_table

# Defaults owned here, read by the modules they configure (engine/run/heap.py,
# engine/telemetry/server.py).
HEAP_TRIM_EVERY_S = 30.0  # PROVETOP_HEAP_TRIM_S: malloc_trim every 30 s; 0: off
# New connections are accepted at most ACCEPT_RATE a second once a burst of ACCEPT_BURST is
# spent; the rest wait in the kernel's backlog (their connect() waits). Each connection costs
# the engine ~0.3 ms of CPU and several GIL hand-offs on threads the workers share the GIL
# with, so an unpaced connect/close storm from one process took 20-50 % off the workers'
# speed on a 2-core machine (docs/reliability.md, "Soak"). An operator's clients (a dashboard
# or two, ``provetop top``, a reconnect after a restart) stay far inside either figure.
ACCEPT_RATE = 100.0
ACCEPT_BURST = 32


# A short switch interval lets a worker waiting to launch its next kernel get the GIL soon:
# 0.5 ms, against the interpreter's 5 ms default (docs/architecture.md, "GIL").
DEFAULT_SWITCH_INTERVAL_S = 0.0005


def _number_in(
    env: str, what: str, lo: float, hi: float, *, open_low: bool = False
) -> Callable[[str], float]:
    """A parser of ``env``'s value: a number in [lo, hi] ((lo, hi] with ``open_low``), or a
    :class:`SettingError` naming the variable (nan is refused too)."""
    interval = f"{'(' if open_low else '['}{lo:g}, {hi:g}]"

    def parse(raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            value = float("nan")
        low_ok = value > lo if open_low else value >= lo
        if not (low_ok and value <= hi):  # also false for nan
            raise SettingError(f"{env} must be {what} in {interval}, got {raw!r}")
        return value

    return parse


def _optional_text(raw: str) -> str | None:
    return raw.strip() or None


ENGINE_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "PROVETOP_SWITCH_INTERVAL",
        "switch_interval_s",
        _number_in("PROVETOP_SWITCH_INTERVAL", "seconds", 0, 1, open_low=True),
        "seconds in (0, 1] (default 0.0005)",
        "the interpreter's thread switch interval during a CUDA run "
        "(`sys.setswitchinterval`): short, so a worker waiting to launch its next kernel gets "
        "the GIL soon",
    ),
    Setting(
        "PROVETOP_HEAP_TRIM_S",
        "heap_trim_s",
        _number_in("PROVETOP_HEAP_TRIM_S", "seconds", 0, 3600),
        f"seconds in [0, 3600] (default {HEAP_TRIM_EVERY_S:g}; 0: off)",
        "how often the engine gives the C heap's free pages back (`malloc_trim`, glibc): "
        "RSS stays flat over a long run (`engine/run/heap.py`)",
    ),
    Setting(
        "PROVETOP_ACCEPT_RATE",
        "accept_rate",
        _number_in("PROVETOP_ACCEPT_RATE", "connections a second", 0, 100_000),
        f"connections a second in [0, 100000] (default {ACCEPT_RATE:g}; 0: unpaced)",
        f"how fast the telemetry listener accepts new connections after a burst of "
        f"{ACCEPT_BURST}; the rest wait in the kernel's backlog, so a connect/close storm "
        "cannot take the workers' time (`engine/telemetry/server.py`)",
    ),
    Setting(
        "PROVETOP_INJECT",
        "inject",
        _optional_text,
        "a fault spec (default none)",
        "fault injection, the default of `--inject` (docs/reliability.md)",
    ),
)

SETTINGS: tuple[Setting, ...] = KERNEL_SETTINGS + ENGINE_SETTINGS


@dataclass(frozen=True)
class Tuning:
    """Engine settings plus the kernels' (:class:`provetop.kernels.tuning.KernelTuning`)."""

    kernels: KernelTuning = field(default_factory=KernelTuning)
    switch_interval_s: float = DEFAULT_SWITCH_INTERVAL_S
    heap_trim_s: float = HEAP_TRIM_EVERY_S
    accept_rate: float = ACCEPT_RATE
    inject: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Tuning:
        """Every setting from ``environ`` (default ``os.environ``), checked; raises
        :class:`provetop.kernels.tuning.SettingError` naming the first bad variable."""
        env = os.environ if environ is None else environ
        return cls(kernels=KernelTuning.from_env(env), **read(ENGINE_SETTINGS, env))

    def as_dict(self) -> dict[str, Any]:
        """Plain values (msgpack and JSON safe), the kernels' nested under ``kernels``."""
        return {
            "kernels": self.kernels.as_dict(),
            "switch_interval_s": self.switch_interval_s,
            "heap_trim_s": self.heap_trim_s,
            "accept_rate": self.accept_rate,
            "inject": self.inject,
        }


def markdown_table() -> str:
    """The table of every ``PROVETOP_*`` variable, as ``engine/README.md`` carries it."""
    return _markdown_table(SETTINGS)


__all__ = ["SETTINGS", "SettingError", "Tuning", "markdown_table"]
