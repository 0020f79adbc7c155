"""Hostile bytes: the frame decoder and the recording reader raise only their own clear errors.

Random byte strings, random frame streams, and random mutations (bit flips, overwrites, cuts,
insertions, deletions) of a real recording go through the full read path (scan, fold, seek,
summary, export); anything other than FrameError / RecordingError is a bug.
"""

import os
import tempfile
from pathlib import Path

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provetop.recordings.framing import HEADER_SIZE, MAX_FRAME, FrameDecoder, FrameError
from provetop.recordings.reader import RecordingError, fold_recording, open_recording, seek_state
from provetop.recordings.writer import RecordingWriter
from tests.recordings.fixtures import make_run

SETTINGS = settings(
    max_examples=int(os.environ.get("PROVETOP_FUZZ_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _real_recording() -> bytes:
    events = make_run(partitions=2, workers=2, devices=1, proofs=1, seed=7)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "r.pvtrec"
        with RecordingWriter(p, snapshot_every_s=0.03, background_flush=False) as w:
            for e in events[:45]:
                w.write(e)
        return p.read_bytes()


REAL = _real_recording()


def _consume(data: bytes) -> None:
    """Everything a user can do with a file: must raise nothing but RecordingError."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "f.pvtrec"
        p.write_bytes(data)
        try:
            rec = open_recording(p)
            rec.state()
            fold_recording(p)
            end = rec.duration_ns
            rec.state_at(end // 2)
            seek_state(p, end // 2)
            _consumers(p)
        except RecordingError as exc:
            assert str(exc) and "\n" not in str(exc)


def _consumers(p: Path) -> None:
    """summary and export on the same file, when they exist in this build."""
    import json

    from provetop.recordings.export_perfetto import export_perfetto
    from provetop.recordings.summary import build_summary, format_summary

    summary = build_summary(p)
    format_summary(summary)
    json.dumps(summary, allow_nan=False)
    json.dumps(export_perfetto(p), allow_nan=False)


@SETTINGS
@given(st.binary(max_size=600))
def test_random_bytes_as_a_file(data):
    _consume(data)


@SETTINGS
@given(st.binary(max_size=300))
def test_random_bytes_after_a_valid_prefix(data):
    _consume(REAL[:8] + data)
    _consume(REAL[: REAL.index(b"hello") + 200] + data)


mutation = st.tuples(
    st.sampled_from(["flip", "set", "cut", "insert", "delete"]),
    st.integers(min_value=0, max_value=len(REAL) - 1),
    st.integers(min_value=0, max_value=255),
    st.binary(min_size=1, max_size=8),
)


@SETTINGS
@given(st.lists(mutation, min_size=1, max_size=4))
def test_mutations_of_a_real_recording(mutations):
    data = bytearray(REAL)
    for op, pos, value, blob in mutations:
        if not data:
            break
        pos %= len(data)
        if op == "flip":
            data[pos] ^= 1 << (value % 8)
        elif op == "set":
            data[pos] = value
        elif op == "cut":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = blob
        else:
            del data[pos : pos + 1 + value % 16]
    _consume(bytes(data))


@SETTINGS
@given(st.binary(max_size=2000), st.lists(st.integers(1, 64), min_size=1, max_size=50))
def test_decoder_on_random_bytes(data, chunks):
    decoder = FrameDecoder()
    pos = 0
    try:
        for size in chunks * (len(data) // max(1, sum(chunks)) + 1):
            if pos >= len(data):
                break
            decoder.feed(data[pos : pos + size])
            pos += size
            assert decoder.buffered <= MAX_FRAME + HEADER_SIZE
            for frame in decoder.frames():
                assert isinstance(frame, dict)
    except FrameError as exc:
        assert str(exc)


@st.composite
def frame_streams(draw):
    """Mostly-valid streams: real frames with random lengths, payloads and nesting."""
    leaf = st.one_of(
        st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.text(max_size=5)
    )
    value = st.recursive(
        leaf,
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
        max_leaves=40,
    )
    out = b""
    for _ in range(draw(st.integers(1, 5))):
        payload = msgpack.packb(draw(value), use_bin_type=True)
        length = draw(st.one_of(st.just(len(payload)), st.integers(0, 2**32 - 1)))
        out += length.to_bytes(4, "big") + payload
    return out


@SETTINGS
@given(frame_streams())
def test_decoder_on_frame_shaped_input(data):
    decoder = FrameDecoder()
    try:
        decoder.feed(data)
        for frame in decoder.frames():
            assert isinstance(frame, dict)
    except FrameError as exc:
        assert str(exc)
    _consume(REAL[:8] + data)


_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
)
_BY_TYPE = {
    int: st.integers(-(2**63), 2**64 - 1),
    float: st.floats(allow_nan=True, allow_infinity=True),
    str: st.text(max_size=6),
    bool: st.booleans(),
    dict: st.dictionaries(st.text(max_size=8), _LEAF, max_size=4),
    list: st.lists(_LEAF | st.dictionaries(st.text(max_size=6), _LEAF, max_size=3), max_size=3),
    tuple: st.lists(_LEAF, max_size=3),
}
EVENTS = make_run(partitions=2, workers=2, devices=2, proofs=1, seed=11)[:80]


@st.composite
def odd_but_valid_runs(draw):
    """Schema-valid events whose values are strange: negative or huge ints, NaN, odd maps."""
    from provetop.recordings.schema import EVENTS as SPEC

    events = [dict(e) for e in EVENTS]
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(1, len(events) - 1))
        fields = SPEC[events[i]["k"]]
        if not fields:
            continue
        name = draw(st.sampled_from(sorted(fields)))
        kind = draw(st.sampled_from(fields[name].types))
        events[i][name] = draw(_BY_TYPE[kind])
        if events[i]["k"] in ("phase_begin", "phase_end") and name == "phase":
            events[i][name] = draw(st.sampled_from(sorted(PHASE_NAMES)))
    return events


PHASE_NAMES = {e["phase"] for e in EVENTS if "phase" in e}


@SETTINGS
@given(odd_but_valid_runs())
def test_schema_valid_but_odd_values(events):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "odd.pvtrec"
        with RecordingWriter(p, snapshot_every_s=0.03, background_flush=False) as w:
            for e in events:
                try:
                    w.write(e)
                except RecordingError:
                    pass  # the writer's own reducer refused it: also a clear error
        _consume(p.read_bytes())
