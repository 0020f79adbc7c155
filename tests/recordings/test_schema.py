"""The telemetry schema, its documentation and the reducer agree."""

from pathlib import Path

import msgpack
import pytest

from provetop.recordings.schema import EVENTS, SchemaError, make, markdown_tables, validate
from provetop.recordings.state import State, phantom_bytes

DOC = Path(__file__).resolve().parents[2] / "docs" / "telemetry.md"


def test_docs_match_schema():
    assert markdown_tables() in DOC.read_text(), (
        "regenerate with: python -m provetop.recordings.schema"
    )


def _hello(t=0):
    return make(
        "hello",
        t,
        schema=1,
        engine_id="e",
        host="h",
        version="0",
        source="provetop",
        backend="cpu",
        modeled=True,
        devices=[{"index": 0, "name": "modeled", "capacity": 16 << 30, "modeled": True}],
        config={},
        wall_ns=0,
        read_only=False,
    )


@pytest.mark.parametrize(
    "event, message",
    [
        ([], "not a map"),
        ({"k": "nope", "t": 0}, "unknown event kind"),
        ({"k": "marker", "t": "0", "name": "x"}, "'t' must be an integer"),
        ({"k": "marker", "t": 0}, "missing field 'name'"),
        ({"k": "marker", "t": 0, "name": 3}, "field 'name' must be str"),
        ({"k": "lag", "t": 0, "missed": True}, "got a bool"),
        (
            {
                "k": "phase_begin",
                "t": 0,
                "proof": 0,
                "partition": 0,
                "worker": 0,
                "device": 0,
                "phase": "dance",
            },
            "unknown phase",
        ),
    ],
)
def test_validate_rejects_with_a_named_problem(event, message):
    with pytest.raises(SchemaError, match=message):
        validate(event)


def test_every_kind_has_documented_fields():
    for kind, fields in EVENTS.items():
        assert fields, kind
        for name, spec in fields.items():
            assert spec.doc, (kind, name)


def _partition(state_events, t, proof, part, worker, ok=True, attempt=0, prestage="ok"):
    for phase in ("synthesis", "upload", "h_step", "msm_h"):
        state_events.append(
            make(
                "phase_begin", t, proof=proof, partition=part, worker=worker, device=0, phase=phase
            )
        )
        t += 10
        state_events.append(
            make(
                "phase_end",
                t,
                proof=proof,
                partition=part,
                worker=worker,
                device=0,
                phase=phase,
                ok=True,
            )
        )
    state_events.append(
        make(
            "partition_done",
            t,
            proof=proof,
            partition=part,
            worker=worker,
            device=0,
            attempt=attempt,
            ok=ok,
            phases_ms={"h_step": 1.0, "msm_h": 2.0},
            gpu_total_ms=3.0,
            mutex_wait_ms=0.5,
            prestage=prestage,
            verified=ok or None,
            failure=None if ok else "oom",
            will_retry=not ok,
        )
    )
    return t


def test_reducer_partitions_lanes_and_snapshot_round_trip():
    events = [_hello()]
    t = _partition(events, 100, 0, 0, 0)
    t = _partition(events, t, 0, 1, 1, ok=False)
    t = _partition(events, t, 0, 1, 1, attempt=1, prestage="fallback")
    events.append(make("proof_done", t + 1, proof=0, ok=True, wall_ms=1.0))
    state = State().fold(events)
    totals = state.totals()
    assert totals["partitions"] == 2 and totals["partitions_ok"] == 2
    assert totals["attempts"] == 3 and totals["retries"] == 1 and totals["fallbacks"] == 1
    assert state.partitions[(0, 1)].retried and state.partitions[(0, 1)].attempt == 1
    assert ("gpu", 0) in state.lanes() and ("upload", 0) in state.lanes()
    # GPU lane is busy exactly during h_step and msm_h: 2 x 10 ns per attempt, 3 attempts
    assert state.busy_fraction(0, 100, t) == pytest.approx(60 / (t - 100))
    snap = msgpack.unpackb(msgpack.packb(state.snapshot()), raw=False)
    again = State().fold([make("snapshot", t + 2, state=snap)])
    assert again.totals() == totals
    assert [vars(r) for r in again.partitions.values()] == [
        vars(r) for r in state.partitions.values()
    ]


def test_phantom_bytes():
    assert phantom_bytes({"async_reserved": 10, "async_used": 4, "sync_cached": 3}) == 9
    assert phantom_bytes({}) == 0
