"""Coverage-guided fuzzing of the frame decoder and the recording reader with atheris.

Not part of the pytest run (hypothesis covers CI, ``tests/recordings/test_fuzz.py``); run it by
hand for longer campaigns::

    pip install atheris
    python tests/recordings/atheris_fuzz.py reader -max_total_time=300
    python tests/recordings/atheris_fuzz.py decoder -max_total_time=300

Any exception other than RecordingError / FrameError, and any decoder buffer beyond its bound,
is a crash that atheris reports with the input that caused it.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import atheris  # noqa: E402

with atheris.instrument_imports():
    from provetop.recordings.export_perfetto import export_perfetto
    from provetop.recordings.framing import HEADER_SIZE, MAX_FRAME, FrameDecoder, FrameError
    from provetop.recordings.reader import RecordingError, open_recording, seek_state
    from provetop.recordings.summary import build_summary, format_summary

from provetop.recordings.writer import RecordingWriter  # noqa: E402
from tests.recordings.fixtures import make_run  # noqa: E402

_DIR = Path(tempfile.mkdtemp(prefix="atheris-rec-"))
_FILE = _DIR / "input.pvtrec"


def reader(data: bytes) -> None:
    _FILE.write_bytes(data)
    try:
        rec = open_recording(_FILE)
        rec.state_at(rec.duration_ns // 2)
        seek_state(_FILE, rec.duration_ns // 2)
        format_summary(build_summary(rec))
        export_perfetto(rec)
    except RecordingError:
        pass


def decoder(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    dec = FrameDecoder()
    try:
        while fdp.remaining_bytes():
            dec.feed(fdp.ConsumeBytes(fdp.ConsumeIntInRange(1, 512)))
            if dec.buffered > MAX_FRAME + HEADER_SIZE:
                raise AssertionError(f"decoder holds {dec.buffered} bytes")
            for frame in dec.frames():
                assert isinstance(frame, dict)
    except FrameError:
        pass


def _seed_corpus() -> Path:
    corpus = _DIR / "corpus"
    corpus.mkdir()
    path = corpus / "real.pvtrec"
    with RecordingWriter(path, snapshot_every_s=0.05, background_flush=False) as w:
        for e in make_run(partitions=2, workers=2, devices=1, proofs=1, seed=3)[:60]:
            w.write(e)
    return corpus


def main() -> None:
    target = {"reader": reader, "decoder": decoder}.get(sys.argv[1] if len(sys.argv) > 1 else "")
    if target is None:
        sys.exit("usage: atheris_recordings.py reader|decoder [libFuzzer options]")
    args = [sys.argv[0], *sys.argv[2:], str(_seed_corpus())]
    atheris.Setup(args, target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
