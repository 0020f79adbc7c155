"""A real Prometheus over the scrapes of a recorded run, to evaluate PromQL against.

Why Prometheus itself and not an evaluator of our own: the questions asked of ``/metrics`` are
how Prometheus reads it (``increase()`` over a series that appears mid-run, ``rate()``
windows, ``histogram_quantile``), so the answers come from Debian's ``prometheus`` and
``promtool``. A recorded run is folded as the engine folds its bus; the fold's families are
taken every ``step`` of the run's own time, as a scraper would see them, written as one
OpenMetrics file with the scrape times, and backfilled into a TSDB (``promtool tsdb
create-blocks-from openmetrics``) that a Prometheus started on it answers queries from. It
needs no network and takes a few seconds.

:func:`require` raises :class:`PrometheusUnavailable` with the reason where either binary is
missing.
"""

from __future__ import annotations

import json
import math
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client.core import Metric

from provetop.recordings.prometheus.fold import MetricsFold

INSTANCE = "recorded"
JOB = "provetop"
START_TIMEOUT_S = 30.0


class PrometheusUnavailable(RuntimeError):
    """No prometheus or promtool on PATH: the reason in words."""


def require() -> tuple[str, str]:
    """(prometheus, promtool), or :class:`PrometheusUnavailable`."""
    found = [shutil.which(name) for name in ("prometheus", "promtool")]
    if not all(found):
        raise PrometheusUnavailable(
            "no prometheus/promtool on PATH (Debian: apt-get install prometheus)"
        )
    return found[0] or "", found[1] or ""


def scrapes(events: Iterable[dict[str, Any]], step_ns: int) -> list[tuple[int, list[Metric]]]:
    """(scrape time in ms since the epoch, the families a scrape then returns) every
    ``step_ns`` of the run's time, from before its first event to after its last."""
    out: list[tuple[int, list[Metric]]] = []
    fold = MetricsFold()
    wall = 0
    next_t: int | None = None
    for event in events:
        if event.get("k") == "hello" and isinstance(event.get("wall_ns"), int):
            wall = event["wall_ns"]
        t = event.get("t", 0)
        if next_t is None:
            next_t = t
            out.append(((wall + t) // 1_000_000 - 1, fold.families()))
        while t > next_t:
            out.append(((wall + next_t) // 1_000_000, fold.families()))
            next_t += step_ns
        fold.apply(event)
    last = next_t if next_t is not None else 0
    out.append(((wall + last) // 1_000_000, fold.families()))
    return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def openmetrics(points: list[tuple[int, list[Metric]]]) -> str:
    """The scrapes as one OpenMetrics text: each family once, each series' samples in time
    order, labelled with the scrape's ``job`` and ``instance``."""
    families: dict[str, tuple[str, str]] = {}
    series: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, float]]]] = {}
    for ts, fams in points:
        for fam in fams:
            families.setdefault(fam.name, (fam.type, fam.documentation))
            per = series.setdefault(fam.name, {})
            for s in fam.samples:
                key = (s.name, tuple(sorted(s.labels.items())))
                per.setdefault(key, []).append((ts, s.value))
    lines: list[str] = []
    for name, (kind, doc) in families.items():
        lines.append(f"# TYPE {name} {kind}")
        lines.append(f"# HELP {name} {_escape(doc)}")
        for (sample, labels), values in series[name].items():
            pairs = [("instance", INSTANCE), ("job", JOB), *labels]
            text = ",".join(f'{k}="{_escape(str(v))}"' for k, v in pairs)
            for ts, value in values:
                lines.append(f"{sample}{{{text}}} {_number(value)} {ts / 1000:.3f}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


class Prometheus:
    """A started Prometheus: :meth:`query` at an instant."""

    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, expr: str, at_ms: int) -> list[dict[str, Any]]:
        """The instant vector (or scalar, as one element) ``expr`` evaluates to at ``at_ms``;
        ``RuntimeError`` with Prometheus's message when it refuses the expression."""
        params = urllib.parse.urlencode({"query": expr, "time": f"{at_ms / 1000:.3f}"})
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/query?{params}", timeout=30) as r:
                body = json.load(r)
        except urllib.error.HTTPError as exc:
            body = json.load(exc)
        if body.get("status") != "success":
            raise RuntimeError(f"{expr}: {body.get('errorType')}: {body.get('error')}")
        data = body["data"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serve(
    storage: Path, config: str = "scrape_configs: []\n", log: Path | None = None
) -> Iterator[Prometheus]:
    """Prometheus on ``storage`` (blocks already there are read) with ``config``, on a free
    loopback port, stopped afterwards."""
    prometheus, _ = require()
    cfg = storage.parent / f"{storage.name}.yml"
    cfg.write_text(config)
    port = _free_port()
    argv = [
        prometheus,
        f"--config.file={cfg}",
        f"--storage.tsdb.path={storage}",
        "--storage.tsdb.retention.time=100y",  # the samples are dated when they were recorded
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    out = log.open("wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"prometheus not ready in {START_TIMEOUT_S:.0f} s")
            time.sleep(0.1)
        yield Prometheus(url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log and out is not subprocess.DEVNULL:
            out.close()  # type: ignore[union-attr]


@contextmanager
def over_recording(
    events: Iterable[dict[str, Any]], step_ns: int
) -> Iterator[tuple[Prometheus, list[int]]]:
    """A Prometheus holding the scrapes of a recorded run, and the scrape times (ms)."""
    _, promtool = require()
    points = scrapes(events, step_ns)
    with tempfile.TemporaryDirectory(prefix="provetop-prometheus-") as tmp:
        source = Path(tmp) / "scrapes.om"
        source.write_text(openmetrics(points))
        storage = Path(tmp) / "data"
        done = subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(source),
             str(storage)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"promtool: {done.stderr.strip() or done.stdout.strip()}")
        with serve(storage) as prom:
            yield prom, [ts for ts, _ in points]
