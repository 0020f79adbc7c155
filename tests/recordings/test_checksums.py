"""Format version 2: every frame ends with its CRC-32, so a flipped bit is reported, never read
as data; version 1 recordings (no checksums) still read."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from provetop.recordings.format import PREFIX
from provetop.recordings.reader import RecordingError, fold_recording, open_recording
from provetop.recordings.summary import build_summary
from provetop.recordings.writer import RecordingWriter
from tests.recordings.fixtures import make_run

ROOT = Path(__file__).resolve().parents[2]
V1_SAMPLE = ROOT / "recordings" / "samples" / "h200-porep32g-naive16.pvtrec"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = tmp_path_factory.mktemp("crc") / "run.pvtrec"
    with RecordingWriter(path, snapshot_every_s=0.05) as w:
        for e in make_run(partitions=6):
            w.write(e)
    return path


def test_the_writer_writes_version_2_with_checksums(recorded):
    data = recorded.read_bytes()
    assert data.startswith(PREFIX) and PREFIX[-1] == 2
    rec = open_recording(recorded)
    assert rec.version == 2 and rec.complete and rec.header["checksum"] == "crc32"


def test_every_single_bit_flip_is_reported_never_read_as_data(recorded, tmp_path):
    """200 random single-bit flips of a closed recording: each one is a RecordingError from
    the reader (version 1 read 7 of 200 as a changed summary, silently)."""
    data = recorded.read_bytes()
    target = tmp_path / "flipped.pvtrec"
    rng = random.Random(7)
    silent = []
    for bit in rng.sample(range(len(data) * 8), 200):
        damaged = bytearray(data)
        damaged[bit // 8] ^= 1 << (bit % 8)
        target.write_bytes(damaged)
        try:
            _rec, state = fold_recording(target)
        except RecordingError:
            continue
        same = build_summary(state) == build_summary(fold_recording(recorded)[1])
        silent.append((bit // 8, same))
    assert silent == [], f"flips read without a word (byte, same summary): {silent}"


def test_a_flip_names_the_checksum_and_the_byte(recorded, tmp_path):
    data = bytearray(recorded.read_bytes())
    rec = open_recording(recorded)
    at = rec.offsets[len(rec.offsets) // 2] + 10  # inside an event's msgpack
    data[at] ^= 0x01
    target = tmp_path / "one.pvtrec"
    target.write_bytes(data)
    with pytest.raises(RecordingError, match=r"corrupt frame at byte \d+: checksum mismatch"):
        open_recording(target)


def test_a_cut_recording_still_reads_to_its_last_whole_frame(recorded, tmp_path):
    data = recorded.read_bytes()
    whole = open_recording(recorded)
    cut = whole.offsets[len(whole.offsets) // 2] + 3
    target = tmp_path / "cut.pvtrec"
    target.write_bytes(data[:cut])
    rec = open_recording(target)
    assert rec.truncated and rec.events == whole.events[: len(whole.offsets) // 2]


@pytest.mark.skipif(not V1_SAMPLE.exists(), reason="sample recordings not in this checkout")
def test_version_1_recordings_still_read():
    assert V1_SAMPLE.read_bytes()[7] == 1
    rec = open_recording(V1_SAMPLE)
    assert rec.version == 1 and rec.complete and rec.event_count > 0
    fold_recording(V1_SAMPLE)
