"""CuzkSource end to end: a log written while it is followed, rotated, truncated; stdin."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time

from provetop.recordings.schema import validate
from provetop.recordings.state import State
from provetop.sources.cuzk import sim
from provetop.sources.cuzk.convert import Converter
from provetop.sources.cuzk.source import CuzkSource


def batch(lines):
    conv = Converter()
    events = [e for line in lines for e in conv.feed_line(line)]
    return events + conv.flush(final=False)


def done_of(events):
    return sorted(
        (e["proof"], e["partition"], e["ok"], e["gpu_total_ms"], e["mutex_wait_ms"])
        for e in events
        if e["k"] == "partition_done"
    )


def test_follow_a_log_through_rotation_and_truncation(tmp_path):
    rng = random.Random(random.randrange(1 << 30))
    run = sim.simulate(rng, jobs=2, partitions=3, workers_per_device=2)
    path = tmp_path / "cuzk-daemon.log"
    path.write_text("")
    third = len(run.lines) // 3
    events = []
    with CuzkSource(str(path), poll_interval=0.01) as source:
        with open(path, "a") as out:  # first third, flushed in bursts
            for i, line in enumerate(run.lines[:third]):
                out.write(line + "\n")
                if i % 7 == 0:
                    out.flush()
                    events += source.poll()
        time.sleep(0.1)
        events += source.poll()
        os.rename(path, tmp_path / "cuzk-daemon.log.1")  # logrotate: rename, new file
        with open(path, "w") as out:
            out.write("".join(line + "\n" for line in run.lines[third : 2 * third]))
        time.sleep(0.2)
        events += source.poll()
        with open(path, "r+") as out:  # copytruncate, then the daemon keeps writing
            out.truncate(0)
        deadline = time.monotonic() + 5  # (like tail -F, a truncation is seen by size, so the
        while source.stats()["truncations"] == 0 and time.monotonic() < deadline:  # file must
            time.sleep(0.01)  # not regrow past the old offset before the next poll)
        with open(path, "a") as out:
            out.write("".join(line + "\n" for line in run.lines[2 * third :]))
            out.write("TIMELINE,99999,GPU_PI")  # cut short: never trusted
        deadline = time.monotonic() + 8
        want = len(run.calls)
        while time.monotonic() < deadline:
            events += source.poll()
            if sum(e["k"] == "partition_done" for e in events) == want:
                break
            time.sleep(0.02)
        stats = source.stats()
    events += source.poll()
    for e in events:
        validate(e)
    assert [e["t"] for e in events] == sorted(e["t"] for e in events)
    assert done_of(events) == done_of(batch(run.lines))
    assert stats["rotations"] == 1 and stats["truncations"] == 1
    assert stats["jobs"] == {j: i for i, j in enumerate(run.job_ids)}
    assert State().fold(events).totals()["partitions_ok"] == len(run.calls)


def test_stdin_source_in_a_subprocess(tmp_path):
    """``provetop watch --cuzk-log -``: lines on standard input, events until EOF."""
    run = sim.simulate(random.Random(random.randrange(1 << 30)), jobs=1, partitions=3)
    script = (
        "import json, sys\n"
        "from provetop.sources.cuzk.source import CuzkSource\n"
        "src = CuzkSource('-', poll_interval=0.01).start()\n"
        "for e in src.events(timeout=10):\n"
        "    print(json.dumps(e))\n"
    )
    text = run.text() + "garbage\n"
    proc = subprocess.run(
        [sys.executable, "-c", script],
        input=text.encode(),
        capture_output=True,
        timeout=60,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    assert proc.returncode == 0, proc.stderr.decode()
    import json

    events = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert events[0]["k"] == "hello" and events[-1]["k"] == "engine_state"
    assert events[-1]["state"] == "done"
    assert done_of(events) == done_of(batch(run.lines))


class Sink:
    def __init__(self):
        self.batches = []
        self.statuses = []

    def events(self, source, batch):
        self.batches.append(batch)

    def status(self, source, text, level="info"):
        self.statuses.append((text, level))


def test_source_speaks_the_dashboard_protocol(tmp_path):
    import threading

    import pytest

    from provetop.sources.errors import SourceError
    from provetop.sources.protocol import EventSource

    run = sim.simulate(random.Random(random.randrange(1 << 30)), jobs=1, partitions=2)
    path = tmp_path / "cuzk.log"
    path.write_text(run.text() + "not a cuzk line\n")
    source = CuzkSource(str(path), poll_interval=0.01)
    assert isinstance(source, EventSource) and source.read_only
    assert source.label == "cuzk:cuzk.log"
    sink = Sink()
    worker = threading.Thread(target=source.run, args=(sink,))
    worker.start()
    try:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            got = [e for b in sink.batches for e in b]
            if sum(e["k"] == "partition_done" for e in got) == 2 and len(sink.statuses) >= 2:
                break
            time.sleep(0.02)
        with pytest.raises(SourceError):
            source.send("pause", {})
    finally:  # a source left running holds its (not a daemon) thread: the run would not end
        source.close()
        worker.join(timeout=5)
    assert not worker.is_alive()
    events = [e for b in sink.batches for e in b]
    assert events[0]["k"] == "hello" and events[0]["source"] == "cuzk"
    assert done_of(events) == done_of(batch(run.lines))
    texts = [t for t, _ in sink.statuses]
    assert texts[0].startswith("following cuzk") and texts[-1] == "closed"
    assert "cuzk: 1 log lines not understood" in texts
