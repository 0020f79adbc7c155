"""The deterministic producers, pinned byte for byte: the synthetic engine run, the modeled cuzk
daemon and the cuzk converter's events (from the log and from ``/status`` alone).

Why pinned: the dashboard's snapshots, the benchmarks and the converter's tests all stand on
these outputs, and the functions are reshaped from time to time (split into steps, helpers
moved); a reshaping must not change a byte. After an intended change print the new digests with
``python -m tests.sources.test_outputs_pinned`` and paste them below.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

from provetop.sources.cuzk import sim
from provetop.sources.cuzk.convert import Converter
from provetop.sources.synthetic import generate

CUZK = Path(__file__).resolve().parents[1] / "fixtures" / "cuzk"

GENERATE = {
    "default": {},
    "oom-cuda-markers": dict(
        devices=3, workers=2, duration_s=6.0, oom_every=5, backend="cuda",
        markers=((2.0, "warm"), (4.5, "late")),
    ),
    "slow-read-only": dict(time_scale=3.0, oom_every=0, read_only=True, memory_hz=4.0),
}  # fmt: skip
SIM_SEEDS = range(6)

# case -> sha256 of its output, first 16 hex digits
DIGESTS = {
    "generate default": "807513f3741f009d",
    "generate oom-cuda-markers": "20535ff7b77b433b",
    "generate slow-read-only": "08088ebaa5e13ad0",
    "sim 0": "f2f0399041d1e8a5",
    "convert log 0": "25d3078d0e531564",
    "convert status 0": "dd1dcaf451185a8e",
    "sim 1": "78851afce8851145",
    "convert log 1": "3d77fbd879564b9c",
    "convert status 1": "2879ef260d5e85f2",
    "sim 2": "56e276737aab3e60",
    "convert log 2": "f1eafbcc531652e5",
    "convert status 2": "598deaab5e20fd57",
    "sim 3": "d3d82da7f2d42e86",
    "convert log 3": "2bd48117f73ae379",
    "convert status 3": "290e998359491905",
    "sim 4": "b9775b6fd2ea6210",
    "convert log 4": "bad6253b3ce9817b",
    "convert status 4": "ae924fe6e7b332a1",
    "sim 5": "e788205a35d17513",
    "convert log 5": "cf84c8b7de0de870",
    "convert status 5": "265571ab5df9a637",
    "convert fixture": "34f74d74b941b0c6",
}


def _sha(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, default=repr).encode()).hexdigest()[:16]


def _model(seed: int) -> sim.Run:
    """A modeled daemon run: every pre-stage scenario (failures included) from seed 1 on, one
    to three workers, with and without tracing lines and garbage."""
    rng = random.Random(seed)
    scenarios = {}
    if seed:
        kinds = (*sim.SCENARIOS, sim.FAIL_OOM)
        scenarios = {(j, p): rng.choice(kinds) for j in range(3) for p in range(5)}
    return sim.simulate(
        rng, jobs=3, partitions=5, workers_per_device=1 + seed % 3, scenarios=scenarios,
        synth_workers=2 + seed % 3, trace=seed != 1, noise=seed % 2 == 0,
    )  # fmt: skip


def _from_log(run: sim.Run) -> tuple[list[dict], dict]:
    conv = Converter(workers_per_device=run.workers_per_device, wall_ns=sim.BASE_WALL_NS, host="h")
    events = conv.begin()
    for line in run.lines:
        events += conv.feed_line(line)
    events += conv.flush()
    return events, dict(conv.stats)


def _from_status(run: sim.Run) -> list[dict]:
    conv = Converter(workers_per_device=run.workers_per_device, wall_ns=sim.BASE_WALL_NS, host="h")
    events: list[dict] = []
    for t in range(0, max(c.end for c in run.calls) + 500, 250):
        events += conv.feed_status(sim.status_snapshot(run, t))
    return events + conv.flush()


def _fixture() -> list[dict]:
    conv = Converter(workers_per_device=2, wall_ns=1, host="fixture")
    events = conv.begin()
    for line in (CUZK / "daemon.log").read_text(errors="replace").splitlines():
        events += conv.feed_line(line)
    for path in sorted((CUZK / "status").glob("*.json")):
        events += conv.feed_status(json.loads(path.read_text()))
    return events + conv.flush()


def current() -> dict[str, str]:
    out = {f"generate {name}": _sha(generate(**kw)) for name, kw in GENERATE.items()}
    for seed in SIM_SEEDS:
        run = _model(seed)
        out[f"sim {seed}"] = _sha(
            [run.lines, [repr(c) for c in run.calls], sorted(run.failed_jobs)]
        )
        out[f"convert log {seed}"] = _sha(_from_log(run))
        out[f"convert status {seed}"] = _sha(_from_status(run))
    out["convert fixture"] = _sha(_fixture())
    return out


def test_the_producers_outputs_are_unchanged():
    assert current() == DIGESTS


if __name__ == "__main__":
    for case, digest in current().items():
        print(f'    "{case}": "{digest}",')
