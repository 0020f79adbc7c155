"""A backend wrapper that lets a test (or a demo) hold partitions at chosen points.

Why: scheduling properties (mutex exclusivity, pause, a forced fallback taking effect on the
*next* partition) are about order, and order on a fast CPU backend is up to the OS scheduler.
Wrapping the real backend with gates and delays makes the order explicit while the arithmetic
stays real and is still verified.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from provetop.kernels.backend import KernelBackend


class GatedBackend:
    """Delegates to ``inner``; ``h_step`` first sleeps ``delay_s`` and, when ``gate`` is set
    up with :meth:`hold`, waits until :meth:`release`. ``entered`` counts h_step calls."""

    def __init__(self, inner: KernelBackend, delay_s: float = 0.0) -> None:
        self.inner = inner
        self.name = inner.name
        self.delay_s = delay_s
        self._gate = threading.Event()
        self._gate.set()
        self._cv = threading.Condition()
        self.entered = 0

    def hold(self) -> None:
        """Make the next h_step calls wait for :meth:`release`."""
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    def wait_entered(self, count: int, timeout: float = 30.0) -> bool:
        """Block until ``count`` h_step calls have started."""
        with self._cv:
            return self._cv.wait_for(lambda: self.entered >= count, timeout)

    def h_step(self, a: Any, b: Any, c: Any, **kw: Any) -> Any:
        with self._cv:
            self.entered += 1
            self._cv.notify_all()
        if self.delay_s:
            time.sleep(self.delay_s)
        if not self._gate.wait(60):
            raise TimeoutError("GatedBackend: the test never released the gate")
        return self.inner.h_step(a, b, c, **kw)

    def ntt(self, x: Any, **kw: Any) -> Any:
        return self.inner.ntt(x, **kw)

    def msm(self, points: Any, scalars: Any, **kw: Any) -> Any:
        return self.inner.msm(points, scalars, **kw)

    def srs(self, secrets: Any, **kw: Any) -> Any:
        return self.inner.srs(secrets, **kw)
