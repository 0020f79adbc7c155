"""Byte layout constants of recording files (``docs/recordings.md`` describes them).

::

    MAGIC (7 bytes) | FORMAT_VERSION (1 byte)      the prefix, 8 bytes
    (version 2: every frame is length | msgpack | CRC-32 of length and msgpack, 4 bytes)
    frame: {"k": "recording", ...}                 the recording header
    frame: hello                                   the producer's hello event
    frame: event | seek snapshot ...               telemetry, in the order it was recorded
    frame: {"k": "index", ...}                     only after a clean close
    TRAILER: index offset (8 bytes, big-endian) | END_MAGIC (8 bytes)
"""

from __future__ import annotations

import struct

MAGIC = b"PVTREC\x00"
FORMAT_VERSION = 2  # what the writer writes
# Versions the reader reads: 1 has no checksums; from 2 every frame's last 4 bytes (counted in
# its length) are the CRC-32 of the frame before them, length header included, so a flipped
# bit is reported, never read as data.
READABLE_VERSIONS = (1, 2)
CHECKED_SINCE = 2
PREFIX = MAGIC + bytes([FORMAT_VERSION])
PREFIX_SIZE = len(PREFIX)
END_MAGIC = b"PVTEND\x00\x01"
TRAILER = struct.Struct(">Q8s")
TRAILER_SIZE = TRAILER.size
HEADER_KIND = "recording"  # kind of the recording header frame
INDEX_KIND = "index"  # kind of the index frame written by close()
SUFFIX = ".pvtrec"


def checked(version: int) -> bool:
    """Whether frames of a file of ``version`` end with their CRC-32."""
    return version >= CHECKED_SINCE
