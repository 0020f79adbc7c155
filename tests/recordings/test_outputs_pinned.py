"""The outputs of the sample recordings, pinned byte for byte: ``summary`` (its stored text), the
Perfetto export and ``/metrics``.

Why pinned: these functions are reshaped from time to time (split into steps, their helpers
moved), and a reshaping must not change a byte of what they write. An intended change of output
updates the stored summaries (``provetop summary FILE``) or the digests below; print the
current digests with ``python -m tests.recordings.test_outputs_pinned``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from provetop.recordings.export_perfetto import export_perfetto, trace_from_state
from provetop.recordings.prometheus.fold import MetricsFold
from provetop.recordings.reader import open_recording
from provetop.recordings.state import State
from provetop.recordings.summary import build_summary, format_summary, summarize_state
from tests.recordings.fixtures import make_run

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = sorted((ROOT / "recordings" / "samples").glob("*.pvtrec"))

# sample -> (Perfetto export, /metrics) sha256, first 16 hex digits
DIGESTS = {
    "h100-trace-torch-cupy-heal": ("1db29d2fbfc7c25e", "542a1b3ee843b5ae"),
    "h100-trace-torch-cupy": ("aa00a3732d3313e2", "56bbce5bd4e0b9eb"),
    "h200-porep32g-ahead": ("2c67513d894d82ee", "7e50b11c855a5e1b"),
    "h200-porep32g-aware": ("e5ea305a82e3b780", "1e565d75534cd7a0"),
    "h200-porep32g-aware12": ("990b70f87c7a1056", "7c7d3b2a0fcc07d9"),
    "h200-porep32g-aware16": ("d42d3de319a604d5", "a8717b28e646ec7c"),
    "h200-porep32g-aware8": ("f6279b4e1b2ac724", "a7ccc7bac8b1ddb6"),
    "h200-porep32g-naive16": ("03cf2bb6adfc6fd5", "f2a0e9b1683836fc"),
    "h200x2-porep32g-multi": ("2a465decddccdadb", "e8b9f5296fc355ac"),
}
# a fixture run (an OOM retried on the fallback path, a marker, controls): export, summary, /metrics
FIXTURE_RUN = ("f847b5703bca925e", "a34f54edb70579ff", "a80dcd0ed4ebae78")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def perfetto_bytes(path: Path) -> bytes:
    """The export as ``provetop export --format perfetto`` writes it, the file's own path left
    out (it names where the recording lies)."""
    trace = export_perfetto(path)
    trace["otherData"]["recording"] = path.name
    return json.dumps(trace, separators=(",", ":"), allow_nan=False).encode()


def metrics_bytes(path: Path) -> bytes:
    return MetricsFold().fold(open_recording(path).events).render()


def fixture_run_digests() -> tuple[str, str, str]:
    events = make_run(partitions=4, workers=2, devices=2, proofs=3, seed=20261204)
    state = State().fold(events)
    trace = json.dumps(trace_from_state(state), separators=(",", ":"), allow_nan=False)
    summary = format_summary(summarize_state(state))
    metrics = MetricsFold().fold(events).render()
    return _sha(trace.encode()), _sha(summary.encode()), _sha(metrics)


def test_every_sample_is_pinned():
    assert sorted(DIGESTS) == sorted(p.stem for p in SAMPLES)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_the_summary_of_a_sample_is_its_stored_text(path):
    summary = build_summary(path)
    summary["file"] = str(path.relative_to(ROOT))  # as it was run, from the repository root
    assert format_summary(summary) == path.with_suffix(".summary.txt").read_text()


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_the_perfetto_export_and_metrics_of_a_sample_are_unchanged(path):
    assert (_sha(perfetto_bytes(path)), _sha(metrics_bytes(path))) == DIGESTS[path.stem]


def test_the_outputs_of_a_fixture_run_are_unchanged():
    assert fixture_run_digests() == FIXTURE_RUN


if __name__ == "__main__":
    print(f"FIXTURE_RUN = {fixture_run_digests()}".replace("'", '"'))
    for p in SAMPLES:
        print(f'    "{p.stem}": ("{_sha(perfetto_bytes(p))}", "{_sha(metrics_bytes(p))}"),')
