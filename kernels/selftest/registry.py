"""The self-test's vocabulary: a named check, its result, and how one is run.

Why its own module: the rows (``rows_cpu``, ``rows_backend``, ``rows_cuda``) and the runner all
need these types, and the product modules need none of them, so nothing here imports a kernel.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Check:
    """One named check; ``run`` raises AssertionError (with a message) on a mismatch."""

    name: str
    size: int
    run: Callable[[], None]


@dataclass
class CheckResult:
    name: str
    size: int
    status: str  # "pass", "FAIL", "skip" (a needed optional package is missing) or "ERROR"
    seconds: float
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("pass", "skip")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SkipCheck(Exception):
    """Raised by a check that cannot run here (an optional package is missing)."""


def run_check(check: Check) -> CheckResult:
    """Run one check, timing it; never raises."""
    t0 = time.perf_counter()
    try:
        check.run()
        status, detail = "pass", ""
    except SkipCheck as exc:
        status, detail = "skip", str(exc)
    except AssertionError as exc:
        status, detail = "FAIL", str(exc) or "assertion failed"
    except Exception as exc:  # a crash is a failure too, with its place
        tb = traceback.extract_tb(exc.__traceback__)[-1]
        status = "ERROR"
        detail = f"{type(exc).__name__}: {exc} ({tb.filename}:{tb.lineno})"
    return CheckResult(check.name, check.size, status, time.perf_counter() - t0, detail)
