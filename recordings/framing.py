"""The one framing shared by the socket stream and recording files.

A frame is a 4-byte unsigned big-endian length N followed by N bytes holding one msgpack map
with string keys (``docs/telemetry.md``, "Wire protocol"). This module is the only place that
turns bytes into telemetry objects, so every input path gets the same defences against hostile
or damaged bytes: a size bound (:data:`MAX_FRAME`), bounded container lengths, a nesting bound
(:data:`MAX_DEPTH`), and one exception type (:class:`FrameError`) with a message a person can act
on. Nothing here raises anything else on any input.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import Any

import msgpack

MAX_FRAME = 16 << 20  # bytes of msgpack in one frame; larger frames are refused
HEADER = struct.Struct(">I")  # the 4-byte big-endian length prefix
HEADER_SIZE = HEADER.size
MAX_DEPTH = 32  # nesting of maps/arrays in one frame (the top-level map is depth 1)
MAX_ITEMS = 1 << 20  # elements of one array, or entries of one map


class FrameError(ValueError):
    """Bytes that are not a valid frame: oversized, undecodable, not a map, nested too deep."""


def encode_frame(obj: dict[str, Any]) -> bytes:
    """Length-prefix and msgpack one map. Refuses what a decoder would refuse, so a producer
    bug surfaces where it happens instead of on the other side of a socket."""
    if not isinstance(obj, dict):
        raise FrameError(f"a frame holds a map, not a {type(obj).__name__}")
    try:
        payload: bytes = msgpack.packb(obj, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise FrameError(f"cannot encode frame: {exc}") from None
    if len(payload) > MAX_FRAME:
        raise FrameError(f"frame of {len(payload)} bytes exceeds the {MAX_FRAME}-byte limit")
    return HEADER.pack(len(payload)) + payload


CRC = struct.Struct(">I")  # a recording frame's checksum (format version 2)
CRC_SIZE = CRC.size


def encode_checked_frame(obj: dict[str, Any]) -> bytes:
    """A recording's frame (format version 2): :func:`encode_frame` with the CRC-32 of the
    length header and the msgpack as its last 4 bytes, counted in the length."""
    if not isinstance(obj, dict):
        raise FrameError(f"a frame holds a map, not a {type(obj).__name__}")
    try:
        payload: bytes = msgpack.packb(obj, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise FrameError(f"cannot encode frame: {exc}") from None
    if len(payload) + CRC_SIZE > MAX_FRAME:
        raise FrameError(f"frame of {len(payload)} bytes exceeds the {MAX_FRAME}-byte limit")
    head = HEADER.pack(len(payload) + CRC_SIZE)
    return head + payload + CRC.pack(zlib.crc32(payload, zlib.crc32(head)))


def checked_payload(
    head: bytes | bytearray | memoryview, body: bytes | bytearray | memoryview
) -> bytes | bytearray | memoryview:
    """The msgpack of a version 2 frame (``body`` is everything its length counts), after its
    CRC-32 matched; :class:`FrameError` naming the mismatch otherwise."""
    if len(body) < CRC_SIZE:
        raise FrameError(f"a checked frame of {len(body)} bytes has no room for its checksum")
    payload = body[: len(body) - CRC_SIZE]
    (stored,) = CRC.unpack(body[len(body) - CRC_SIZE :])
    if zlib.crc32(payload, zlib.crc32(head)) != stored:
        raise FrameError("checksum mismatch (a flipped bit or overwritten bytes)")
    return payload


def frame_length(header: bytes | bytearray | memoryview, max_frame: int = MAX_FRAME) -> int:
    """The payload length announced by a 4-byte header; :class:`FrameError` when oversized."""
    length: int
    (length,) = HEADER.unpack(header)
    if length > max_frame:
        raise FrameError(f"frame length {length} exceeds the {max_frame}-byte limit")
    return length


def _reject_ext(code: int, data: bytes) -> Any:
    raise FrameError(f"msgpack extension type {code} is not allowed")


# The bounds msgpack itself applies to every frame decoded here: string keys only, no extension
# types, no string, binary or container longer than one frame could hold. Also the options of
# any other msgpack decoder of frames (provetop.sources.replay splits seek snapshots with an
# Unpacker).
UNPACK_LIMITS: dict[str, Any] = {
    "raw": False,
    "strict_map_key": True,
    "use_list": True,
    "ext_hook": _reject_ext,
    "max_str_len": MAX_FRAME,
    "max_bin_len": MAX_FRAME,
    "max_array_len": MAX_ITEMS,
    "max_map_len": MAX_ITEMS,
    "max_ext_len": MAX_FRAME,
}


def decode_payload(
    payload: bytes | bytearray | memoryview, max_frame: int = MAX_FRAME, *, walk: bool = True
) -> dict[str, Any]:
    """Decode one frame's payload (without its length prefix) into a map.

    Raises :class:`FrameError` for anything that is not exactly one msgpack map within the
    bounds; never another exception type. The decoded objects take at most about 64 times the
    payload's bytes (an empty map is one byte of msgpack and ~64 bytes of Python), so a reader
    of untrusted peers should pass a ``max_frame`` sized for what they may send.

    ``walk=False`` skips :func:`check_depth`'s Python-level walk, which costs about as much as
    the decoding itself: replay's seeks (``provetop.sources.replay``) skip it and catch whatever a
    damaged frame makes the reducer raise. msgpack's own nesting limit and every other bound
    still hold."""
    if len(payload) > max_frame:
        raise FrameError(f"frame of {len(payload)} bytes exceeds the {max_frame}-byte limit")
    try:
        obj = msgpack.unpackb(payload, **UNPACK_LIMITS)
    except FrameError:
        raise
    except msgpack.exceptions.StackError:
        raise FrameError(f"frame nested deeper than {MAX_DEPTH} levels") from None
    except msgpack.exceptions.ExtraData:
        raise FrameError("frame holds trailing bytes after its map") from None
    except Exception as exc:  # msgpack raises several types on bad input; one is reported
        detail = str(exc) or {"FormatError": "invalid msgpack type byte"}.get(
            type(exc).__name__, type(exc).__name__
        )
        raise FrameError(f"undecodable msgpack: {detail}") from None
    if not isinstance(obj, dict):
        raise FrameError(f"frame holds a {_kind(obj)}, not a map")
    if walk:
        check_depth(obj)
    return obj


def _kind(obj: Any) -> str:
    kinds: dict[type[object], str] = {list: "array", str: "string", bytes: "binary"}
    return kinds.get(type(obj), type(obj).__name__)


_SCALARS = frozenset((str, bytes, int, float, bool, type(None)))


def check_depth(obj: Any, limit: int = MAX_DEPTH) -> None:
    """Raise :class:`FrameError` when maps/arrays nest deeper than ``limit`` or a value is not a
    plain msgpack type (msgpack decodes its timestamp extension without asking the ext hook).
    Iterative, so a deep object cannot exhaust the Python stack."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            raise FrameError(f"frame nested deeper than {limit} levels")
        for child in node.values() if type(node) is dict else node:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, depth + 1))
            elif kind not in _SCALARS:
                raise FrameError(f"frame holds a {kind.__name__}, not a plain value")


