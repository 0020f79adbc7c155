"""Damage the readers must name the same way everywhere: a zero-filled tail whatever byte the
cut falls on, files that are not regular (a FIFO would block for ever), and replay refusing
what summary refuses, with the same line (a flipped bit, two recordings glued together)."""

from __future__ import annotations

import os
import random
import threading

import pytest

import provetop.commands.replay as replay_cmd
from provetop.cli import main
from provetop.recordings.format import PREFIX, TRAILER_SIZE
from provetop.recordings.reader import RecordingError, fold_recording, open_recording
from provetop.recordings.writer import RecordingWriter
from tests.recordings.fixtures import make_run
from tests.recordings.test_io import _plain


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    events = _plain(make_run(partitions=4, workers=2, devices=1, proofs=2, seed=7))
    path = tmp_path_factory.mktemp("damage") / "run.pvtrec"
    with RecordingWriter(path, snapshot_every_s=0.05) as w:
        for e in events:
            w.write(e)
    return path, events


def _starts(data: bytes) -> list[int]:
    pos, out = len(PREFIX), []
    while pos < len(data) - TRAILER_SIZE:
        out.append(pos)
        pos += 4 + int.from_bytes(data[pos : pos + 4], "big")
    return out


def _ends(data: bytes, starts: list[int]) -> list[int]:
    return [s + 4 + int.from_bytes(data[s : s + 4], "big") for s in starts]


def test_a_zero_filled_tail_is_a_truncation_wherever_the_cut_falls(recorded, tmp_path):
    path, events = recorded
    data = path.read_bytes()
    whole = open_recording(path)
    ends = dict(zip(_starts(data), _ends(data, _starts(data)), strict=True))
    target = tmp_path / "z.pvtrec"
    rng = random.Random(3)
    cuts = sorted(rng.sample(range(len(PREFIX) + 1, len(data)), 300))
    for cut in cuts:
        target.write_bytes(data[:cut] + b"\x00" * (len(data) - cut + rng.randrange(0, 9000)))
        rec = open_recording(target)  # never "corrupt frame"
        assert rec.truncated and not rec.complete, cut
        n = sum(1 for off in whole.offsets if ends[off] <= cut)
        # every whole event before the cut; an event whose last bytes are zeros may read too
        assert rec.events[:n] == events[:n] and len(rec.events) in (n, n + 1), cut
        fold_recording(target)


def _fifo(tmp_path):
    fifo = tmp_path / "pipe.pvtrec"
    os.mkfifo(fifo)
    return fifo


def _within(seconds, fn):
    """fn() in a thread; its result, or a failure when it blocks longer than ``seconds``."""
    out = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"still blocked after {seconds} s"
    return out[0]


@pytest.mark.parametrize(
    "argv",
    [["summary"], ["summary", "--json"], ["export", "-o", "{tmp}/x.json"], ["replay"]],
)
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_non_regular_files_are_refused_at_once(argv, kind, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(replay_cmd, "ProvetopApp", _NoApp)
    target = str(_fifo(tmp_path)) if kind == "fifo" else "/dev/zero"
    args = [a.format(tmp=tmp_path) for a in argv]
    args.insert(1, target)
    assert _within(5, lambda: main(args)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    want = "is a FIFO" if kind == "fifo" else "is a character device"
    assert len(err) == 1 and want in err[0], err
    assert not _NoApp.started


class _NoApp:
    """Stands in for the dashboard: replay must refuse before it would start."""

    started = False

    def __init__(self, **kwargs):
        type(self).started = True

    def run(self):
        return 0


def _flip_middle_frame(data: bytes) -> bytes:
    starts = _starts(data)
    at = starts[len(starts) // 2] + 4  # the payload's map header: a map becomes an int
    return data[:at] + bytes([data[at] ^ 0x80]) + data[at + 1 :]


@pytest.mark.parametrize("damage", ["flipped bit", "two recordings glued"])
def test_replay_gives_the_verdict_summary_gives(damage, recorded, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(replay_cmd, "ProvetopApp", _NoApp)
    _NoApp.started = False
    path, _ = recorded
    data = path.read_bytes()
    bad = tmp_path / "bad.pvtrec"
    bad.write_bytes(_flip_middle_frame(data) if damage == "flipped bit" else data + data)
    with pytest.raises(RecordingError):
        fold_recording(bad)
    assert main(["summary", str(bad)]) == 2
    summary_line = capsys.readouterr().err.strip()
    assert main(["replay", str(bad)]) == 2
    replay_line = capsys.readouterr().err.strip()
    assert replay_line == summary_line and len(replay_line.splitlines()) == 1
    assert not _NoApp.started


def test_replay_still_opens_a_sound_recording(recorded, monkeypatch):
    monkeypatch.setattr(replay_cmd, "ProvetopApp", _NoApp)
    _NoApp.started = False
    assert main(["replay", str(recorded[0])]) == 0
    assert _NoApp.started
