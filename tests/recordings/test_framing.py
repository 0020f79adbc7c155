"""The shared frame codec: exact round trips, and every malformed input refused with FrameError."""

import random

import msgpack
import pytest

from provetop.recordings.framing import (
    HEADER_SIZE,
    MAX_DEPTH,
    MAX_FRAME,
    FrameDecoder,
    FrameError,
    decode_frames,
    decode_payload,
    encode_frame,
)


def _random_value(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if depth < 4 and roll < 0.15:
        return {
            f"k{rng.randrange(100)}": _random_value(rng, depth + 1) for _ in range(rng.randrange(4))
        }
    if depth < 4 and roll < 0.3:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return rng.choice(
        [
            None,
            True,
            False,
            rng.randrange(-(1 << 63), 1 << 64),
            rng.random() * 1e9,
            "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(rng.randrange(20))),
            rng.randbytes(rng.randrange(20)),
        ]
    )


def _random_frames(seed: int, n: int = 60):
    rng = random.Random(seed)
    return [{"k": "marker", "t": rng.randrange(1 << 62), "v": _random_value(rng)} for _ in range(n)]


def test_round_trip_in_random_chunks():
    seed = random.randrange(1 << 30)
    frames = _random_frames(seed)
    data = b"".join(encode_frame(f) for f in frames)
    rng = random.Random(seed)
    decoder = FrameDecoder()
    out = []
    pos = 0
    while pos < len(data):
        step = rng.randrange(1, 200)
        decoder.feed(data[pos : pos + step])
        pos += step
        out.extend(decoder.frames())
    assert out == frames, seed
    assert decoder.buffered == 0 and decoder.frames_decoded == len(frames)
    assert decoder.bytes_consumed == len(data)
    assert decode_frames(data) == frames


def test_header_is_big_endian_length():
    frame = encode_frame({"k": "marker", "t": 1, "name": "x"})
    payload = msgpack.packb({"k": "marker", "t": 1, "name": "x"}, use_bin_type=True)
    assert frame == len(payload).to_bytes(4, "big") + payload


def test_oversized_length_refused_from_the_header_alone():
    decoder = FrameDecoder()
    with pytest.raises(FrameError, match="exceeds"):
        decoder.feed((MAX_FRAME + 1).to_bytes(4, "big"))
    assert decoder.buffered == 0
    with pytest.raises(FrameError):  # the stream stays failed
        decoder.feed(b"\x00")


def test_max_frame_length_itself_is_accepted_as_a_header():
    decoder = FrameDecoder()
    decoder.feed(MAX_FRAME.to_bytes(4, "big"))
    assert list(decoder.frames()) == []  # waits for the payload


def test_encode_refuses_what_decode_would_refuse():
    with pytest.raises(FrameError, match="exceeds"):
        encode_frame({"blob": b"\x00" * (MAX_FRAME + 1)})
    with pytest.raises(FrameError, match="map"):
        encode_frame([1, 2])  # type: ignore[arg-type]
    with pytest.raises(FrameError, match="cannot encode"):
        encode_frame({"x": object()})


@pytest.mark.parametrize(
    "payload, message",
    [
        (msgpack.packb([1, 2]), "array"),
        (msgpack.packb("text"), "string"),
        (msgpack.packb(7), "not a map"),
        (b"\xc1", "undecodable"),
        (b"\x81", "undecodable"),  # map announced, no entries
        (msgpack.packb({}) + b"\x00", "trailing"),
        (msgpack.packb({1: 2}), "undecodable"),  # integer keys are refused (strict_map_key)
        (b"\xd4\x01\x02", "extension"),
        (
            msgpack.packb({"s": "\udc80".encode("utf-8", "surrogatepass")}, use_bin_type=False),
            "undecodable",
        ),
        (b"", "undecodable"),
    ],
)
def test_bad_payloads(payload, message):
    with pytest.raises(FrameError, match=message):
        decode_payload(payload)
    decoder = FrameDecoder()
    decoder.feed(len(payload).to_bytes(4, "big") + payload)
    with pytest.raises(FrameError, match="stream byte 0"):
        list(decoder.frames())


def _nested(depth: int):
    obj: object = 0
    for i in range(depth - 1):
        obj = [obj] if i % 2 else {"x": obj}
    return {"k": obj}


def test_nesting_bound():
    assert decode_payload(msgpack.packb(_nested(MAX_DEPTH)))  # exactly the bound is fine
    with pytest.raises(FrameError, match="nested deeper"):
        decode_payload(msgpack.packb(_nested(MAX_DEPTH + 1)))
    # far deeper than msgpack's own stack: still a FrameError, never a RecursionError
    deep = b"\x81\xa1k" + b"\x91" * 100_000 + b"\xc0"
    with pytest.raises(FrameError, match="nested deeper"):
        decode_payload(deep)


def test_container_length_bound():
    huge_array = b"\x81\xa1k" + b"\xdd" + (1 << 30).to_bytes(4, "big")  # claims 2^30 items
    with pytest.raises(FrameError):
        decode_payload(huge_array)


def test_buffer_is_bounded_when_frames_are_not_read():
    decoder = FrameDecoder(max_buffer=0)  # raised to the minimum: one maximal frame + header
    assert decoder.max_buffer == MAX_FRAME + HEADER_SIZE
    frame = encode_frame({"k": "marker", "t": 0, "name": "x" * 1000})
    fed = 0
    with pytest.raises(FrameError, match="buffer"):
        while True:
            decoder.feed(frame)
            fed += len(frame)
    assert fed <= decoder.max_buffer


def test_decode_frames_reports_an_incomplete_end():
    data = encode_frame({"k": "marker", "t": 0, "name": "x"})
    with pytest.raises(FrameError, match="incomplete"):
        decode_frames(data[:-1])


def test_timestamp_extension_is_refused():
    with pytest.raises(FrameError, match="Timestamp"):
        decode_payload(msgpack.packb({"a": [msgpack.Timestamp(1, 2)]}))


def test_a_lower_frame_limit_for_small_peers():
    decoder = FrameDecoder(max_frame=1024)
    decoder.feed(encode_frame({"k": "command", "id": 1, "cmd": "pause", "args": {}}))
    assert next(decoder.frames())["cmd"] == "pause"
    with pytest.raises(FrameError, match="1024-byte limit"):
        decoder.feed((1025).to_bytes(4, "big"))
    assert decoder.max_buffer >= 1024 + HEADER_SIZE
    assert FrameDecoder(max_frame=1 << 40).max_frame == MAX_FRAME