class FrameDecoder:
    """Incremental decoder for a byte stream (a socket): ``feed`` bytes, iterate ``frames()``.

    Memory is bounded: the decoder keeps at most one incomplete frame (header plus at most
    :data:`MAX_FRAME` bytes) and the unconsumed rest of the last ``feed``; a feed that would
    leave more than ``max_buffer`` bytes waiting raises :class:`FrameError` instead of growing.
    An oversized length is refused as soon as its 4 header bytes arrive, before any payload is
    buffered. ``max_frame`` lowers the frame limit for peers that only send small frames (an
    engine reading client commands), which also lowers the decoded-object bound. After a
    :class:`FrameError` the stream is unusable (framing is lost): close it.
    """

    def __init__(self, max_buffer: int | None = None, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = min(max(0, max_frame), MAX_FRAME)
        if max_buffer is None:  # one maximal frame plus a socket read or two
            max_buffer = self.max_frame + HEADER_SIZE + (1 << 20)
        self.max_buffer = max(max_buffer, self.max_frame + HEADER_SIZE)
        self._buf = bytearray()
        self._pos = 0  # start of unconsumed bytes in _buf
        self._failed: FrameError | None = None
        self.frames_decoded = 0
        self.bytes_consumed = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes. Raises :class:`FrameError` on an oversized length or when the
        caller has let more than ``max_buffer`` bytes pile up without reading frames."""
        if self._failed is not None:
            raise self._failed
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        if len(self._buf) + len(data) > self.max_buffer:
            self._fail(
                f"{len(self._buf) + len(data)} bytes waiting exceed the decoder's "
                f"{self.max_buffer}-byte buffer (read frames between feeds)"
            )
        self._buf += data
        if len(self._buf) >= HEADER_SIZE:
            self._length_at(0)

    def _fail(self, message: str) -> None:
        self._failed = FrameError(message)
        self._buf = bytearray()
        self._pos = 0
        raise self._failed

    def _length_at(self, pos: int) -> int:
        try:
            return frame_length(self._buf[pos : pos + HEADER_SIZE], self.max_frame)
        except FrameError as exc:
            self._fail(f"{exc} (at stream byte {self.bytes_consumed + pos - self._pos})")
            raise  # unreachable; _fail raises

    def next_frame(self) -> dict[str, Any] | None:
        """The next complete frame, or None when more bytes are needed."""
        if self._failed is not None:
            raise self._failed
        if self.buffered < HEADER_SIZE:
            return None
        length = self._length_at(self._pos)
        end = self._pos + HEADER_SIZE + length
        if end > len(self._buf):
            return None
        start = self._pos + HEADER_SIZE
        where = self.bytes_consumed
        try:
            with memoryview(self._buf) as view, view[start:end] as payload:
                obj = decode_payload(payload, self.max_frame)
        except FrameError as exc:
            self._fail(f"{exc} (frame at stream byte {where})")
        self._pos = end
        self.bytes_consumed += HEADER_SIZE + length
        self.frames_decoded += 1
        if self._pos == len(self._buf):
            self._buf.clear()
            self._pos = 0
        return obj

    def frames(self) -> Iterator[dict[str, Any]]:
        """Yield every complete frame buffered so far."""
        while True:
            obj = self.next_frame()
            if obj is None:
                return
            yield obj

    __iter__ = frames


def decode_frames(data: bytes | bytearray | memoryview) -> list[dict[str, Any]]:
    """Decode a whole byte string of frames; :class:`FrameError` if it ends mid-frame."""
    decoder = FrameDecoder(max_buffer=len(data) + HEADER_SIZE + MAX_FRAME)
    decoder.feed(data)
    out = list(decoder.frames())
    if decoder.buffered:
        raise FrameError(f"{decoder.buffered} bytes of an incomplete frame at the end")
    return out
